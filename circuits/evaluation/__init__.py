"""Step 3b, evaluate (Table 1): math and generic benchmarks through lm-evaluation-harness.

- :mod:`~circuits.evaluation.tasks`: the tasks, their documents and :func:`evaluate`.
- :mod:`~circuits.evaluation.lm_eval`: an lm-eval ``LM`` that runs a ``HookedTransformer``.
"""

from circuits.evaluation.result import EvalResult
from circuits.evaluation.tasks import ALL_TASKS, EvalConfig, evaluate

__all__ = ["ALL_TASKS", "EvalConfig", "EvalResult", "evaluate"]
