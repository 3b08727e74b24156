"""Step 1, identify (Section 4.1): patch every head and MLP at END, rank them, pick the key components.

The job of the paper's step; the patching itself is :mod:`circuits.patching`.

- :mod:`~circuits.identify.config`: :class:`IdentifyConfig`, what decides a result.
- :mod:`~circuits.identify.job`: :func:`identify` for one task, :func:`run` (``run(config, out)``) for the job.
- :mod:`~circuits.identify.result`: :class:`IdentifyResult`, what ``circuits identify`` saves.

Names are imported on first use, so the config is importable without torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from circuits.lazy import lazy_package

if TYPE_CHECKING:  # the package's names (editors read them; circuits.lazy.lazy_package makes the lazy table of them)
    from circuits.identify.config import IdentifyConfig
    from circuits.identify.job import identify, run
    from circuits.identify.result import IdentifyResult, KeyHead, PerOperation, load_identify

__getattr__, __dir__, __all__ = lazy_package(__name__, __file__)
