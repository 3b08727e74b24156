"""Key heads across seeds, templates and pair counts (docs/beyond.md).

``run(config, out)`` is the job's one entry point; names are imported on first use, so the config is importable
without torch."""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {"StabilityConfig": "circuits.beyond.stability.config", "StabilityResult": "circuits.beyond.stability.result",
            "run": "circuits.beyond.stability.job"}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        value = getattr(importlib.import_module(_EXPORTS[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
