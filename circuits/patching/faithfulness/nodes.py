"""Node faithfulness (:func:`faithfulness`): every circuit of a node ranking run at once, by END-only layers over
``circuits x pairs`` or by the mechanism's one ablation executor (:mod:`circuits.patching.ablation.executor`) at every position
and on models the END-only layers refuse; see :mod:`circuits.patching.faithfulness`."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import einops
import torch
from jaxtyping import Float
from torch import Tensor

from circuits.data.pairs import PairBatch, Pairs, as_batch
from circuits.models.backend import Model, act_name
from circuits.patching.ablation.executor import AblationMasks, ablated_residuals, shared_start, site_hook
from circuits.patching.ablation.values import AblationValues, per_pair_values, record, site_names
from circuits.patching.end_layers import attention_output, end_logits, mlp_at_end
from circuits.patching.metrics import Metric
from circuits.patching.faithfulness.curve import (ABLATIONS, COUNTS, MIB_SIZES, POSITIONS, VALUE_KIND, FaithfulnessCurve,
                                                  NodeMasks, check_choice, check_metric, check_sizes, circuit_masks,
                                                  curve_from, metric_of)
from circuits.patching.faithfulness.end import _end_runs, _EndRuns, attention_split_at_end, end_only_supported


def _final_end(model: Model, resid: Tensor, end: Tensor) -> Tensor:
    """END logits (float32) of the last block's residual stream ``[row, pos, d_model]``."""
    x = resid[torch.arange(resid.shape[0], device=resid.device), end.to(resid.device)]
    return end_logits(model, x)


@dataclass
class _Runs:
    """What the ablated rows read: the replacement values of every site at every position (one row per pair,
    :class:`~circuits.patching.ablation.values.AblationValues`), and the END answers."""

    values: AblationValues
    answer: Tensor
    cf_answer: Tensor


@torch.no_grad()
def _collect(model: Model, batch: PairBatch, ablation: str, neuron_layers: Sequence[int]) -> _Runs:
    """Replacement values for every site at every position (whole prompts), and the counterfactual run's top token
    at END (one counterfactual forward gives both)."""
    names = site_names(model, neuron_layers) if ablation == "counterfactual" else []
    acts, resid = record(model, batch.counterfactual, names)
    cf_answer = _final_end(model, resid, batch.end).argmax(-1)
    values = per_pair_values(model, VALUE_KIND[ablation], batch.reference, batch.end,  # type: ignore[arg-type]
                             neuron_layers, counterfactual=acts)
    return _Runs(values, batch.answer.to(cf_answer.device), cf_answer)


# --- the batched node engine: the mechanism's one ablation executor -----------------------------------------


def _rows_per_forward(model: Model, width: int, memory_mb: float) -> int:
    """Rows (circuit x pair) per forward pass so that one layer's working tensors fit ``memory_mb``."""
    cfg = model.cfg
    per_pos = cfg.d_model * 8 + (cfg.d_mlp or 4 * cfg.d_model) * 3 + cfg.n_heads * width * 2
    bytes_per = torch.finfo(cfg.dtype).bits // 8 if cfg.dtype.is_floating_point else 4
    return max(1, int(memory_mb * 2**20 / (per_pos * width * bytes_per)))


@torch.no_grad()
def ablated_metric(model: Model, batch: PairBatch, masks: NodeMasks, runs: _Runs, positions: str,
                   metric: str | Metric, memory_mb: float = 1024, *, after_difference: bool = False
                   ) -> Float[Tensor, "circuit pair"]:
    """m of every circuit of ``masks`` on every pair: the executor's masked forward
    (:func:`circuits.patching.ablation.ablated_residuals`), rows ``(circuit, pair)`` folded into the batch, as many
    as ``memory_mb`` allows, ablating what each circuit leaves out at END or at every position.

    ``after_difference`` (counterfactual values at every position, exact with less work): before a pair's first
    difference its two prompts are the same tokens, so there the counterfactual values equal the reference run's
    and ablating them changes nothing; that start runs once per pair into a key/value cache, repeated for every
    circuit, and only the rest runs per circuit."""
    C, P = len(masks), len(batch)
    end = batch.end.tolist()
    tokens = [batch.reference[i, : end[i] + 1].tolist() for i in range(P)]
    ablate = AblationMasks(~masks.heads, ~masks.mlps, {l: ~v for l, v in masks.neurons.items()})
    resid = ablated_residuals(model, tokens, ablate, runs.values, range(P),
                              prefix_lengths=shared_start(batch).tolist() if after_difference else None,
                              ablate_prefix=False, at_end=positions == "end",
                              rows_per_batch=_rows_per_forward(model, batch.reference.shape[1], memory_mb))
    logits = end_logits(model, einops.rearrange(resid, "c p d -> (c p) d"))
    answer, cf_answer = (t.to(logits.device).repeat(C) for t in (runs.answer, runs.cf_answer))
    return einops.rearrange(metric_of(logits, answer, cf_answer, metric).cpu(), "(c p) -> c p", c=C)


def _replace_from_counterfactual(ablate: Tensor, k: int):
    """A hook replacing, in every row, the units ``ablate [row, unit]`` marks by the same activation of its pair's
    counterfactual row (rows pair-major, ``k`` per pair, the first of each pair its counterfactual row, which
    ``ablate`` never marks), at every position: the counterfactual run's value at this site, computed in this same
    forward pass."""
    def hook(act: Tensor, hook: object) -> Tensor:
        R = act.shape[0]
        mask = ablate.to(act.device).reshape(R, 1, ablate.shape[1], *[1] * (act.ndim - 3))
        return torch.where(mask, act[::k].repeat_interleave(k, 0), act)

    return hook


@torch.no_grad()
def _counterfactual_everywhere(model: Model, batch: PairBatch, masks: NodeMasks, metric: str | Metric,
                               memory_mb: float) -> Float[Tensor, "circuit pair"]:
    """m of every circuit with counterfactual values at every position, the counterfactual run computed in the same
    forward passes as the circuits: before a pair's first difference its two prompts are the same tokens, so that
    start (:func:`shared_start`) runs once per pair into a key/value cache, and after it each pair continues as one
    counterfactual row (its own prompt, nothing ablated) and one row per circuit (the reference prompt), every site
    a circuit leaves out taking the counterfactual row's activation at that site and position (one hook per site).
    Exact (causal attention; the same numbers as :func:`ablated_metric` over whole prompts up to float rounding),
    without a separate counterfactual forward over whole prompts."""
    cfg = model.cfg
    C, P = len(masks), len(batch)
    end = batch.end.tolist()
    start = shared_start(batch).tolist()
    ref = [batch.reference[i, : end[i] + 1].tolist() for i in range(P)]
    cf = [batch.counterfactual[i, : end[i] + 1].tolist() for i in range(P)]
    ab_heads, ab_mlps = ~masks.heads, ~masks.mlps
    ab_neurons = {l: ~v for l, v in masks.neurons.items()}
    rows_per = _rows_per_forward(model, batch.reference.shape[1], memory_mb)
    out_device = model.backend.output_device()
    out = torch.empty(C, P, cfg.d_model, dtype=cfg.dtype, device=out_device)
    cf_end = torch.empty(P, cfg.d_model, dtype=cfg.dtype, device=out_device)
    groups: dict[int, list[int]] = {}
    for i in range(P):
        groups.setdefault(start[i], []).append(i)
    for n_pre, members in groups.items():
        pairs_per = max(1, rows_per // 2)  # each pair's counterfactual row and at least one circuit's
        for b0 in range(0, len(members), pairs_per):
            block = members[b0 : b0 + pairs_per]
            nb = len(block)
            per = max(1, rows_per // nb - 1)  # circuits per forward pass
            width = max(len(ref[i]) for i in block) - n_pre
            for s0 in range(0, C, per):
                sets = torch.arange(s0, min(C, s0 + per))
                k = len(sets) + 1
                body = torch.zeros(nb * k, width, dtype=torch.long)
                ends = torch.empty(nb * k, dtype=torch.long)
                for j, i in enumerate(block):
                    body[j * k, : len(cf[i]) - n_pre] = torch.as_tensor(cf[i][n_pre:])
                    body[j * k + 1 : (j + 1) * k, : len(ref[i]) - n_pre] = torch.as_tensor(ref[i][n_pre:])
                    ends[j * k : (j + 1) * k] = len(ref[i]) - n_pre - 1

                def rows(ablate: Tensor) -> Tensor:  # [set, unit] -> [row, unit], pair-major, counterfactual rows kept
                    units = ablate[sets]
                    per_pair = torch.cat([torch.zeros_like(units[:1]), units])
                    return per_pair.repeat(nb, 1)

                hooks = []
                for l in range(cfg.n_layers):
                    for site, ablate in (("z", ab_heads[:, l]), ("post", ab_neurons.get(l)),
                                         ("mlp_out", ab_mlps[:, l][:, None])):
                        if ablate is not None and bool(ablate[sets].any()):
                            hooks.append((act_name(site, l), _replace_from_counterfactual(rows(ablate), k)))
                tokens, cache = body.to(cfg.device), None
                if n_pre:  # the shared start, without hooks (nothing is ablated before the first difference)
                    prefix = torch.tensor([ref[i][:n_pre] for i in block], device=cfg.device)
                    cache = model.backend.prefix_cache(prefix, [], k)
                with model.hooks(fwd_hooks=hooks):
                    resid = model.backend.final_residual(tokens) if cache is None else \
                        model.backend.continue_prefix(tokens, cache)
                at_end = resid[torch.arange(nb * k, device=resid.device), ends.to(resid.device)].to(out)
                at_end = at_end.reshape(nb, k, -1)
                idx = torch.tensor(block, device=out_device)
                cf_end[idx] = at_end[:, 0]
                out[sets.to(out_device)[:, None], idx[None, :]] = at_end[:, 1:].transpose(0, 1)
    cf_answer = end_logits(model, cf_end).argmax(-1)
    logits = end_logits(model, einops.rearrange(out, "c p d -> (c p) d"))
    answer = batch.answer.to(logits.device).repeat(C)
    return einops.rearrange(metric_of(logits, answer, cf_answer.to(logits.device).repeat(C), metric).cpu(),
                            "(c p) -> c p", c=C)


def _full_and_empty(masks: NodeMasks) -> NodeMasks:
    """``masks`` with two more circuits: every node kept (N), then no node kept (empty; MLP layers that are not
    nodes stay kept)."""
    L = masks.mlps.shape[1]

    def two(t: Tensor) -> Tensor:
        return torch.cat([t, torch.ones_like(t[:1]), torch.zeros_like(t[:1])])

    empty_mlps = torch.tensor([l not in masks.mlp_layers for l in range(L)], dtype=torch.bool)
    mlps = torch.cat([masks.mlps, torch.ones(1, L, dtype=torch.bool), empty_mlps[None]])
    return NodeMasks(two(masks.heads), mlps, {l: two(v) for l, v in masks.neurons.items()},
                     torch.cat([masks.n_kept, torch.tensor([masks.n_nodes, 0])]), masks.n_nodes, masks.mlp_layers)


@torch.no_grad()
def faithfulness(
    model: Model,
    pairs: Pairs,
    heads: Float[Tensor, "layer head"],
    mlps: Float[Tensor, " layer"] | None = None,
    *,
    neurons: Mapping[int, Float[Tensor, " d_mlp"]] | None = None,
    sizes: Sequence[float] = MIB_SIZES,
    ablation: str = "counterfactual",
    positions: str = "end",
    metric: str | Metric = "logit_diff",
    n_boot: int = 1000,
    level: float = 0.95,
    seed: int = 0,
    memory_mb: float = 1024,
    count: str = "round",
) -> FaithfulnessCurve:
    """The faithfulness curve of a node ranking (see the module docstring).

    Args:
        heads: a score per head ``[layer, head]``, higher = more important (pass absolute values of a signed
            ranking).
        mlps: a score per MLP ``[layer]``; ``None``: MLPs are not nodes (always kept, heads-only circuits).
        neurons: ``{layer: [d_mlp]}`` scores; such a layer's MLP is scored by its neurons (``hook_post``).
        sizes: fractions of the nodes in [0, 1] (default MIB's nine, 0.1% ... 50%).
        ablation: ``counterfactual`` (MIB), ``mean`` (over the reference runs, END-aligned) or ``zero``.
        positions: ``end`` (the END position only) or ``all`` (every position, as MIB).
        metric: ``logit_diff`` (default), ``logit``, ``prob`` or a :func:`~circuits.patching.metrics.logits_metric`.
        n_boot: bootstrap resamples of the pairs for the intervals (0: none); ``level`` their coverage.
        memory_mb: the working memory one forward may take (rows per forward follow from it).
        count: ``round`` (``round(size * n)`` nodes, halves up) or ``floor`` (``int(size * n)``, MIB's count).
    """
    t0 = time.perf_counter()
    sizes = check_sizes(sizes)
    check_choice("ablation", ablation, ABLATIONS)
    check_choice("positions", positions, POSITIONS)
    metric = check_metric(metric)
    cfg = model.cfg
    if tuple(heads.shape) != (cfg.n_layers, cfg.n_heads):
        raise ValueError(f"heads scores must be [layer, head] = [{cfg.n_layers}, {cfg.n_heads}] for this model, got "
                         f"{list(heads.shape)}")
    for l, s in (neurons or {}).items():
        if s.shape[-1] != cfg.d_mlp:
            raise ValueError(f"neuron scores of layer {l} must have d_mlp = {cfg.d_mlp} entries, got {s.shape[-1]}")
    check_choice("count", count, COUNTS)
    masks = circuit_masks(heads, mlps, neurons, sizes, count)
    batch = as_batch(pairs, model)
    every = _full_and_empty(masks)
    if positions == "end" and end_only_supported(model):
        m = _nodes_end_metric(model, batch, every, _end_runs(model, batch, ablation, sorted(masks.neurons)), metric,
                              memory_mb)
    elif positions == "all" and ablation == "counterfactual" and model.backend.prefix_sharing():
        m = _counterfactual_everywhere(model, batch, every, metric, memory_mb)
    else:
        m = ablated_metric(model, batch, every, _collect(model, batch, ablation, sorted(masks.neurons)), positions,
                           metric, memory_mb)
    name = metric if isinstance(metric, str) else metric.name
    return curve_from(sizes, masks.n_kept, masks.n_nodes, m[:-2], m[-2], m[-1], metric=name, ablation=ablation,
                      positions=positions, level="node", n_boot=n_boot, ci_level=level, seed=seed,
                      seconds=time.perf_counter() - t0)


def _nodes_end_metric(model: Model, batch: PairBatch, masks: NodeMasks, runs: _EndRuns, metric: str | Metric,
                      memory_mb: float) -> Float[Tensor, "circuit pair"]:
    """m of every node circuit ablated at END only: positions before END are the reference run's, so each layer is
    END-only work over circuits x pairs (attention from the new END query over the reference keys and values, as
    :func:`attention_split_at_end`; each head's ``z``, each MLP's output and each neuron's ``hook_post`` replaced
    where the circuit leaves it out), circuits chunked by ``memory_mb``."""
    cfg = model.cfg
    L, H, d = cfg.n_layers, cfg.n_heads, cfg.d_model
    C, P = len(masks), len(batch)
    device, dtype = runs.input_ref.device, runs.input_ref.dtype
    end = batch.end.to(device)
    bytes_per = torch.finfo(dtype).bits // 8
    per = max(1, int(memory_mb * 2**20 / (P * (8 * H * d + 4 * (cfg.d_mlp or 4 * d)) * bytes_per)))
    out = []
    for c0 in range(0, C, per):
        c = slice(c0, c0 + per)
        Cc = len(range(C)[c])
        resid = runs.input_ref[None].repeat(Cc, 1, 1)  # [c, pair, d_model]
        for l in range(L):
            x = resid[:, :, None].expand(Cc, P, H, d)
            z = attention_split_at_end(model, l, x, x, x, runs.keys[l], runs.values[l], end)
            keep_h = masks.heads[c, l].to(device)[:, None, :, None]
            z = torch.where(keep_h, z, runs.z_val[l][None].to(z.dtype))
            resid = resid + attention_output(model, l, z)
            if l in masks.neurons:
                # rows are [c*pair, 1]: each row's pair's END value where its circuit leaves the neuron out
                ablate = (~masks.neurons[l][c]).repeat_interleave(P, 0)
                hook = site_hook(ablate, runs.post_val[l][:, None], torch.arange(P).repeat(Cc), 0, pooled=False)
                with model.hooks(fwd_hooks=[(act_name("post", l), hook)]):
                    mlp = mlp_at_end(model, l, resid)
            else:
                mlp = torch.where(masks.mlps[c, l].to(device)[:, None, None], mlp_at_end(model, l, resid),
                                  runs.mlp_val[l][None].to(resid.dtype))
            resid = resid + mlp
        logits = end_logits(model, resid.reshape(Cc * P, d))
        m = metric_of(logits, runs.answer.repeat(Cc), runs.cf_answer.repeat(Cc), metric)
        out.append(m.reshape(Cc, P).cpu())
    return torch.cat(out)
