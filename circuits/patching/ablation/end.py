"""The executor's END-only strategy (:func:`circuits.patching.ablation.executor.run_ablation` chooses it for an ablation
at END whose values come from the pairs' own runs, on models the END-only layers compute as TransformerLens does).

Only END changes, so positions before END are the reference run's: one batched forward of both prompts of every pair
(:func:`end_runs`: the reference run's keys, values and END values, the counterfactual run read at END; shared prefixes
run once), then END-only layers over ``set x pair`` rows (attention from each new END query over the reference keys
and values): :func:`nodes_at_end` replaces each head's ``z``, each MLP's output or each neuron's ``hook_post`` where a
set ablates it; :func:`edges_at_end` assembles each receiver's input from kept and ablated sender values, each head
with its own query, key and value inputs (:func:`~circuits.patching.core.end_layers.z_at_end` per query head) (MIB's graph, :mod:`circuits.patching.circuit_curves.edge_curves`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import partial

import torch
import einops
from jaxtyping import Bool, Float
from torch import Tensor

from circuits.data.pairs import PairBatch
from circuits.models.backend import Model, act_name
from circuits.models.forward import end_residuals, shared_prefix_lengths
from circuits.patching.ablation.values import ValueKind, end_values, head_outputs
from circuits.patching.core.end_layers import (SHARED_PREFIX_MIN, attention_output, check_supported, mlp_at_end,
                                          z_at_end)


def end_only_supported(model: Model) -> bool:
    """Whether the END-only layers compute this model as TransformerLens does
    (:func:`circuits.patching.core.end_layers.check_supported`); otherwise END ablation runs whole prompts."""
    try:
        check_supported(model)
    except ValueError:
        return False
    return True


@dataclass
class EndRuns:
    """What END-only layers read: the reference run's END input embedding and every layer's keys and values, and the
    ablated END value of every sender (``z`` per head, MLP output, ``hook_post`` of neuron layers, the input)."""

    input_ref: Tensor  # [pair, d_model]
    input_val: Tensor  # [pair, d_model]
    z_val: list[Tensor]  # per layer [pair, head, d_head]
    mlp_val: list[Tensor]  # per layer [pair, d_model]
    post_val: dict[int, Tensor]  # neuron layers [pair, d_mlp]
    keys: list[Tensor]  # per layer [pair, pos, kv_head, d_head], rotated where rotary
    values: list[Tensor]
    cf_resid: Tensor  # the counterfactual run's final END residual [pair, d_model]


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
def end_runs(model: Model, batch: PairBatch, kind: ValueKind, neuron_layers: Sequence[int] = ()) -> EndRuns:
    """The reference and counterfactual runs, one batched forward (:func:`_reference_run`), and the ablated END value
    of every sender for values of ``kind`` (``counterfactual``, ``end_mean``, ``zero``): what :func:`nodes_at_end`
    and :func:`edges_at_end` read."""
    L = model.cfg.n_layers
    k_site = lambda l: model.backend.rotary_key_hook(l)  # noqa: E731  (keys as attention reads them)
    ends = [act_name("resid_pre", 0)] + [act_name(s, l) for l in range(L) for s in ("z", "mlp_out")]
    ends += [act_name("post", l) for l in neuron_layers]
    full = [k_site(l) for l in range(L)] + [act_name("v", l) for l in range(L)]
    # The counterfactual run is read at END only, in the reference's batch: its prompts share the few-shot prefix and
    # each pair's start before its prompts differ with the reference's, run once (exact: causal)
    final = act_name("resid_post", L - 1)
    ref, cf = _reference_run(model, batch, ends, full, [*ends, final] if kind == "counterfactual" else [final])
    value = end_values(kind, cf if kind == "counterfactual" else ref).__getitem__

    return EndRuns(
        input_ref=ref[act_name("resid_pre", 0)], input_val=value(act_name("resid_pre", 0)),
        z_val=[value(act_name("z", l)) for l in range(L)], mlp_val=[value(act_name("mlp_out", l)) for l in range(L)],
        post_val={l: value(act_name("post", l)) for l in neuron_layers},
        keys=[ref[k_site(l)] for l in range(L)], values=[ref[act_name("v", l)] for l in range(L)],
        cf_resid=cf[final])


def _sets_per_pass(memory_mb: float, per_row: int, dtype: torch.dtype) -> int:
    """Sets per END-only pass so that ``per_row`` working elements of each (set, pair) row fit ``memory_mb``."""
    return max(1, int(memory_mb * 2**20 / (per_row * (torch.finfo(dtype).bits // 8))))


def nodes_at_end(model: Model, batch: PairBatch, heads: Tensor, mlps: Tensor, neurons: Mapping[int, Tensor],
                 runs: EndRuns, memory_mb: float, input: Tensor | None = None) -> Float[Tensor, "set pair d_model"]:
    """The final END residual of every set ablating, at END only, the heads ``[set, layer, head]``, MLPs ``[set,
    layer]``, neurons ``{layer: [set, d_mlp]}`` and the input node ``[set]`` (the END embedding every layer reads,
    ``blocks.0.hook_resid_pre``; None: kept) it marks: each layer is END-only work over sets x pairs (attention
    from the new END query over the reference keys and values, :func:`~circuits.patching.core.end_layers.z_at_end`; each
    marked head's ``z``, MLP's output and neuron's ``hook_post`` replaced by its END value), sets chunked by
    ``memory_mb``."""
    cfg = model.cfg
    L, H, d = cfg.n_layers, cfg.n_heads, cfg.d_model
    C, P = heads.shape[0], len(batch)
    device, dtype = runs.input_ref.device, runs.input_ref.dtype
    end = batch.end.to(device)
    per = _sets_per_pass(memory_mb, P * (8 * H * d + 4 * (cfg.d_mlp or 4 * d)), dtype)
    out = []
    for c0 in range(0, C, per):
        c = slice(c0, c0 + per)
        Cc = len(range(C)[c])
        resid = runs.input_ref[None].repeat(Cc, 1, 1)  # [c, pair, d_model]
        if input is not None:  # the sets that ablate the input start from its ablated END value
            resid = torch.where(input[c].to(device)[:, None, None], runs.input_val[None].to(resid.dtype), resid)
        for l in range(L):
            z = z_at_end(model, l, resid, resid, resid, runs.keys[l], runs.values[l], end)
            gone = heads[c, l].to(device)[:, None, :, None]
            z = torch.where(gone, runs.z_val[l][None].to(z.dtype), z)
            resid = resid + attention_output(model, l, z)
            if l in neurons:
                # rows are [c*pair, 1]: each row's pair's END value where its set ablates the neuron
                gone_n, val_n = neurons[l][c].repeat_interleave(P, 0)[:, None], runs.post_val[l].repeat(Cc, 1)[:, None]
                hook = lambda act, hook: torch.where(gone_n.to(act.device), val_n.to(act), act)  # noqa: E731
                with model.hooks(fwd_hooks=[(act_name("post", l), hook)]):
                    mlp = mlp_at_end(model, l, resid)
            else:
                mlp = torch.where(mlps[c, l].to(device)[:, None, None], runs.mlp_val[l][None].to(resid.dtype),
                                  mlp_at_end(model, l, resid))
            resid = resid + mlp
        out.append(resid)
    return torch.cat(out)


def edges_at_end(model: Model, batch: PairBatch, edges: Bool[Tensor, "set sender receiver"], runs: EndRuns,
                 memory_mb: float) -> Float[Tensor, "set pair d_model"]:
    """The final END residual (the logits' input) of every set ablating the edges ``[set, sender, receiver]`` it
    marks, over MIB's graph (senders: the input, then per layer its heads and its MLP; receivers: per layer each
    head's q, k, v input, then its MLP's input, then the logits; :mod:`circuits.patching.circuit_curves.edge_curves`): each
    receiver's END input is the sum over its senders of the current output (a kept edge) or the ablated value (an
    ablated edge); END-only layers over sets x pairs (sets chunked by ``memory_mb``)."""
    cfg = model.cfg
    L, H, d = cfg.n_layers, cfg.n_heads, cfg.d_model
    C, P = edges.shape[0], len(batch)
    n_s = edges.shape[1]
    device, dtype = runs.input_ref.device, runs.input_ref.dtype
    end = batch.end.to(device)
    per = _sets_per_pass(memory_mb, P * (n_s + 8 * H) * d, dtype)
    out = []
    val = torch.zeros(P, n_s, d, device=device, dtype=dtype)  # each sender's ablated END value
    val[:, 0] = runs.input_val
    for l in range(L):
        s0 = 1 + l * (H + 1)
        val[:, s0 : s0 + H], val[:, s0 + H] = head_outputs(model, l, runs.z_val[l]), runs.mlp_val[l]
    for c0 in range(0, C, per):
        kept = (~edges[c0 : c0 + per]).to(device=device, dtype=dtype)  # [c, sender, receiver]
        Cc = kept.shape[0]
        cur = torch.zeros(Cc, P, n_s, d, device=device, dtype=dtype)  # each sender's current END output
        cur[:, :, 0] = runs.input_ref[None]
        bias = torch.zeros(d, device=device, dtype=dtype)  # the attention biases so far (no sender's)

        def inputs(n_senders: int, receivers: slice | int) -> Tensor:
            # a receiver's input: kept edges carry the current output, the others the ablated value (a sum of the
            # parts, not the residual minus the ablated parts: no cancellation when most edges are ablated)
            k = kept[:, :n_senders, receivers]
            sub = "csn" if k.ndim == 3 else "cs"
            got = torch.einsum(f"cpsd,{sub}->cp{sub[2:]}d", cur[:, :, :n_senders], k)
            got = got + torch.einsum(f"psd,{sub}->cp{sub[2:]}d", val[:, :n_senders], 1 - k)
            return got + bias

        for l in range(L):
            s0, r0 = 1 + l * (H + 1), l * (3 * H + 1)
            x = einops.rearrange(inputs(s0, slice(r0, r0 + 3 * H)), "c p (h k) d -> k c p h d", k=3)
            z = z_at_end(model, l, x[0], x[1], x[2], runs.keys[l], runs.values[l], end)
            cur[:, :, s0 : s0 + H] = head_outputs(model, l, z)  # [c, pair, head, d_model]
            bias = bias + model.backend.attn_out(l)[1]
            cur[:, :, s0 + H] = mlp_at_end(model, l, inputs(s0 + H, r0 + 3 * H))
        out.append(inputs(n_s, -1))
    return torch.cat(out)
