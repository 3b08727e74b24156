"""Sender -> receiver edges at END and the circuit graph (docs/beyond.md).

``run(config, out)`` is the job's one entry point (``circuits edges``); names are imported on first use, so the config
is importable without torch."""

from __future__ import annotations

from circuits.lazy import lazy_exports

_EXPORTS = {"EdgesConfig": "circuits.beyond.edges.config", "EdgeResult": "circuits.beyond.edges.result",
            "resolve_receivers": "circuits.beyond.edges.job", "run": "circuits.beyond.edges.job"}

__all__ = sorted(_EXPORTS)


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
