"""The audited attribution screen (docs/beyond.md): AtP* and GradDrop ranks checked against exact patching.

``run(config, out)`` is the job's one entry point; names are imported on first use, so the config is importable
without torch."""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {"ScreenConfig": "circuits.beyond.screen.config", "ScreenResult": "circuits.beyond.screen.result",
            "run": "circuits.beyond.screen.job", "screen": "circuits.beyond.screen.job"}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        value = getattr(importlib.import_module(_EXPORTS[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
