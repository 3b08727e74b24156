"""Step 2, analyze (Section 4.2, Figures 5-7): what the key heads attend to and what the MLPs write.

- :mod:`~circuits.explain.attention`: END-row attention by token role, and circuitsvis views.
- :mod:`~circuits.explain.logit_lens`: MLP inputs and outputs on the unembedding, layer by layer.
- :mod:`~circuits.explain.dla`, :mod:`~circuits.explain.residual_lens`, :mod:`~circuits.explain.head_circuits`:
  direct logit attribution per head, the accumulated-residual logit lens, and the OV/QK circuits of key heads
  (docs/for-transformerlens-users.md).
"""

from circuits.explain.attention import AttentionRoles, AttentionViews, attention_html, attention_roles, role_attention
from circuits.explain.dla import DirectLogitAttribution, direct_logit_attribution
from circuits.explain.head_circuits import HeadCircuits, head_circuits
from circuits.explain.logit_lens import LogitLens, logit_lens, mlp_lens, top_number_tokens, writing_start
from circuits.explain.residual_lens import ResidualLens, residual_lens

__all__ = ["AttentionRoles", "AttentionViews", "DirectLogitAttribution", "HeadCircuits", "LogitLens", "ResidualLens",
           "attention_html", "attention_roles", "direct_logit_attribution", "head_circuits", "logit_lens", "mlp_lens",
           "residual_lens", "role_attention", "top_number_tokens", "writing_start"]
