"""Step 1, identify (Section 4.1): patch every head and MLP at END, rank them, pick the key components.

The job of the paper's step; the patching itself is :mod:`circuits.patching`.

- :mod:`~circuits.identify.config`: :class:`IdentifyConfig`, what decides a result.
- :mod:`~circuits.identify.job`: :func:`identify` for one task, :func:`run` (``run(config, out)``) for the job.
- :mod:`~circuits.identify.result`: :class:`IdentifyResult`, what ``circuits identify`` saves.

Names are imported on first use, so the config is importable without torch.
"""

from __future__ import annotations

from circuits.lazy import lazy_exports

_EXPORTS = {"IdentifyConfig": "circuits.identify.config", "identify": "circuits.identify.job",
            "run": "circuits.identify.job", "IdentifyResult": "circuits.identify.result",
            "PerOperation": "circuits.identify.result", "load_identify": "circuits.identify.result"}

__all__ = sorted(_EXPORTS)


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
