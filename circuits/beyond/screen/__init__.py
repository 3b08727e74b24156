"""The audited attribution screen (docs/beyond.md): AtP* and GradDrop ranks checked against exact patching.

``run(config, out)`` is the job's one entry point; names are imported on first use, so the config is importable
without torch."""

from __future__ import annotations

from circuits.lazy import lazy_exports

_EXPORTS = {"ScreenConfig": "circuits.beyond.screen.config", "ScreenResult": "circuits.beyond.screen.result",
            "run": "circuits.beyond.screen.job", "screen": "circuits.beyond.screen.job"}

__all__ = sorted(_EXPORTS)


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
