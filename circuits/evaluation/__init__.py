"""Step 3b, evaluate (Table 1): math and generic benchmarks through lm-evaluation-harness.

- :mod:`~circuits.evaluation.config`: :class:`EvalConfig` and the tasks (no torch).
- :mod:`~circuits.evaluation.tasks`: the tasks, their documents and :func:`evaluate`.
- :mod:`~circuits.evaluation.lm_eval`: an lm-eval ``LM`` that runs a ``HookedTransformer``.

Names are imported on first use, so the config is importable without torch.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS: dict[str, str] = {
    **dict.fromkeys(("ALL_TASKS", "EvalConfig"), "circuits.evaluation.config"),
    **dict.fromkeys(("EvalResult",), "circuits.evaluation.result"),
    **dict.fromkeys(("evaluate",), "circuits.evaluation.tasks"),
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        value = getattr(importlib.import_module(_EXPORTS[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
