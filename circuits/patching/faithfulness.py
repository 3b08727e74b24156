"""Faithfulness of the circuits a ranking yields, as MIB scores circuit discovery (issue 24).

**Nodes.** A ranking of nodes -- heads ``[layer, head]``, MLPs ``[layer]``, optionally neurons ``{layer: [d_mlp]}``
(such a layer's MLP is then scored by its neurons instead of as one node) -- gives, at each size ``s`` (a fraction of
the ``n`` nodes), the circuit ``C_s`` = the top ``round(s * n)`` nodes by score (halves rounded up; ``count="floor"``
takes ``int(s * n)`` as MIB's code does; ties broken by :func:`circuits.patching.ranking.order`, the project's one
sort: higher score first, ties by index). Everything outside the circuit is ablated:

- ``ablation="counterfactual"`` (MIB's "patching"): each ablated node's output takes its value in the
  counterfactual run of the same pair;
- ``"mean"``: its mean over the pairs' reference runs, per position counted back from END (position ``end - k``
  takes the mean over the pairs that have it; at END, the mean over every pair's END). The knockout's means of
  :mod:`circuits.validate` are per template and length over counterfactual prompts and live in a job, which the
  mechanism does not import; END-aligned means need no template;
- ``"zero"``: zero;

at ``positions="end"`` (only the END position, as the paper's patching) or ``"all"`` (every position, as MIB).

**Edges** (:func:`edge_faithfulness`, END only): MIB's graph -- senders are the input embedding, every head and
every MLP; receivers every head's query, key and value input (per query head, also under grouped-query attention),
every MLP's input and the logits. An edge left out of the circuit carries its sender's ablated END value into its
receiver, the kept edges the current one (MIB's ``evaluate_graph``, which adds the differences into each receiver's
input). Models that normalise the sum of their heads (Gemma 2/3's ``ln1_post``) are refused at edge level (MIB
special-cases them); MIB's pruning of edges cut off from the input or the logits is not applied.

**Metric.** ``m`` is read from the END logits of each pair: by default ``logit_diff`` = logit(answer) -
logit(counterfactual answer), the counterfactual answer being the counterfactual run's top token at END (the
project's logit-difference readout; MIB's own arithmetic metric was not checked here); also ``"logit"``, ``"prob"``
or a :func:`circuits.patching.metrics.logits_metric`. Faithfulness ``f(C) = (m(C) - m(empty)) / (m(N) - m(empty))``
on means over pairs, ``N`` the model with nothing ablated and ``empty`` every node (edge) ablated, so ``f(N) = 1``
and ``f(empty) = 0`` by construction. CPR = the area under ``f`` and CMD = the area between ``f`` and 1
(``|1 - f|``), each by the trapezoid rule over the size axis in fractions with linear widths, as
``MIB-circuit-track``'s ``evaluate_area_under_curve`` computes them (its ``log_scale`` flag computes log positions
that its trapezoids do not use). MIB's axis is 0.1% ... 50% and 100%; the curve here is closed at 1.0 the same way
(f(1.0) = 1, every node kept) when the sizes given stop short of it. Bootstrap intervals resample pairs
(:func:`circuits.patching.uncertainty.resample_pairs`) and recompute f, CPR and CMD from the resampled means.

**Exact and batched.** All circuits (every size, N and empty) run together. At END only END changes, so positions
before END are the reference run's: one reference forward (keys, values and END values, a shared few-shot prefix
run once) and one counterfactual forward read at END, then END-only layers over ``circuits x pairs`` rows
(attention from each new END query over the reference keys and values, per head; each head's ``z``, each MLP's
output or each neuron's ``hook_post`` replaced where the circuit leaves it out; for edges, each receiver's input
assembled from kept and ablated sender values). At every position (and on models the END-only layers refuse)
the circuits are folded into the batch of whole prompts, a per-row keep mask applied by one hook per site
(``hook_z``, ``hook_mlp_out``, ``hook_post``). Every model-specific piece (projections, QK norms, rotary, scale, soft-caps, windows, keys as attention reads
them, the shared-prefix cache) comes from :mod:`circuits.models.backend`, so both TransformerLens lines (3.9's
``HookedTransformer``, 4.3's ``TransformerBridge``) run the same code; where a Bridge cannot share a prefix
(:func:`~circuits.models.backend.prefix_sharing`), prompts run whole. Both are tested against the plain loops of
:mod:`circuits.patching.plain` (:func:`~circuits.patching.plain.ablate_plain`,
:func:`~circuits.patching.plain.ablate_edges_plain`): one circuit at a time with ``run_with_hooks``.

Public signature::

    faithfulness(model, pairs, heads, mlps=None, *, neurons=None, sizes=MIB_SIZES, ablation="counterfactual",
                 positions="end", metric="logit_diff", n_boot=1000, level=0.95, seed=0, memory_mb=1024,
                 count="round") -> FaithfulnessCurve
    edge_faithfulness(model, pairs, scores, *, sizes=MIB_SIZES, ablation="counterfactual", positions="end",
                      metric="logit_diff", n_boot=1000, level=0.95, seed=0, memory_mb=1024, count="round")
        -> FaithfulnessCurve                   # scores [sender, receiver] over edge_senders x edge_receivers
    edge_senders(model), edge_receivers(model), edge_valid(model) -> [sender, receiver] bool
    circuit_masks(heads, mlps, neurons, sizes, count) -> NodeMasks    # which nodes each size keeps
    edge_masks(valid, scores, sizes, count) -> (keep, n_kept, n_edges)
    area_scores(sizes, f) -> (cpr, cmd)                               # MIB's areas of one curve (or a batch)
    MIB_SIZES = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5)

``FaithfulnessCurve`` fields: ``sizes [size]``, ``n_kept [size]``, ``n_nodes`` (nodes or edges), ``m [size,
pair]``, ``m_full [pair]``, ``m_empty [pair]``, ``f [size]``, ``f_per_pair [size, pair]``, ``f_low``/``f_high
[size]``, ``cpr``, ``cmd``, ``cpr_interval``, ``cmd_interval``, ``metric``, ``ablation``, ``positions``, ``level``
("node"/"edge"), ``ci_level``, ``n_boot``, ``seconds``; ``to_dict()``/``from_dict()`` for saving, ``table()``.
"""

from __future__ import annotations

import math
import time
from functools import partial
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

import einops
import torch
from jaxtyping import Bool, Float, Int
from torch import Tensor

from circuits.data.pairs import PairBatch, Pairs, as_batch
from circuits.models import backend
from circuits.models.backend import Model, act_name
from circuits.models.backend import apply_softcap
from circuits.models.forward import end_residuals, shared_prefix_lengths
from circuits.patching.end_layers import SHARED_PREFIX_MIN, _end_activations, attention_output, check_supported, end_logits, mlp_at_end, rotate
from circuits.patching.ablation import AblationMasks, ablated_residuals, site_hook
from circuits.patching.ablation_values import AblationValues, end_values, per_pair_values, record, site_names
from circuits.patching.metrics import Metric
from circuits.patching.ranking import order
from circuits.patching.readouts import first_difference
from circuits.patching.uncertainty import percentile_interval, resample_pairs
from circuits.types import Component, Receiver

MIB_SIZES: tuple[float, ...] = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5)
ABLATIONS = ("counterfactual", "mean", "zero")
POSITIONS = ("end", "all")
READOUTS = ("logit_diff", "logit", "prob")


# --- checks: one line each ----------------------------------------------------------------------


def check_sizes(sizes: Sequence[float]) -> tuple[float, ...]:
    """Sizes as fractions of the nodes (or edges), each a finite number in [0, 1]; at least one."""
    try:
        out = tuple(float(s) for s in sizes)
    except (TypeError, ValueError):
        raise ValueError(f"Bad sizes {sizes!r}; accepted: a list of fractions in [0, 1], e.g. 0.01,0.1,0.5 "
                         "(MIB's: 0.001 ... 0.5)") from None
    bad = [s for s in out if not (math.isfinite(s) and 0.0 <= s <= 1.0)]
    if not out or bad:
        what = "no sizes" if not out else f"size {bad[0]!r} is outside [0, 1]"
        raise ValueError(f"Bad sizes: {what}; accepted: fractions in [0, 1] (0.05 = 5% of the nodes; MIB's: "
                         "0.001 ... 0.5)")
    return out


def check_choice(name: str, value: str, accepted: Sequence[str]) -> str:
    if value not in accepted:
        raise ValueError(f"Unknown {name} {value!r}; accepted: {', '.join(accepted)}")
    return value


def check_metric(metric: str | Metric) -> str | Metric:
    if isinstance(metric, Metric):
        if metric.logits_fn is None:
            raise ValueError(f"Metric {metric.name!r} is an effect between runs, not a value of one run's logits; "
                             f"faithfulness accepts {', '.join(READOUTS)} or a logits_metric(...)")
        return metric
    return check_choice("metric", metric, READOUTS)


COUNTS = ("round", "floor")


def n_kept_at(size: float, n: int, count: str = "round") -> int:
    """How many of ``n`` items a circuit of ``size`` (a fraction) keeps: ``round(size * n)`` with halves rounded up
    (``count="round"``), or ``int(size * n)`` as MIB's ``evaluate_area_under_curve`` counts (``"floor"``)."""
    check_choice("count", count, COUNTS)
    return min(n, int(math.floor(size * n + (0.5 if count == "round" else 0.0))))


# --- which nodes each circuit keeps ---------------------------------------------------------------


@dataclass
class NodeMasks:
    """Which nodes each circuit keeps: ``heads [circuit, layer, head]``, ``mlps [circuit, layer]`` (MLP layers that
    are not nodes are always kept), ``neurons {layer: [circuit, d_mlp]}``; ``n_kept [circuit]``, ``n_nodes``."""

    heads: Bool[Tensor, "circuit layer head"]
    mlps: Bool[Tensor, "circuit layer"]
    neurons: dict[int, Bool[Tensor, "circuit d_mlp"]]
    n_kept: Int[Tensor, " circuit"]
    n_nodes: int
    mlp_layers: list[int] = field(default_factory=list)  # the MLP layers that are nodes

    def __len__(self) -> int:
        return self.heads.shape[0]


def _node_scores(heads: Tensor, mlps: Tensor | None, neurons: Mapping[int, Tensor] | None
                 ) -> tuple[Tensor, list[int], dict[int, int]]:
    """The flat score vector (heads, then each MLP node in layer order, then each neuron layer's neurons), the MLP
    layers that are nodes, and each neuron layer's offset in the flat vector."""
    if heads.ndim != 2:
        raise ValueError(f"heads scores must be [layer, head], got shape {tuple(heads.shape)}")
    L = heads.shape[0]
    neurons = dict(neurons or {})
    if mlps is not None and tuple(mlps.shape) != (L,):
        raise ValueError(f"mlps scores must be [layer] with {L} layers, got shape {tuple(mlps.shape)}")
    for layer, s in neurons.items():
        if not 0 <= int(layer) < L or s.ndim != 1:
            raise ValueError(f"neuron scores must be {{layer: [d_mlp]}} with layers in 0..{L - 1}; got layer {layer} "
                             f"with shape {tuple(s.shape)}")
    mlp_layers = [l for l in range(L) if mlps is not None and l not in neurons]
    parts = [heads.flatten().float()]
    if mlp_layers:
        parts.append(mlps[mlp_layers].float())  # type: ignore[index]
    offsets: dict[int, int] = {}
    at = sum(p.numel() for p in parts)
    for layer in sorted(neurons):
        offsets[layer] = at
        parts.append(neurons[layer].flatten().float())
        at += neurons[layer].numel()
    flat = torch.cat([p.cpu() for p in parts])
    if torch.isnan(flat).any():
        raise ValueError("Node scores contain NaN; accepted: a finite score for every node (score unswept nodes "
                         "-inf to put them last)")
    return flat, mlp_layers, offsets


def circuit_masks(heads: Float[Tensor, "layer head"], mlps: Float[Tensor, " layer"] | None = None,
                  neurons: Mapping[int, Float[Tensor, " d_mlp"]] | None = None,
                  sizes: Sequence[float] = MIB_SIZES, count: str = "round") -> NodeMasks:
    """The circuits of a node ranking at ``sizes`` (one row each), in the order given: the top
    ``round(size * n_nodes)`` nodes by score (higher is more important; ties by index, :func:`order`)."""
    sizes = check_sizes(sizes)
    flat, mlp_layers, offsets = _node_scores(heads, mlps, neurons)
    n = flat.numel()
    rank = torch.empty(n, dtype=torch.long)
    rank[order(flat, +1)] = torch.arange(n)
    n_kept = torch.tensor([n_kept_at(s, n, count) for s in sizes], dtype=torch.long)
    keep = rank[None, :] < n_kept[:, None]  # [circuit, node]
    L, H = heads.shape
    C = len(sizes)
    head_keep = keep[:, : L * H].reshape(C, L, H)
    mlp_keep = torch.ones(C, L, dtype=torch.bool)
    for i, l in enumerate(mlp_layers):
        mlp_keep[:, l] = keep[:, L * H + i]
    neuron_keep = {l: keep[:, o : o + neurons[l].numel()] for l, o in offsets.items()}  # type: ignore[index]
    return NodeMasks(head_keep, mlp_keep, neuron_keep, n_kept, n, mlp_layers)


# --- the result -------------------------------------------------------------------------------------


@dataclass
class FaithfulnessCurve:
    """f at each size of one ranking, with MIB's areas and bootstrap intervals (see the module docstring)."""

    sizes: Float[Tensor, " size"]
    n_kept: Int[Tensor, " size"]
    n_nodes: int
    m: Float[Tensor, "size pair"]
    m_full: Float[Tensor, " pair"]
    m_empty: Float[Tensor, " pair"]
    f: Float[Tensor, " size"]
    f_per_pair: Float[Tensor, "size pair"]
    f_low: Float[Tensor, " size"]
    f_high: Float[Tensor, " size"]
    cpr: float
    cmd: float
    cpr_interval: tuple[float, float]
    cmd_interval: tuple[float, float]
    metric: str
    ablation: str
    positions: str
    level: str = "node"
    ci_level: float = 0.95
    n_boot: int = 0
    seconds: float = 0.0

    @property
    def n_pairs(self) -> int:
        return self.m.shape[1]

    def to_dict(self) -> dict[str, Any]:
        """Tensors and numbers (for ``torch.save`` / JSON by a job)."""
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> FaithfulnessCurve:
        d = dict(d)
        for k in ("cpr_interval", "cmd_interval"):
            d[k] = tuple(float(x) for x in d[k])
        return cls(**{f.name: d[f.name] for f in fields(cls) if f.name in d})

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, FaithfulnessCurve):
            return NotImplemented
        for f in fields(self):
            a, b = getattr(self, f.name), getattr(other, f.name)
            if isinstance(a, Tensor):
                if not (isinstance(b, Tensor) and a.shape == b.shape and a.dtype == b.dtype
                        and torch.equal(a.nan_to_num(123.0), b.nan_to_num(123.0))):
                    return False
            elif a != b and not (isinstance(a, float) and math.isnan(a) and math.isnan(b)):
                return False
        return True

    def table(self) -> list[dict[str, float]]:
        """One row per size: size, nodes kept, f and its interval."""
        return [{"size": float(s), "n_kept": int(k), "f": float(f), "f_low": float(lo), "f_high": float(hi)}
                for s, k, f, lo, hi in zip(self.sizes, self.n_kept, self.f, self.f_low, self.f_high)]


def area_axis(sizes: Sequence[float] | Tensor, f: Tensor) -> tuple[Tensor, Tensor]:
    """The size axis and the curve MIB integrates: sizes sorted, closed at 1.0 (where f is 1 by construction) when
    the sizes stop short of it. ``f`` is ``[..., size]`` (a batch of resampled curves too)."""
    x = torch.as_tensor(sizes, dtype=torch.float64)
    x, idx = torch.sort(x, stable=True)  # the size axis, not a ranking of effects
    y = f.double()[..., idx]
    if not len(x) or float(x[-1]) < 1.0:
        x = torch.cat([x, torch.ones(1, dtype=x.dtype)])
        y = torch.cat([y, torch.ones(*y.shape[:-1], 1, dtype=y.dtype)], dim=-1)
    return x, y


def area_scores(sizes: Sequence[float] | Tensor, f: Tensor) -> tuple[Tensor, Tensor]:
    """CPR (area under f) and CMD (area between f and 1, ``|1 - f|``) by the trapezoid rule over the size axis of
    :func:`area_axis` (fractions, linear), as MIB's ``evaluate_area_under_curve``; ``f`` is ``[..., size]``."""
    x, y = area_axis(sizes, f)
    dx = x[1:] - x[:-1]
    cpr = (dx * (y[..., 1:] + y[..., :-1]) / 2).sum(-1)
    gap = (1 - y).abs()
    cmd = (dx * (gap[..., 1:] + gap[..., :-1]) / 2).sum(-1)
    return cpr, cmd


def curve_from(sizes: Sequence[float], n_kept: Tensor, n_nodes: int, m: Tensor, m_full: Tensor, m_empty: Tensor, *,
               metric: str, ablation: str, positions: str, level: str, n_boot: int, ci_level: float, seed: int,
               seconds: float) -> FaithfulnessCurve:
    """The curve, areas and bootstrap intervals from the per-pair metric of every circuit (``m [size, pair]``)."""
    m, m_full, m_empty = m.double().cpu(), m_full.double().cpu(), m_empty.double().cpu()

    def f_of(mc: Tensor, mf: Tensor, me: Tensor) -> Tensor:
        return (mc - me[..., None, :].mean(-1)) / (mf.mean(-1) - me.mean(-1))[..., None]

    f = (m.mean(-1) - m_empty.mean()) / (m_full.mean() - m_empty.mean())
    f_pp = (m - m_empty) / (m_full - m_empty)
    cpr, cmd = area_scores(sizes, f)
    S = len(sizes)
    f_low = f_high = torch.full((S,), float("nan"), dtype=torch.float64)
    cpr_iv = cmd_iv = (float("nan"), float("nan"))
    if n_boot > 0:
        idx = resample_pairs(m.shape[1], n_boot, seed)  # [boot, pair]
        mc = m[:, idx].mean(-1).T  # [boot, size]
        fb = f_of(mc, m_full[idx], m_empty[idx])
        f_low, f_high = percentile_interval(fb, ci_level)
        cb, db = area_scores(sizes, fb)
        cpr_iv = tuple(float(v) for v in percentile_interval(cb, ci_level))  # type: ignore[assignment]
        cmd_iv = tuple(float(v) for v in percentile_interval(db, ci_level))  # type: ignore[assignment]
    return FaithfulnessCurve(
        sizes=torch.tensor(sizes, dtype=torch.float64), n_kept=n_kept.clone(), n_nodes=int(n_nodes), m=m.float(),
        m_full=m_full.float(), m_empty=m_empty.float(), f=f.float(), f_per_pair=f_pp.float(), f_low=f_low.float(),
        f_high=f_high.float(), cpr=float(cpr), cmd=float(cmd), cpr_interval=cpr_iv, cmd_interval=cmd_iv,
        metric=metric, ablation=ablation, positions=positions, level=level, ci_level=ci_level, n_boot=n_boot,
        seconds=seconds)


# --- the runs: values an ablated node takes -------------------------------------------------------------


def metric_of(logits: Float[Tensor, "row d_vocab"], answer: Int[Tensor, " row"], cf_answer: Int[Tensor, " row"],
              metric: str | Metric) -> Float[Tensor, " row"]:
    """m per row from END logits (float32)."""
    logits = logits.float()
    rows = torch.arange(len(answer), device=logits.device)
    if isinstance(metric, Metric):
        return metric.of_logits(logits, answer, cf_answer).float().reshape(len(answer))
    logit = logits[rows, answer]
    if metric == "logit":
        return logit
    if metric == "logit_diff":
        return logit - logits[rows, cf_answer]
    return (logit - logits.logsumexp(-1)).exp()


def _final_end(model: Model, resid: Tensor, end: Tensor) -> Tensor:
    """END logits (float32) of the last block's residual stream ``[row, pos, d_model]``."""
    x = resid[torch.arange(resid.shape[0], device=resid.device), end.to(resid.device)]
    return end_logits(model, x)


VALUE_KIND = {"counterfactual": "counterfactual", "mean": "end_mean", "zero": "zero"}  # ablation -> values


@dataclass
class _Runs:
    """What the ablated rows read: the replacement values of every site at every position (one row per pair,
    :class:`~circuits.patching.ablation_values.AblationValues`), and the END answers."""

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


def shared_start(batch: PairBatch) -> Int[Tensor, " pair"]:
    """Each pair's tokens before its prompts differ, at most END (every row keeps its END to run):
    :func:`~circuits.patching.readouts.first_difference` capped at END."""
    return torch.minimum(first_difference(batch), batch.end)


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
    elif positions == "all" and ablation == "counterfactual" and backend.prefix_sharing(model):
        m = ablated_metric(model, batch, every, _collect(model, batch, ablation, sorted(masks.neurons)), positions,
                           metric, memory_mb, after_difference=True)
    else:
        m = ablated_metric(model, batch, every, _collect(model, batch, ablation, sorted(masks.neurons)), positions,
                           metric, memory_mb)
    name = metric if isinstance(metric, str) else metric.name
    return curve_from(sizes, masks.n_kept, masks.n_nodes, m[:-2], m[-2], m[-1], metric=name, ablation=ablation,
                      positions=positions, level="node", n_boot=n_boot, ci_level=level, seed=seed,
                      seconds=time.perf_counter() - t0)


# --- edges at END -------------------------------------------------------------------------------------------
#
# The graph, as MIB's: senders are the input embedding ("input"), every head and every MLP; receivers are every
# head's query, key and value input (per query head, also under grouped-query attention), every MLP's input, and
# the logits ("logits", the final residual stream). An edge joins a sender to a receiver downstream of it (a head
# of layer l feeds heads of later layers, the MLP of its own layer and later ones, and the logits). In a circuit,
# each receiver's END input is the residual stream minus, for every edge into it that the circuit leaves out, the
# sender's current END output minus its ablated value (its counterfactual END output, its mean over the reference
# runs, or zero): the edge then carries the ablated value and the kept edges the current one. Only END changes, so
# earlier positions are the reference run's, and each layer is END-only work over the reference keys and values.

INPUT, LOGITS = "input", "logits"
EdgeSender = Component | str
EdgeReceiver = Receiver | str


def edge_senders(model: Model) -> list[EdgeSender]:
    """The senders in order: ``input``, then per layer its heads and its MLP."""
    L, H = model.cfg.n_layers, model.cfg.n_heads
    out: list[EdgeSender] = [INPUT]
    for l in range(L):
        out += [Component("head", l, h) for h in range(H)] + [Component("mlp", l)]
    return out


def edge_receivers(model: Model) -> list[EdgeReceiver]:
    """The receivers in order: per layer each head's ``q``, ``k``, ``v`` input (head by head), then its MLP's input;
    then ``logits``."""
    L, H = model.cfg.n_layers, model.cfg.n_heads
    out: list[EdgeReceiver] = []
    for l in range(L):
        out += [Receiver(Component("head", l, h), c) for h in range(H) for c in ("q", "k", "v")]
        out.append(Receiver(Component("mlp", l)))
    return [*out, LOGITS]


def edge_upstream(sender: EdgeSender, receiver: EdgeReceiver) -> bool:
    """Whether ``sender``'s output reaches ``receiver``'s input directly (an edge of the graph)."""
    if sender == INPUT or receiver == LOGITS:
        return True
    assert isinstance(sender, Component) and isinstance(receiver, Receiver)
    if receiver.channel is not None:
        return sender.layer < receiver.layer
    return sender.layer < receiver.layer or (sender.layer == receiver.layer and sender.kind == "head")


def edge_valid(model: Model) -> Bool[Tensor, "sender receiver"]:
    """Which ``[sender, receiver]`` entries of :func:`edge_senders` x :func:`edge_receivers` are edges."""
    return torch.tensor([[edge_upstream(s, r) for r in edge_receivers(model)] for s in edge_senders(model)])


def edge_masks(valid: Tensor, scores: Tensor, sizes: Sequence[float], count: str = "round"
               ) -> tuple[Tensor, Tensor, int]:
    """Which edges each size keeps ``[circuit, sender, receiver]`` (the top ``round(size * n_edges)`` by score, ties by
    index through :func:`order`), ``n_kept [circuit]`` and ``n_edges``."""
    flat = scores.float().cpu()[valid]
    if torch.isnan(flat).any():
        raise ValueError("Edge scores contain NaN on an edge; accepted: a finite score for every edge (-inf to put "
                         "an edge last); entries that are not edges are ignored")
    n = flat.numel()
    rank = torch.empty(n, dtype=torch.long)
    rank[order(flat, +1)] = torch.arange(n)
    n_kept = torch.tensor([n_kept_at(s, n, count) for s in sizes], dtype=torch.long)
    keep = torch.zeros(len(sizes), *valid.shape, dtype=torch.bool)
    keep[:, valid] = rank[None, :] < n_kept[:, None]
    return keep, n_kept, n


def end_only_supported(model: Model) -> bool:
    """Whether the END-only layers compute this model as TransformerLens does
    (:func:`circuits.patching.end_layers.check_supported`); otherwise END ablation runs whole prompts."""
    try:
        check_supported(model)
    except ValueError:
        return False
    return True


def check_edge_model(model: Model) -> None:
    check_supported(model)
    if backend.post_norms(model):
        raise ValueError(f"Edge faithfulness needs each head's output to add into the residual stream; "
                         f"{backend.architecture(model)} normalises the sum of its heads (ln1_post), so a head's share "
                         "is not separable. Accepted: pre-norm models without post-sublayer norms (Llama, Mistral, "
                         "Qwen2/3, GPT-2); node faithfulness takes every model")


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
    W_O = backend.attn_out(model, layer)[0]
    return torch.einsum("...he,hed->...hd", z, W_O.to(z.dtype))


def _reference_run(model: Model, batch: PairBatch, end_names: Sequence[str], full_names: Sequence[str]
                   ) -> dict[str, Tensor]:
    """The reference run's ``end_names`` at each pair's END (``[pair, ...]``) and ``full_names`` at every position up
    to END (``[pair, pos, ...]``, zero after END), prompts sharing a few-shot prefix running it once into a key/value
    cache (:func:`circuits.models.forward.end_residuals`; exact: attention is causal): a prefix's activations are
    read in its own call and put before each of its rows' own."""
    P, W = batch.reference.shape
    end = batch.end.tolist()
    rows = [batch.reference[i, : end[i] + 1].tolist() for i in range(P)]
    n_pre = shared_prefix_lengths(rows, SHARED_PREFIX_MIN)
    prefixes = [tuple(r[:n]) for r, n in zip(rows, n_pre)]
    out: dict[str, Tensor] = {}
    prefix_acts: dict[tuple, dict[str, Tensor]] = {}

    def prefix_hooks(key: tuple, offset: int) -> list:
        if offset or not key:
            return []
        # each hook keeps the name it was asked for (a Bridge's hook.name is the canonical one of an alias)
        return [(n, lambda act, hook, n=n: prefix_acts.setdefault(key, {}).__setitem__(n, act[0].detach()))
                for n in full_names]

    def row_hooks(chunk: list[int], ends: Tensor) -> list:
        def gather(act: Tensor, hook, name: str) -> None:
            for r, i in enumerate(chunk):
                e = int(ends[r])
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

        return [(n, partial(gather, name=n)) for n in dict.fromkeys([*end_names, *full_names])]

    end_residuals(model, rows, n_pre, group_keys=prefixes, hooks=prefix_hooks, row_hooks=row_hooks)
    return out


@torch.no_grad()
def _end_runs(model: Model, batch: PairBatch, ablation: str, neuron_layers: Sequence[int] = ()) -> _EndRuns:
    """One reference and one counterfactual forward: what :func:`_nodes_end_metric` and :func:`_edges_end_metric`
    read."""
    L = model.cfg.n_layers
    end = batch.end
    k_site = lambda l: backend.rotary_key_hook(model, l)  # noqa: E731  (keys as attention reads them)
    ends = [act_name("resid_pre", 0)] + [act_name(s, l) for l in range(L) for s in ("z", "mlp_out")]
    ends += [act_name("post", l) for l in neuron_layers]
    full = [k_site(l) for l in range(L)] + [act_name("v", l) for l in range(L)]
    ref = _reference_run(model, batch, ends, full)
    # The counterfactual run is read at END only: prompts sharing a few-shot prefix run it once (exact: causal)
    final = act_name("resid_post", L - 1)
    cf = _end_activations(model, batch.counterfactual, end, [*ends, final] if ablation == "counterfactual" else [final])
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
    W_Q, b_Q, W_K, b_K, W_V, b_V = backend.attn_qkv(model, layer)
    group = H // backend.n_kv_heads(model)  # key/value heads ungrouped: one per query head, as EAP-IG/MIB
    W_K, b_K, W_V, b_V = (t.repeat_interleave(group, dim=0) for t in (W_K, b_K, W_V, b_V))
    proj = lambda x, w, b: torch.einsum("sphd,hde->sphe", x, w) + b  # noqa: E731
    q, k, v = proj(nq, W_Q, b_Q), proj(nk, W_K, b_K), proj(nv, W_V, b_V)
    norms = backend.qk_norms(model, layer)
    if norms is not None:
        q, k = (n(t.reshape(-1, cfg.d_head)).reshape(t.shape) for n, t in zip(norms, (q, k)))
    q, k = rotate(model, layer, q, end), rotate(model, layer, k, end)
    K, V = keys.repeat_interleave(group, dim=2), values.repeat_interleave(group, dim=2)
    scale, cap = backend.score_scale(model, layer), backend.score_softcap(model, layer)
    prefix = apply_softcap(torch.einsum("sphe,pthe->spht", q, K) * scale, cap)
    own = apply_softcap(torch.einsum("sphe,sphe->sph", q, k)[..., None] * scale, cap)
    positions = torch.arange(K.shape[1], device=q.device)
    masked = positions[None, :] >= end[:, None]
    window = backend.sliding_window(model, layer)
    if window is not None:  # local layers (Mistral's window, Gemma's alternating local/global layers)
        masked = masked | (positions[None, :] <= end[:, None] - window)
    prefix = prefix.masked_fill(masked[None, :, None, :], float("-inf"))
    pattern = torch.cat([prefix, own], dim=-1).float().softmax(-1).to(q.dtype)
    return torch.einsum("spht,pthe->sphe", pattern[..., :-1], V) + pattern[..., -1:] * v


def _edges_end_metric(model: Model, batch: PairBatch, keep: Bool[Tensor, "circuit sender receiver"], runs: _EndRuns,
                      metric: str | Metric, memory_mb: float) -> Float[Tensor, "circuit pair"]:
    """m of every edge circuit: END-only layers over circuits x pairs (circuits chunked by ``memory_mb``)."""
    cfg = model.cfg
    L, H, d = cfg.n_layers, cfg.n_heads, cfg.d_model
    C, P = keep.shape[0], len(batch)
    n_s = keep.shape[1]
    device, dtype = runs.input_ref.device, runs.input_ref.dtype
    end = batch.end.to(device)
    bytes_per = torch.finfo(dtype).bits // 8
    per = max(1, int(memory_mb * 2**20 / (P * (n_s + 8 * H) * d * bytes_per)))  # circuits per pass
    out = []
    val = torch.zeros(P, n_s, d, device=device, dtype=dtype)  # each sender's ablated END value
    val[:, 0] = runs.input_val
    for l in range(L):
        s0 = 1 + l * (H + 1)
        val[:, s0 : s0 + H], val[:, s0 + H] = _head_outputs(model, l, runs.z_val[l]), runs.mlp_val[l]
    for c0 in range(0, C, per):
        kept = keep[c0 : c0 + per].to(device=device, dtype=dtype)  # [c, sender, receiver]
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
            z = attention_split_at_end(model, l, x[0], x[1], x[2], runs.keys[l], runs.values[l], end)
            cur[:, :, s0 : s0 + H] = _head_outputs(model, l, z)  # [c, pair, head, d_model]
            bias = bias + backend.attn_out(model, l)[1]
            cur[:, :, s0 + H] = mlp_at_end(model, l, inputs(s0 + H, r0 + 3 * H))
        logits = end_logits(model, inputs(n_s, -1).reshape(Cc * P, d))
        m = metric_of(logits, runs.answer.repeat(Cc), runs.cf_answer.repeat(Cc), metric)
        out.append(m.reshape(Cc, P).cpu())
    return torch.cat(out)


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


@torch.no_grad()
def edge_faithfulness(
    model: Model,
    pairs: Pairs,
    scores: Float[Tensor, "sender receiver"],
    *,
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
    """The faithfulness curve of an edge ranking at END (see the comment above :data:`INPUT`).

    ``scores [sender, receiver]`` is over :func:`edge_senders` x :func:`edge_receivers` (entries that are not edges,
    :func:`edge_valid`, are ignored); higher = more important. Sizes are fractions of the edges (``count`` as for
    :func:`faithfulness`). Only
    ``positions="end"``: edges at every position are not implemented."""
    t0 = time.perf_counter()
    sizes = check_sizes(sizes)
    check_choice("ablation", ablation, ABLATIONS)
    check_choice("positions", positions, POSITIONS)
    if positions != "end":
        raise ValueError("Edge faithfulness is at END only (positions='end'); every position is done at node level")
    metric = check_metric(metric)
    check_edge_model(model)
    valid = edge_valid(model)
    if tuple(scores.shape) != tuple(valid.shape):
        raise ValueError(f"Edge scores must be [sender, receiver] = {list(valid.shape)} for this model (edge_senders "
                         f"x edge_receivers), got {list(scores.shape)}")
    keep, n_kept, n = edge_masks(valid, scores, sizes, count)
    every = torch.cat([keep, valid[None], torch.zeros_like(valid)[None]])
    batch = as_batch(pairs, model)
    runs = _end_runs(model, batch, ablation)
    m = _edges_end_metric(model, batch, every, runs, metric, memory_mb)
    name = metric if isinstance(metric, str) else metric.name
    return curve_from(sizes, n_kept, n, m[:-2], m[-2], m[-1], metric=name, ablation=ablation, positions=positions,
                      level="edge", n_boot=n_boot, ci_level=level, seed=seed, seconds=time.perf_counter() - t0)
