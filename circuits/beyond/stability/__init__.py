"""Key heads across seeds, templates and pair counts (docs/beyond.md).

``run(config, out)`` is the job's one entry point; names are imported on first use, so the config is importable
without torch."""

from __future__ import annotations

from circuits.lazy import lazy_exports

_EXPORTS = {"StabilityConfig": "circuits.beyond.stability.config", "StabilityResult": "circuits.beyond.stability.result",
            "run": "circuits.beyond.stability.job"}

__all__ = sorted(_EXPORTS)


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
