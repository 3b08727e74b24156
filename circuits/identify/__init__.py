"""Step 1, identify (Section 4.1): patch every head and MLP at END, rank them, pick the key components.

The job of the paper's step; the patching itself is :mod:`circuits.patching`.

- :mod:`~circuits.identify.config`: :class:`IdentifyConfig`, what decides a result.
- :mod:`~circuits.identify.job`: :func:`identify` for one task, :func:`run_identify` for the CLI job.
- :mod:`~circuits.identify.result`: :class:`IdentifyResult`, what ``circuits identify`` saves.
"""

from circuits.identify.config import IdentifyConfig
from circuits.identify.job import identify, run_identify
from circuits.identify.result import IdentifyResult, PerOperation, load_identify

__all__ = ["IdentifyConfig", "IdentifyResult", "PerOperation", "identify", "load_identify", "run_identify"]
