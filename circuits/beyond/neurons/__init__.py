"""The key MLPs' neurons at END and their knockout (docs/beyond.md).

``run(config, out)`` is the job's one entry point; names are imported on first use, so the config is importable
without torch."""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {"NeuronConfig": "circuits.beyond.neurons.config", "NeuronResult": "circuits.beyond.neurons.result",
            "run": "circuits.beyond.neurons.job"}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        value = getattr(importlib.import_module(_EXPORTS[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
