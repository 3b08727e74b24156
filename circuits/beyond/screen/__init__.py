"""The audited attribution screen (docs/beyond.md): AtP* and GradDrop ranks checked against exact patching."""

from circuits.beyond.screen.config import ScreenConfig
from circuits.beyond.screen.result import ScreenResult
from circuits.beyond.screen.job import run_screen, screen

__all__ = ["ScreenConfig", "ScreenResult", "run_screen", "screen"]
