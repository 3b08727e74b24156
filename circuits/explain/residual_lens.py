"""The standard logit lens: the accumulated residual stream at END, layer by layer, read through the final norm and the
unembedding (TransformerLens's ``cache.accumulated_resid(apply_ln=True, pos_slice=-1)``, nostalgebraist 2020).

Entry ``l_pre`` is the residual stream entering layer ``l`` (``l_mid`` with ``incl_mid``: after its attention),
``final_post`` the stream after the last layer. Each is normalised by the final norm with its *own* statistics (as
``accumulated_resid`` does for the final layer) and unembedded: how far the answer is ahead of the counterfactual
answer, and the answer's rank among all tokens, if the model stopped there. ``final_post`` is the model's own
output (before any final soft-capping). :func:`circuits.explain.logit_lens.logit_lens` is a narrower diagnostic of
the paper's Figure 6 (what the MLPs read and write); this is the usual one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from jaxtyping import Float, Int
from torch import Tensor
from circuits.models.backend import Model
from circuits.models.backend import act_name as get_act_name

from circuits.data.pairs import PromptPair
from circuits.explain.dla import answer_directions, end_activations


@dataclass
class ResidualLens:
    """``logit_diff[entry, pair]`` (answer minus counterfactual answer, unembedding bias included) and
    ``answer_rank[entry, pair]`` (tokens ahead of the answer; 0 = top) for each entry of ``labels``."""

    labels: list[str]
    logit_diff: Float[Tensor, "entry pair"]
    answer_rank: Int[Tensor, "entry pair"]

    def first_top(self) -> str | None:
        """The first entry where the answer is the top token for most pairs (None if never)."""
        top = (self.answer_rank == 0).float().mean(-1)
        hits = [lab for lab, t in zip(self.labels, top.tolist()) if t > 0.5]
        return hits[0] if hits else None

    def __repr__(self) -> str:
        return (f"ResidualLens({len(self.labels)} entries x {self.logit_diff.shape[1]} pairs; mean logit difference "
                f"{self.logit_diff.mean(-1)[0]:+.2f} at {self.labels[0]} -> {self.logit_diff.mean(-1)[-1]:+.2f} at "
                f"{self.labels[-1]}; answer on top from {self.first_top()})")


@torch.no_grad()
def residual_lens(model: Model, pairs: Sequence[PromptPair], incl_mid: bool = False,
                  batch_size: int = 32) -> ResidualLens:
    """The accumulated-residual logit lens at END of each reference prompt (see the module docstring)."""
    pairs = list(pairs)
    L = model.cfg.n_layers
    labels, names = [], []
    for l in range(L):
        labels.append(f"{l}_pre")
        names.append(get_act_name("resid_pre", l))
        if incl_mid:
            labels.append(f"{l}_mid")
            names.append(get_act_name("resid_mid", l))
    labels.append("final_post")
    names.append(get_act_name("resid_post", L - 1))
    acts = end_activations(model, [p.reference_token_ids for p in pairs], names, batch_size)
    stack = torch.stack([acts[n] for n in names])  # [entry, pair, d_model]
    cf_answer = answer_directions(model, pairs)[2]
    answer = torch.tensor([p.answer_token_id for p in pairs])
    dev = model.cfg.device
    rows = torch.arange(len(pairs))
    diffs, ranks = [], []
    for x in stack:  # one entry at a time: [pair, d_vocab] logits
        normed = model.ln_final(x.to(dev, model.cfg.dtype)[:, None])[:, 0]
        logits = model.unembed(normed[:, None])[:, 0].float().cpu()
        diffs.append(logits[rows, answer] - logits[rows, cf_answer])
        ranks.append((logits > logits[rows, answer][:, None]).sum(-1))
    return ResidualLens(labels, torch.stack(diffs), torch.stack(ranks))


__all__ = ["ResidualLens", "residual_lens"]
