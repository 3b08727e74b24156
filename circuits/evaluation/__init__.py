"""Step 3b, evaluate (Table 1): math and generic benchmarks through lm-evaluation-harness.

- :mod:`~circuits.evaluation.config`: :class:`EvalConfig` and the tasks (no torch).
- :mod:`~circuits.evaluation.tasks`: the tasks, their documents and :func:`evaluate`.
- :mod:`~circuits.evaluation.lm_eval`: an lm-eval ``LM`` that runs the model (either backend).
- :mod:`~circuits.evaluation.study`: the Precise SFT study (``circuits sft-study``, issue 39): every arm trained and
  scored per item (:mod:`~circuits.evaluation.study_items`), its config and result in ``study_config`` and
  ``study_result``.

Names are imported on first use, so the config is importable without torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from circuits.lazy import lazy_package

if TYPE_CHECKING:  # the package's names (editors read them; circuits.lazy.lazy_package makes the lazy table of them)
    from circuits.evaluation.config import ALL_TASKS, EvalConfig
    from circuits.evaluation.result import EvalResult
    from circuits.evaluation.tasks import evaluate

__getattr__, __dir__, __all__ = lazy_package(__name__, __file__)
