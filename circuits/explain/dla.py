"""Direct logit attribution per head at END (TransformerLens's ``cache.stack_head_results`` + ``apply_ln_to_stack``).

The final residual stream at END is a sum: the embeddings, each head's output ``z[head] @ W_O[layer, head]``, the
attention output biases and each MLP's output. The final norm divides that sum by one scale (and, for LayerNorm,
centres it), so each part's *direct* contribution to the logits is the part, centred where the model centres, divided
by the scale of the whole stream (``ln_final.hook_scale``), projected on the unembedding. Projected on the
answer-minus-counterfactual-answer direction ``W_U[:, answer] - W_U[:, cf_answer]`` (``cf_answer``: the
counterfactual run's top token at END, as :class:`~circuits.patching.core.metrics.Baseline` takes it), the parts add up to
the model's logit difference at END (minus the unembedding bias's difference, kept apart in ``unembed_bias``).

This is the direct path only: what a head writes that later layers read and transform is not in it (patching,
:func:`~circuits.patching.engines.end_sweep.sweep`, measures that). Models that normalise each sublayer's output before adding
it (Gemma 2/3's norms after attention and MLP) have no per-head linear split, and are refused.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from jaxtyping import Float, Int
from torch import Tensor
from circuits.models.backend import Model
from circuits.models.backend import act_name as get_act_name

from circuits.data.pairs import PromptPair, pair_answer_scores
from circuits.patching.core.scores import Scores


@torch.no_grad()
def end_activations(model: Model, rows: Sequence[Sequence[int]], names: Sequence[str],
                    batch_size: int = 32) -> dict[str, Tensor]:
    """Each hook's activation at each row's last token (float32, on the CPU): ``{name: [row, ...]}``. Rows run in
    batches of equal length, so there is no padding."""
    wanted = set(names)
    out: dict[str, Tensor] = {}
    by_len: dict[int, list[int]] = {}
    for i, r in enumerate(rows):
        by_len.setdefault(len(r), []).append(i)
    for idx in by_len.values():
        for s in range(0, len(idx), batch_size):
            part = idx[s : s + batch_size]
            toks = torch.tensor([list(rows[i]) for i in part], device=model.cfg.device)
            _, cache = model.run_with_cache(toks, names_filter=lambda n: n in wanted, return_type=None)
            for name in names:
                value = cache[name][:, -1].float().cpu()
                if name not in out:
                    out[name] = torch.zeros((len(rows), *value.shape[1:]))
                out[name][part] = value
    return out


def answer_directions(model: Model, pairs: Sequence[PromptPair]
                      ) -> tuple[Float[Tensor, "d_model pair"], Float[Tensor, " pair"], Int[Tensor, " pair"]]:
    """``W_U[:, answer] - W_U[:, cf_answer]`` per pair (times the final norm's weight where it is not folded), the
    unembedding bias's difference, and ``cf_answer`` (the counterfactual run's top token at END)."""
    answer = torch.tensor([p.answer_token_id for p in pairs])
    cf_answer = pair_answer_scores(model, pairs, "counterfactual")[0]  # a batch of logits at a time
    W_U = model.W_U.detach().float().cpu()
    direction = W_U[:, answer] - W_U[:, cf_answer]
    w = getattr(model.ln_final, "w", None)
    if w is not None:  # an unfolded final norm scales each coordinate before the unembedding
        direction = direction * w.detach().float().cpu()[:, None]
    b_U = getattr(model, "b_U", None)
    bias = (b_U.detach().float().cpu()[answer] - b_U.detach().float().cpu()[cf_answer]) if b_U is not None else torch.zeros(len(pairs))
    return direction, bias, cf_answer


def _check_linear(model: Model) -> None:
    cfg = model.cfg
    if model.backend.post_norms():  # asked of the backend: a TransformerBridge's config does not say it
        raise ValueError(f"{cfg.model_name}: this model normalises each attention and MLP output before adding it to "
                         "the residual stream, so the stream is not a sum of per-head parts and direct logit "
                         "attribution per head is not defined; use patching (cc.sweep) instead")
    if cfg.normalization_type not in ("LN", "LNPre", "RMS", "RMSPre", None):
        raise ValueError(f"Unsupported final normalisation {cfg.normalization_type!r}; accepted: LN, LNPre, RMS, RMSPre")


@dataclass
class DirectLogitAttribution:
    """Each part's direct effect on the END logit difference (answer minus counterfactual answer), per pair.

    ``heads[layer, head, pair]``, ``mlps[layer, pair]``, ``embed[pair]`` (token and learned position embeddings),
    ``biases[pair]`` (the attention output biases), ``unembed_bias[pair]``; their sum is ``logit_diff[pair]``, the
    model's logit difference at END (before any final soft-capping). ``cf_answer``: the counterfactual answers."""

    heads: Float[Tensor, "layer head pair"]
    mlps: Float[Tensor, "layer pair"]
    embed: Float[Tensor, " pair"]
    biases: Float[Tensor, " pair"]
    unembed_bias: Float[Tensor, " pair"]
    logit_diff: Float[Tensor, " pair"]
    cf_answer: Int[Tensor, " pair"]

    def scores(self) -> Scores:
        """:class:`~circuits.patching.core.scores.Scores` of every head ``[layer, head]`` and MLP ``[layer]``: the mean
        direct effect over pairs, in logits (metric ``direct_logit_diff``, sign ``+1``: pushing the answer is
        important); ``scores().top(5, "heads")`` ranks them."""
        return Scores({"heads": self.heads.mean(-1), "mlps": self.mlps.mean(-1)}, "direct_logit_diff", 1, engine="dla",
                      per_pair={"heads": self.heads, "mlps": self.mlps})

    def __repr__(self) -> str:
        L, H, P = self.heads.shape
        top = ", ".join(f"{h} {e:+.2f}" for h, e in self.scores().ranked(3, "heads"))
        return f"DirectLogitAttribution({L} layers x {H} heads, {P} pairs; top: {top})"


@torch.no_grad()
def direct_logit_attribution(model: Model, pairs: Sequence[PromptPair], batch_size: int = 32
                             ) -> DirectLogitAttribution:
    """Direct logit attribution of every head and MLP at END on the reference prompts (see the module docstring).

    Equals ``cache.apply_ln_to_stack(cache.stack_head_results(layer=-1, pos_slice=-1), layer=-1, pos_slice=-1)``
    projected on ``W_U[:, answer] - W_U[:, cf_answer]`` (tested)."""
    _check_linear(model)
    pairs = list(pairs)
    cfg = model.cfg
    L = cfg.n_layers
    names = [get_act_name("z", l) for l in range(L)] + [get_act_name("mlp_out", l) for l in range(L)]
    names += ["hook_embed", "ln_final.hook_scale", get_act_name("resid_post", L - 1)]
    if cfg.positional_embedding_type == "standard":
        names.append("hook_pos_embed")
    acts = end_activations(model, [p.reference_token_ids for p in pairs], names, batch_size)
    direction, unembed_bias, cf_answer = answer_directions(model, pairs)  # [d_model, pair]
    scale = acts["ln_final.hook_scale"].reshape(len(pairs), 1)  # [pair, 1]
    center = cfg.normalization_type in ("LN", "LNPre")

    def project(x: Tensor) -> Tensor:  # [..., pair, d_model] -> [..., pair]
        if center:
            x = x - x.mean(-1, keepdim=True)
        return ((x / scale) * direction.T).sum(-1)

    W_O = model.W_O.detach().float().cpu()  # [layer, head, d_head, d_model]
    heads = torch.stack([project(torch.einsum("phd,hdm->hpm", acts[get_act_name("z", l)], W_O[l])) for l in range(L)])
    mlps = torch.stack([project(acts[get_act_name("mlp_out", l)]) for l in range(L)])
    embed = acts["hook_embed"] + acts.get("hook_pos_embed", 0)
    # [d_model]: every layer's attention output bias (zero where the model has none: a Bridge's b_O is None)
    b_O = torch.stack([model.backend.attn_out(l)[1].detach().float().cpu() for l in range(L)]).sum(0)
    final = acts[get_act_name("resid_post", L - 1)]
    return DirectLogitAttribution(heads, mlps, project(embed), project(b_O.expand(len(pairs), -1)), unembed_bias,
                                  project(final) + unembed_bias, cf_answer)


__all__ = ["DirectLogitAttribution", "answer_directions", "direct_logit_attribution", "end_activations"]
