"""The key MLPs' neurons at END and their knockout (docs/beyond.md).

``run(config, out)`` is the job's one entry point; names are imported on first use, so the config is importable
without torch."""

from __future__ import annotations

from circuits.lazy import lazy_exports

_EXPORTS = {"NeuronConfig": "circuits.beyond.neurons.config", "NeuronResult": "circuits.beyond.neurons.result",
            "run": "circuits.beyond.neurons.job"}

__all__ = sorted(_EXPORTS)


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
