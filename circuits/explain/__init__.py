"""Step 2, analyze (Section 4.2, Figures 5-7): what the key heads attend to and what the MLPs write.

- :mod:`~circuits.explain.attention`: END-row attention by token role, and circuitsvis views.
- :mod:`~circuits.explain.logit_lens`: MLP inputs and outputs on the unembedding, layer by layer.
- :mod:`~circuits.explain.dla`, :mod:`~circuits.explain.residual_lens`, :mod:`~circuits.explain.head_circuits`:
  direct logit attribution per head, the accumulated-residual logit lens, and the OV/QK circuits of key heads
  (docs/for-transformerlens-users.md).
- :mod:`~circuits.explain.job`: the jobs ``circuits attention``,
  ``circuits attention-views`` and ``circuits lens`` (configs in :mod:`~circuits.explain.config`, without torch).

Names are imported on first use (:mod:`circuits.lazy`), so the configs import without torch.
"""

from __future__ import annotations

from circuits.lazy import exports_win, lazy_exports

_EXPORTS = {
    **{n: "circuits.explain.attention" for n in ("AttentionRoles", "AttentionViews", "attention_html", "attention_roles",
                                                  "role_attention")},
    **{n: "circuits.explain.dla" for n in ("DirectLogitAttribution", "direct_logit_attribution")},
    **{n: "circuits.explain.head_circuits" for n in ("HeadCircuits", "head_circuits")},
    **{n: "circuits.explain.logit_lens" for n in ("LogitLens", "logit_lens", "mlp_lens", "top_number_tokens",
                                                   "writing_start")},
    **{n: "circuits.explain.residual_lens" for n in ("ResidualLens", "residual_lens")},
}

__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
exports_win(__name__, ("logit_lens", "residual_lens", "head_circuits"))  # the functions, as when these names were imported eagerly
