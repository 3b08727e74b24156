"""Step 1b, validate (Section 4.1 "Validation", Figures 3-4, Tables 3-4): knock the key heads out.

- :mod:`~circuits.validate.knockout`: knockout by mean, zero or resample ablation (run by the mechanism's ablation
  executor, :mod:`circuits.patching.ablation.executor`: shared-prefix caching, many ablation sets per forward pass); top-k vs
  random curves.
- :mod:`~circuits.validate.neuron_knockout`: knockout of single MLP neurons.
- :mod:`~circuits.validate.transfer`: the knockout on other formats (SVAMP, multi-digit, decimals, time spans, MMLU).
- :mod:`~circuits.validate.cross_model`: the paper's claims measured side by side on several models.
- :mod:`~circuits.validate.job`: the jobs ``circuits knockout`` and ``circuits transfer``.

Names are imported on first use (:mod:`circuits.lazy`), so the configs (:mod:`~circuits.validate.config`) import
without torch: the command line builds ``circuits knockout`` and ``circuits transfer`` from them.
"""

from __future__ import annotations

from circuits.lazy import exports_win, lazy_exports

_K = "circuits.validate.knockout"
_EXPORTS = {
    **{n: _K for n in ("KnockoutCurve", "KnockoutResult", "KnockoutScore", "compute_means", "knockout", "knockout_curve",
                       "knockout_logits", "knockout_many", "random_order", "replacement_values")},
    "KnockoutConfig": "circuits.validate.config", "TransferConfig": "circuits.validate.config",
    "CrossModelResult": "circuits.validate.cross_model",
    "TransferResult": "circuits.validate.transfer", "transfer_knockout": "circuits.validate.transfer",
}

__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
exports_win(__name__, ("knockout",))  # the functions, as when these names were imported eagerly
