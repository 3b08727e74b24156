"""What faithfulness measures: the checks of its arguments, which nodes each circuit keeps (:func:`circuit_masks`),
the metric read from END logits (:func:`metric_of`), and the curve with MIB's areas and bootstrap intervals
(:class:`FaithfulnessCurve`, :func:`curve_from`); see :mod:`circuits.patching.circuit_curves`."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

import torch
from jaxtyping import Bool, Float, Int
from torch import Tensor

from circuits.io import Shapes
from circuits.patching.core.metrics import Metric
from circuits.patching.core.ranking import order
from circuits.patching.core.uncertainty import percentile_interval, resample_pairs
from circuits.types import COUNTS, DEFAULT_COUNT


MIB_SIZES: tuple[float, ...] = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5)
ABLATIONS = ("counterfactual", "mean", "zero")
POSITIONS = ("end", "all")
READOUTS = ("logit_diff", "logit", "prob")
VALUE_KIND = {"counterfactual": "counterfactual", "mean": "end_mean", "zero": "zero"}  # ablation -> AblationValues kind




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




def n_kept_at(size: float, n: int, count: str = DEFAULT_COUNT) -> int:
    """How many of ``n`` items a circuit of ``size`` (a fraction) keeps: ``round(size * n)`` with halves rounded up
    (``count="round"``), or ``int(size * n)`` as MIB's ``evaluate_area_under_curve`` counts (``"floor"``)."""
    check_choice("count", count, COUNTS)
    return min(n, int(math.floor(size * n + (0.5 if count == "round" else 0.0))))


# --- which nodes each circuit keeps ---------------------------------------------------------------


@dataclass
class NodeMasks:
    """Which nodes each circuit keeps: ``heads [circuit, layer, head]``, ``mlps [circuit, layer]`` (MLP layers that
    are not nodes are always kept), ``neurons {layer: [circuit, d_mlp]}``, ``input [circuit]`` (where the input is a
    node); ``n_kept [circuit]``, ``n_nodes``."""

    heads: Bool[Tensor, "circuit layer head"]
    mlps: Bool[Tensor, "circuit layer"]
    neurons: dict[int, Bool[Tensor, "circuit d_mlp"]]
    n_kept: Int[Tensor, " circuit"]
    n_nodes: int
    mlp_layers: list[int] = field(default_factory=list)  # the MLP layers that are nodes
    # the input node kept [circuit], where it is a node (MIB's graph: the embeddings); None: not a node, always kept
    input: Bool[Tensor, " circuit"] | None = None

    def __len__(self) -> int:
        return self.heads.shape[0]


def _node_scores(heads: Tensor, mlps: Tensor | None, neurons: Mapping[int, Tensor] | None,
                 input: Tensor | float | None = None) -> tuple[Tensor, list[int], dict[int, int]]:
    """The flat score vector (the input node where it is one, first as in MIB's graph; heads; each MLP node in layer
    order; each neuron layer's neurons), the MLP layers that are nodes, and each neuron layer's offset in the flat
    vector."""
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
    parts = [] if input is None else [torch.as_tensor(input, dtype=torch.float32).reshape(-1).cpu()]
    if len(parts) and parts[0].numel() != 1:
        raise ValueError(f"the input node's score must be one number, got shape {tuple(parts[0].shape)}")
    parts.append(heads.flatten().float())
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
                  sizes: Sequence[float] = MIB_SIZES, count: str = DEFAULT_COUNT,
                  input: Tensor | float | None = None) -> NodeMasks:
    """The circuits of a node ranking at ``sizes`` (one row each), in the order given: the top
    ``n_kept_at(size, n_nodes, count)`` nodes by score (``round``, or ``int`` with ``count="floor"``; higher is more
    important; ties by index, :func:`order`). ``input``: the input node's score (MIB's graph: the embeddings are a
    node, ranked and counted with the rest; ``None``: not a node, always kept and not counted, as MIB keeps a node it
    has no score for)."""
    sizes = check_sizes(sizes)
    flat, mlp_layers, offsets = _node_scores(heads, mlps, neurons, input)
    n = flat.numel()
    rank = torch.empty(n, dtype=torch.long)
    rank[order(flat, +1)] = torch.arange(n)
    n_kept = torch.tensor([n_kept_at(s, n, count) for s in sizes], dtype=torch.long)
    keep = rank[None, :] < n_kept[:, None]  # [circuit, node]
    input_keep = None if input is None else keep[:, 0]
    keep = keep if input is None else keep[:, 1:]
    L, H = heads.shape
    C = len(sizes)
    head_keep = keep[:, : L * H].reshape(C, L, H)
    mlp_keep = torch.ones(C, L, dtype=torch.bool)
    for i, l in enumerate(mlp_layers):
        mlp_keep[:, l] = keep[:, L * H + i]
    shift = 0 if input is None else 1  # offsets are in the flat vector, the input first
    neuron_keep = {l: keep[:, o - shift : o - shift + neurons[l].numel()] for l, o in offsets.items()}  # type: ignore[index]
    return NodeMasks(head_keep, mlp_keep, neuron_keep, n_kept, n, mlp_layers, input_keep)


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
    def checked(cls, d: Any, source: Any, where: str) -> FaithfulnessCurve:
        """:meth:`from_dict` of a curve read from a file (``source``; ``where``: its place there), its tensors first
        checked: ``sizes``, ``n_kept``, ``f``, ``f_low``, ``f_high`` one per size, ``m`` and ``f_per_pair`` ``[size,
        pair]``, ``m_full`` and ``m_empty`` one per pair; else one :class:`~circuits.io.TensorError` line naming the
        file and the tensor."""
        shapes = Shapes(source)
        if not isinstance(d, Mapping):
            raise shapes.fail(f"{where} is a {type(d).__name__}, not a faithfulness curve")
        for name, axes, kind in (("sizes", ("size",), "float"), ("n_kept", ("size",), "int"), ("m", ("size", "pair"), "float"),
                                 ("m_full", ("pair",), "float"), ("m_empty", ("pair",), "float"),
                                 ("f", ("size",), "float"), ("f_per_pair", ("size", "pair"), "float"),
                                 ("f_low", ("size",), "float"), ("f_high", ("size",), "float")):
            shapes.tensor(f"{where}.{name}", d.get(name), axes, kind, no_inf=name not in ("f", "f_per_pair", "f_low",
                                                                                          "f_high"))
        return shapes.build(lambda: cls.from_dict(d), f"{where} lacks what a faithfulness curve holds")

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


def cmd_margin(a: FaithfulnessCurve, b: FaithfulnessCurve, n_boot: int = 1000, ci_level: float = 0.95,
               seed: int = 0) -> tuple[float, float, float]:
    """How much lower ``a``'s CMD is than ``b``'s (``b.cmd - a.cmd``), with a paired bootstrap interval: both curves
    were measured on the same pairs, so each resample draws the same pairs for both (NaN interval without
    resamples)."""
    diff, draws = cmd_margin_draws(a, b, n_boot, seed)
    if draws is None:
        return diff, float("nan"), float("nan")
    lo, hi = percentile_interval(draws, ci_level)
    return diff, float(lo), float(hi)


def cmd_margin_draws(a: FaithfulnessCurve, b: FaithfulnessCurve, n_boot: int = 1000,
                     seed: int = 0) -> tuple[float, Tensor | None]:
    """``b.cmd - a.cmd`` and its paired bootstrap resamples ``[resample]`` (None without resamples): what
    :func:`cmd_margin`'s interval, a p-value (:func:`~circuits.patching.core.uncertainty.bootstrap_p`) and an interval
    at a corrected level (:func:`~circuits.patching.core.uncertainty.holm`) are read from."""
    if a.m.shape[1] != b.m.shape[1]:
        raise ValueError("cmd_margin compares curves measured on the same pairs")
    diff = b.cmd - a.cmd
    if n_boot < 1:
        return diff, None
    idx = resample_pairs(a.m.shape[1], n_boot, seed)
    return diff, resampled_cmd(b, idx) - resampled_cmd(a, idx)


def resampled_cmd(c: FaithfulnessCurve, idx: Tensor) -> Tensor:
    """CMD of ``c`` on each resample of its pairs (``idx``: ``[resample, pair]`` indices): f from the resampled
    pairs' mean m, m(N) and m(empty), as the curve's own interval reads it; ``[resample]``, float64."""
    m, mf, me = c.m.double()[:, idx].mean(-1).T, c.m_full.double()[idx].mean(-1), c.m_empty.double()[idx].mean(-1)
    return area_scores(c.sizes.tolist(), (m - me[:, None]) / (mf - me)[:, None])[1]


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
