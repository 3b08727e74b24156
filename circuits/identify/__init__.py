"""Step 1, identify (Section 4.1): patch every head and MLP at END, rank them, pick the key components.

- :mod:`~circuits.identify.engine`: :func:`sweep`, the END-only batched patching engine, and its result.
- :mod:`~circuits.identify.end_layers`: the END-only pieces of a forward pass the engine runs.
- :mod:`~circuits.identify.reference`: the plain one-forward-per-component loop it is tested against.
- :mod:`~circuits.identify.metrics`: the baseline and the metrics (the paper's relative logit, ...; callables).
- :mod:`~circuits.identify.rules`: key rules (``fraction>=0.05``, ``top10``) and the one ranking.
- :mod:`~circuits.identify.result`: :class:`IdentifyResult`, what ``circuits identify`` saves.
- :mod:`~circuits.identify.job`: :func:`identify` for one task, :func:`run_identify` for the CLI job.
"""

from circuits.identify.config import IdentifyConfig
from circuits.identify.engine import SweepResult, all_components, sweep
from circuits.identify.job import identify, run_identify
from circuits.identify.metrics import METRICS, Baseline, Metric, get_metric, logits_metric
from circuits.identify.result import IdentifyResult, PerOperation, load_identify
from circuits.identify.rules import DEFAULT_KEY_RULE, KeyRule, rank

__all__ = ["DEFAULT_KEY_RULE", "METRICS", "Baseline", "IdentifyConfig", "IdentifyResult", "KeyRule", "Metric",
           "PerOperation", "SweepResult", "all_components", "get_metric", "identify", "load_identify", "logits_metric",
           "rank", "run_identify", "sweep"]
