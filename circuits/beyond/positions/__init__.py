"""Exact patching at every token position: the information flow into END (docs/beyond.md).

``run(config, out)`` is the job's one entry point; names are imported on first use, so the config is importable
without torch."""

from __future__ import annotations

from circuits.lazy import lazy_exports

_EXPORTS = {"PositionConfig": "circuits.beyond.positions.config", "PositionResult": "circuits.beyond.positions.result",
            "run": "circuits.beyond.positions.job"}

__all__ = sorted(_EXPORTS)


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
