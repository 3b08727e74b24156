"""The audited attribution screen (docs/beyond.md): AtP* and GradDrop ranks checked against exact patching."""

from circuits.beyond.screen.job import ScreenConfig, ScreenResult, run_screen, screen

__all__ = ["ScreenConfig", "ScreenResult", "run_screen", "screen"]
