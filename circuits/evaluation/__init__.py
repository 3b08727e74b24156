"""Step 3b, evaluate (Table 1): math and generic benchmarks through lm-evaluation-harness.

- :mod:`~circuits.evaluation.config`: :class:`EvalConfig` and the tasks (no torch).
- :mod:`~circuits.evaluation.tasks`: the tasks, their documents and :func:`evaluate`.
- :mod:`~circuits.evaluation.lm_eval`: an lm-eval ``LM`` that runs the model (either backend).

Names are imported on first use, so the config is importable without torch.
"""

from __future__ import annotations

from circuits.lazy import lazy_exports

_EXPORTS: dict[str, str] = {
    **dict.fromkeys(("ALL_TASKS", "EvalConfig"), "circuits.evaluation.config"),
    **dict.fromkeys(("EvalResult",), "circuits.evaluation.result"),
    **dict.fromkeys(("evaluate",), "circuits.evaluation.tasks"),
}

__all__ = sorted(_EXPORTS)


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
