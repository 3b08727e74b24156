"""Step 2, analyze (Section 4.2, Figures 5-7): what the key heads attend to and what the MLPs write.

- :mod:`~circuits.explain.attention`: END-row attention by token role, and circuitsvis views.
- :mod:`~circuits.explain.logit_lens`: MLP inputs and outputs on the unembedding, layer by layer.
"""

from circuits.explain.attention import AttentionRoles, AttentionViews, attention_html, attention_roles, role_attention
from circuits.explain.logit_lens import LogitLens, logit_lens, mlp_lens, top_number_tokens, writing_start

__all__ = ["AttentionRoles", "AttentionViews", "LogitLens", "attention_html", "attention_roles", "logit_lens",
           "mlp_lens", "role_attention", "top_number_tokens", "writing_start"]
