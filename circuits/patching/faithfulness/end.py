"""The END-only runs both levels read: the reference run (keys, values and END values) and the counterfactual run read
at END, in one batched forward whose shared prefixes run once (:func:`_end_runs`), and attention at END with split query, key
and value inputs (:func:`attention_split_at_end`); see :mod:`circuits.patching.faithfulness`."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial

import torch
from jaxtyping import Float, Int
from torch import Tensor

from circuits.data.pairs import PairBatch
from circuits.models.backend import Model, act_name, apply_softcap
from circuits.models.forward import end_residuals, shared_prefix_lengths
from circuits.patching.ablation.values import end_values
from circuits.patching.end_layers import SHARED_PREFIX_MIN, check_supported, end_logits, rotate
from circuits.patching.faithfulness.curve import VALUE_KIND


def end_only_supported(model: Model) -> bool:
    """Whether the END-only layers compute this model as TransformerLens does
    (:func:`circuits.patching.end_layers.check_supported`); otherwise END ablation runs whole prompts."""
    try:
        check_supported(model)
    except ValueError:
        return False
    return True


@dataclass
class _EndRuns:
    """What END-only layers read: the reference run's END input embedding and every layer's keys and values, and the
    ablated END value of every sender (``z`` per head, MLP output, ``hook_post`` of neuron layers, the input)."""

    input_ref: Tensor  # [pair, d_model]
    input_val: Tensor  # [pair, d_model]
    z_val: list[Tensor]  # per layer [pair, head, d_head]
    mlp_val: list[Tensor]  # per layer [pair, d_model]
    post_val: dict[int, Tensor]  # neuron layers [pair, d_mlp]
    keys: list[Tensor]  # per layer [pair, pos, kv_head, d_head], rotated where rotary
    values: list[Tensor]
    answer: Tensor
    cf_answer: Tensor


def _head_outputs(model: Model, layer: int, z: Tensor) -> Tensor:
    """Each head's write into the residual, ``z_h @ W_O[h]`` (``hook_result``), ``[..., head, d_model]``."""
    W_O = model.backend.attn_out(layer)[0]
    return torch.einsum("...he,hed->...hd", z, W_O.to(z.dtype))


def _reference_run(model: Model, batch: PairBatch, end_names: Sequence[str], full_names: Sequence[str],
                   cf_names: Sequence[str] = ()) -> tuple[dict[str, Tensor], dict[str, Tensor]]:
    """The reference run's ``end_names`` at each pair's END (``[pair, ...]``) and ``full_names`` at every position up
    to END (``[pair, pos, ...]``, zero after END), and the counterfactual run's ``cf_names`` at END, in one batched
    run of both prompts of every pair: prompts sharing a prefix (a template's few-shot examples, and a pair's two
    prompts up to where they differ) run it once into a key/value cache (:func:`circuits.models.forward.end_residuals`;
    exact: attention is causal); a prefix's activations are read in its own call and put before each of its rows'
    own."""
    P, W = batch.reference.shape
    end = batch.end.tolist()
    rows = [batch.reference[i, : end[i] + 1].tolist() for i in range(P)]
    if cf_names:
        rows += [batch.counterfactual[i, : end[i] + 1].tolist() for i in range(P)]
    n_pre = shared_prefix_lengths(rows, SHARED_PREFIX_MIN)
    prefixes = [tuple(r[:n]) for r, n in zip(rows, n_pre)]
    out: dict[str, Tensor] = {}
    cf: dict[str, Tensor] = {}
    prefix_acts: dict[tuple, dict[str, Tensor]] = {}
    full_keys = {prefixes[i] for i in range(P)}  # prefixes some reference row continues

    def prefix_hooks(key: tuple, offset: int) -> list:
        if offset or not key or key not in full_keys:
            return []
        # each hook keeps the name it was asked for (a Bridge's hook.name is the canonical one of an alias)
        return [(n, lambda act, hook, n=n: prefix_acts.setdefault(key, {}).__setitem__(n, act[0].detach()))
                for n in full_names]

    def row_hooks(chunk: list[int], ends: Tensor) -> list:
        def gather(act: Tensor, hook, name: str) -> None:
            for r, i in enumerate(chunk):
                e = int(ends[r])
                if i >= P:  # a counterfactual row: END only
                    if name in cf_names:
                        if name not in cf:
                            cf[name] = act.new_zeros((P, *act.shape[2:]))
                        cf[name][i - P] = act[r, e]
                    continue
                if name in end_names:
                    if name not in out:
                        out[name] = act.new_zeros((P, *act.shape[2:]))
                    out[name][i] = act[r, e]
                if name in full_names:
                    if name not in out:
                        out[name] = act.new_zeros((P, W, *act.shape[2:]))
                    fed = max(len(rows[j]) for j in chunk) - n_pre[i]
                    if act.shape[1] == fed:  # this call's positions only
                        pre = prefix_acts[prefixes[i]][name] if n_pre[i] else act[r, :0]
                        out[name][i, : end[i] + 1] = torch.cat([pre, act[r, : e + 1]])
                    else:  # the cached prefix's too (rotated keys are read after the cache is appended)
                        assert act.shape[1] == fed + n_pre[i], (name, act.shape, fed, n_pre[i])
                        out[name][i, : end[i] + 1] = act[r, : end[i] + 1]

        return [(n, partial(gather, name=n)) for n in dict.fromkeys([*end_names, *full_names, *cf_names])]

    end_residuals(model, rows, n_pre, group_keys=prefixes, hooks=prefix_hooks, row_hooks=row_hooks)
    return out, cf


@torch.no_grad()
def _end_runs(model: Model, batch: PairBatch, ablation: str, neuron_layers: Sequence[int] = ()) -> _EndRuns:
    """The reference and counterfactual runs, one batched forward (:func:`_reference_run`): what :func:`_nodes_end_metric` and :func:`_edges_end_metric`
    read."""
    L = model.cfg.n_layers
    k_site = lambda l: model.backend.rotary_key_hook(l)  # noqa: E731  (keys as attention reads them)
    ends = [act_name("resid_pre", 0)] + [act_name(s, l) for l in range(L) for s in ("z", "mlp_out")]
    ends += [act_name("post", l) for l in neuron_layers]
    full = [k_site(l) for l in range(L)] + [act_name("v", l) for l in range(L)]
    # The counterfactual run is read at END only, in the reference's batch: its prompts share the few-shot prefix and
    # each pair's start before its prompts differ with the reference's, run once (exact: causal)
    final = act_name("resid_post", L - 1)
    ref, cf = _reference_run(model, batch, ends, full, [*ends, final] if ablation == "counterfactual" else [final])
    cf_answer = end_logits(model, cf[final]).argmax(-1)
    value = end_values(VALUE_KIND[ablation], cf if ablation == "counterfactual" else ref).__getitem__  # type: ignore[arg-type]

    return _EndRuns(
        input_ref=ref[act_name("resid_pre", 0)], input_val=value(act_name("resid_pre", 0)),
        z_val=[value(act_name("z", l)) for l in range(L)], mlp_val=[value(act_name("mlp_out", l)) for l in range(L)],
        post_val={l: value(act_name("post", l)) for l in neuron_layers},
        keys=[ref[k_site(l)] for l in range(L)], values=[ref[act_name("v", l)] for l in range(L)],
        answer=batch.answer, cf_answer=cf_answer)


def attention_split_at_end(
    model: Model,
    layer: int,
    xq: Float[Tensor, "s pair head d_model"],
    xk: Float[Tensor, "s pair head d_model"],
    xv: Float[Tensor, "s pair head d_model"],
    keys: Float[Tensor, "pair pos kv d_head"],
    values: Float[Tensor, "pair pos kv d_head"],
    end: Int[Tensor, " pair"],
) -> Float[Tensor, "s pair head d_head"]:
    """Each head's ``z`` at END when its query, key and value inputs at END are its own (``xq``/``xk``/``xv``, one
    per query head) and earlier positions' keys and values come from the reference cache: the steps of
    :func:`circuits.patching.end_layers.attention_at_end` (norm, projections, QK norm, rotary at END, scale,
    soft-cap, causal mask and sliding window, float32 softmax), per query head (key/value heads repeated under
    grouped-query attention, as TransformerLens's ``ungroup_grouped_query_attention``)."""
    cfg = model.cfg
    ln1 = model.blocks[layer].ln1
    S, P, H, d = xq.shape
    nq = ln1(xq.reshape(-1, 1, d)).reshape(S, P, H, d)
    nk = nq if xk is xq else ln1(xk.reshape(-1, 1, d)).reshape(S, P, H, d)  # node circuits: one input
    nv = nq if xv is xq else ln1(xv.reshape(-1, 1, d)).reshape(S, P, H, d)
    W_Q, b_Q, W_K, b_K, W_V, b_V = model.backend.attn_qkv(layer)
    group = H // model.backend.n_kv_heads()  # key/value heads ungrouped: one per query head, as EAP-IG/MIB
    W_K, b_K, W_V, b_V = (t.repeat_interleave(group, dim=0) for t in (W_K, b_K, W_V, b_V))
    proj = lambda x, w, b: torch.einsum("sphd,hde->sphe", x, w) + b  # noqa: E731
    q, k, v = proj(nq, W_Q, b_Q), proj(nk, W_K, b_K), proj(nv, W_V, b_V)
    norms = model.backend.qk_norms(layer)
    if norms is not None:
        q, k = (n(t.reshape(-1, cfg.d_head)).reshape(t.shape) for n, t in zip(norms, (q, k)))
    q, k = rotate(model, layer, q, end), rotate(model, layer, k, end)
    K, V = keys.repeat_interleave(group, dim=2), values.repeat_interleave(group, dim=2)
    scale, cap = model.backend.score_scale(layer), model.backend.score_softcap(layer)
    prefix = apply_softcap(torch.einsum("sphe,pthe->spht", q, K) * scale, cap)
    own = apply_softcap(torch.einsum("sphe,sphe->sph", q, k)[..., None] * scale, cap)
    positions = torch.arange(K.shape[1], device=q.device)
    masked = positions[None, :] >= end[:, None]
    window = model.backend.sliding_window(layer)
    if window is not None:  # local layers (Mistral's window, Gemma's alternating local/global layers)
        masked = masked | (positions[None, :] <= end[:, None] - window)
    prefix = prefix.masked_fill(masked[None, :, None, :], float("-inf"))
    pattern = torch.cat([prefix, own], dim=-1).float().softmax(-1).to(q.dtype)
    return torch.einsum("spht,pthe->sphe", pattern[..., :-1], V) + pattern[..., -1:] * v
