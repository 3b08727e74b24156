"""The audited attribution screen (docs/beyond.md): AtP* and GradDrop ranks checked against exact patching.

``run(config, out)`` is the job's one entry point; names are imported on first use, so the config is importable
without torch."""

from __future__ import annotations

from typing import TYPE_CHECKING

from circuits.lazy import lazy_package

if TYPE_CHECKING:  # the package's names (editors read them; circuits.lazy.lazy_package makes the lazy table of them)
    from circuits.beyond.screen.config import ScreenConfig
    from circuits.beyond.screen.job import run, screen
    from circuits.beyond.screen.result import ScreenResult

__getattr__, __dir__, __all__ = lazy_package(__name__, __file__)
