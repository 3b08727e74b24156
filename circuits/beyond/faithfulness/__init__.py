"""Faithfulness of the circuits each ranking yields, as MIB scores circuit discovery (issue 24; docs/beyond.md).

``run(config, out)`` is the job's one entry point; :func:`~circuits.beyond.faithfulness.job.faithfulness` the same on
a loaded model and pairs (``cc.faithfulness``). Names are imported on first use, so the config is importable without
torch."""

from __future__ import annotations

from circuits.lazy import lazy_exports

_EXPORTS = {"FaithfulnessConfig": "circuits.beyond.faithfulness.config",
            "FaithfulnessResult": "circuits.beyond.faithfulness.result",
            "RANKINGS": "circuits.beyond.faithfulness.config", "run": "circuits.beyond.faithfulness.job",
            "faithfulness": "circuits.beyond.faithfulness.job", "rank": "circuits.beyond.faithfulness.job"}

__all__ = sorted(_EXPORTS)


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
