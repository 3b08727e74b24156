"""Step 1b, validate (Section 4.1 "Validation", Figures 3-4, Tables 3-4): knock the key heads out.

- :mod:`~circuits.validate.knockout`: knockout by mean, zero or resample ablation (run by the mechanism's ablation
  executor, :mod:`circuits.patching.ablation`: shared-prefix caching, many ablation sets per forward pass); top-k vs
  random curves.
- :mod:`~circuits.validate.neurons`: knockout of single MLP neurons.
- :mod:`~circuits.validate.transfer`: the knockout on other formats (SVAMP, multi-digit, decimals, time spans, MMLU).
- :mod:`~circuits.validate.cross_model`: the paper's claims measured side by side on several models.
"""

from circuits.validate.knockout import (
    KnockoutCurve,
    KnockoutResult,
    KnockoutScore,
    compute_means,
    knockout,
    knockout_curve,
    knockout_logits,
    knockout_many,
    random_order,
    replacement_values,
)
from circuits.validate.cross_model import CrossModelResult
from circuits.validate.transfer import TransferResult, transfer_knockout

__all__ = ["CrossModelResult", "KnockoutCurve", "KnockoutResult", "KnockoutScore", "TransferResult", "compute_means", "knockout",
           "knockout_curve", "knockout_logits", "knockout_many", "random_order", "replacement_values", "transfer_knockout"]
