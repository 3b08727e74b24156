"""The attribution screen audited by the exact engines: rank every node by its first-order estimate, re-measure
the top ones exactly, and say what the estimate missed.

:func:`screen` runs :func:`~circuits.patching.attribution.attribute` (every head, MLP and neuron at every position),
then ``verify``: the top-N heads/MLPs and the top-N neurons of the screen are re-measured exactly -- at END by the
END engine (:func:`~circuits.patching.engine.sweep`, :func:`~circuits.patching.neurons.sweep_neurons`), elsewhere
by the per-position engine (:func:`~circuits.patching.positions.sweep_positions`) -- and both numbers are kept.
With ``audit`` the END engine also measures every head and MLP exactly, which gives the table no peer publishes:
the rank correlation of screen and exact effects at END, how many of the exact top-10 and top-5% the screen's
top-N misses (N = 10, 20, 50), and the largest misses with why -- the error of the estimate split into the part
already there when every later head is frozen (MLPs and norms: path mode) and the rest (later attention).
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import Tensor
from transformer_lens import HookedTransformer

from circuits.config import option
from circuits.data.pairs import PromptPair
from circuits.patching.attribution import Attribution, attribute
from circuits.patching.engine import sweep
from circuits.patching.metrics import METRIC_NAMES, get_metric
from circuits.patching.neurons import sweep_neurons
from circuits.patching.positions import sweep_positions
from circuits.patching.readouts import spearman
from circuits.data.source import PairSource
from circuits.io import read_json, read_jsonl, save_torch, write_json, write_jsonl
from circuits.results import Result, ResultError, read_config
from circuits.types import MODES, Component, Neuron

NS = (10, 20, 50)


@dataclass(frozen=True)
class ScreenConfig(PairSource):
    """Everything that decides a screen (saved as its ``config.json``)."""

    metric: str = option("fraction", choices=METRIC_NAMES, help="what is estimated and ranked")
    mode: str = option("activation", choices=MODES, help="activation patching (every position) or the paper's path "
                                                          "patching (heads frozen; END only)")
    verify: int = option(20, help="re-measure the screen's top-N heads/MLPs and top-N neurons exactly (0: none)")
    neurons: bool = option(True, help="screen every MLP neuron (hook_post) too")
    qk_fix: bool = option(True, help="AtP*'s query and key nodes with the exact softmax")
    grad_drop: bool = option(False, help="AtP*'s GradDrop scores (n_layers extra backward passes)")
    audit: bool = option(True, help="measure every head and MLP at END exactly and compare (the audit table)")

    def __post_init__(self) -> None:
        super().__post_init__()
        get_metric(self.metric)
        if self.mode not in MODES:
            raise ValueError(f"Unknown mode {self.mode!r}; accepted: {', '.join(MODES)}")
        if self.verify < 0:
            raise ValueError(f"verify must be 0 or more, got {self.verify}")


def node_name(sender: Component | Neuron, offset: int) -> str:
    """``"20.8@0"``: a sender at ``offset`` positions before END."""
    return f"{sender}@{offset}"


def ranked_nodes(heads: Tensor, mlps: Tensor, sign: int) -> list[tuple[Component, int, float]]:
    """Every (head or MLP, offset) by the metric's important direction, NaN dropped."""
    L, H, K = heads.shape
    flat = torch.cat([heads.reshape(-1), mlps.reshape(-1)])
    order = torch.argsort(torch.nan_to_num(flat * sign, nan=-math.inf), descending=True, stable=True)
    out = []
    for i in order.tolist():
        v = float(flat[i])
        if math.isnan(v):
            continue
        if i < L * H * K:
            l, rest = divmod(i, H * K)
            h, k = divmod(rest, K)
            out.append((Component("head", l, h), k, v))
        else:
            l, k = divmod(i - L * H * K, K)
            out.append((Component.mlp(l), k, v))
    return out


def ranked_neurons(neurons: Tensor, sign: int, n: int) -> list[tuple[Neuron, int, float]]:
    L, D, K = neurons.shape
    flat = neurons.reshape(-1)
    order = torch.argsort(torch.nan_to_num(flat * sign, nan=-math.inf), descending=True)[:n]
    out = []
    for i in order.tolist():
        l, rest = divmod(i, D * K)
        d, k = divmod(rest, K)
        out.append((Neuron(l, d), k, float(flat[i])))
    return out


def verify(model: HookedTransformer, pairs: Sequence[PromptPair], att: Attribution, n: int,
           neuron_effects: Tensor | None, head_effects: Tensor, mlp_effects: Tensor, memory_mb: float = 1024,
           progress: bool = False) -> list[dict[str, Any]]:
    """The screen's top-``n`` heads/MLPs and top-``n`` neurons, each with its screen estimate and its exact value."""
    m = att.metric
    nodes: list[tuple[Component | Neuron, int, float]] = list(ranked_nodes(head_effects, mlp_effects, m.sign)[:n])
    if neuron_effects is not None:
        nodes += ranked_neurons(neuron_effects, m.sign, n)
    exact: dict[tuple, float] = {}
    end_comps = [s for s, k, _ in nodes if k == 0 and isinstance(s, Component)]
    if end_comps:
        r = sweep(model, pairs, att.mode, components=end_comps, memory_mb=memory_mb, progress=progress)
        h, ml = r.effects(m)
        for c in end_comps:
            exact[(c, 0)] = float(h[c.layer, c.head] if c.kind == "head" else ml[c.layer])
    end_neurons = [s for s, k, _ in nodes if k == 0 and isinstance(s, Neuron)]
    if end_neurons:
        ns = sweep_neurons(model, pairs, att.mode, neurons=end_neurons, prob=m.name == "prob", memory_mb=memory_mb,
                           progress=progress)
        for s, e in zip(ns.neurons, ns.effects(m)):
            exact[(s, 0)] = float(e)
    elsewhere = [(s, k) for s, k, _ in nodes if k != 0]
    if elsewhere:
        ps = sweep_positions(model, pairs, nodes=elsewhere, memory_mb=memory_mb, progress=progress)
        for s, k in elsewhere:
            exact[(s, k)] = ps.value((s, k), m)
    return [{"node": node_name(s, k), "sender": str(s), "offset": k, "kind": "neuron" if isinstance(s, Neuron) else s.kind,
             "screen": v, "exact": exact[(s, k)]} for s, k, v in nodes]


def audit_table(screen: tuple[Tensor, Tensor], exact: tuple[Tensor, Tensor], sign: int,
                path: tuple[tuple[Tensor, Tensor], tuple[Tensor, Tensor]] | None = None, ns: Sequence[int] = NS,
                n_misses: int = 5) -> dict[str, Any]:
    """Screen against exact END effects over every head and MLP: Spearman, exact top-10 / top-5% missed by the
    screen's top-N, and the largest misses (``path``: screen and exact effects in path mode, to split each miss's
    error into the part through MLPs and the part through later attention)."""
    L, H = screen[0].shape
    names = [f"{l}.{h}" for l in range(L) for h in range(H)] + [f"MLP{l}" for l in range(L)]
    s = torch.cat([screen[0].reshape(-1), screen[1].reshape(-1)])
    e = torch.cat([exact[0].reshape(-1), exact[1].reshape(-1)])
    order_s = torch.argsort(torch.nan_to_num(s * sign, nan=-math.inf), descending=True, stable=True).tolist()
    order_e = torch.argsort(torch.nan_to_num(e * sign, nan=-math.inf), descending=True, stable=True).tolist()
    n5 = max(1, math.ceil(0.05 * len(e)))
    out: dict[str, Any] = {"spearman_end": spearman(s, e), "spearman_end_heads": spearman(screen[0], exact[0]),
                           "spearman_end_mlps": spearman(screen[1], exact[1]), "n_components": len(e),
                           "top5pct_size": n5}
    for n in ns:
        top = set(order_s[:n])
        out[f"exact_top10_missed_at_{n}"] = len(set(order_e[:10]) - top)
        out[f"exact_top5pct_missed_at_{n}"] = len(set(order_e[:n5]) - top)
    rank_s = {i: r for r, i in enumerate(order_s)}
    misses = [i for i in order_e[:10] if rank_s[i] >= 20] or sorted(order_e[:10], key=lambda i: -abs(float(s[i] - e[i])))
    rows = []
    for i in misses[:n_misses]:
        row = {"component": names[i], "exact": float(e[i]), "screen": float(s[i]), "exact_rank": order_e.index(i) + 1,
               "screen_rank": rank_s[i] + 1}
        if path is not None:
            ps = torch.cat([path[0][0].reshape(-1), path[0][1].reshape(-1)])
            pe = torch.cat([path[1][0].reshape(-1), path[1][1].reshape(-1)])
            err_mlp = float(ps[i] - pe[i])
            err_attn = float(s[i] - e[i]) - err_mlp
            row.update({"error": float(s[i] - e[i]), "error_with_heads_frozen": err_mlp, "error_through_attention": err_attn,
                        "why": ("later attention: the linear estimate crosses later softmaxes (saturation)"
                                if abs(err_attn) > abs(err_mlp) else "MLPs and norms after it: nonlinear")})
        if float(s[i]) * float(e[i]) < 0:
            row["note"] = "the screen has the opposite sign"
        rows.append(row)
    out["largest_misses"] = rows
    return out


@dataclass
class ScreenResult(Result):
    """A screen, the exact values of its top-N, and (with ``audit``) the END audit table."""

    kind = "screen"

    config: Any
    pairs: list[PromptPair]
    metric: str
    mode: str
    head_effects: Tensor  # [layer, head, offset], the screen's estimate of the metric
    mlp_effects: Tensor  # [layer, offset]
    head_q: Tensor | None = None  # [layer, head, offset], QK-fixed query nodes
    head_k: Tensor | None = None
    neuron_effects: Tensor | None = None  # [layer, d_mlp, offset] (offsets where the prompts differ)
    graddrop: dict[str, Tensor] = field(default_factory=dict)
    verified: list[dict[str, Any]] = field(default_factory=list)
    audit: dict[str, Any] | None = None
    exact_end: dict[str, Tensor] = field(default_factory=dict)  # "heads", "mlps" (and "path_*") at END, exact
    seconds: dict[str, float] = field(default_factory=dict)

    def summary(self) -> dict[str, Any]:
        out: dict[str, Any] = {"model": getattr(self.config, "model", ""), "task": getattr(self.config, "task", ""),
                               "metric": self.metric, "mode": self.mode, "n_pairs": len(self.pairs),
                               "seconds": self.seconds, "verified": self.verified}
        if self.audit is not None:
            out.update(self.audit)
        return out

    def figure(self):
        from circuits.viz.analysis_figures import screen_figure

        return screen_figure(self)

    def _write(self, folder: Path) -> None:
        from circuits.viz.figures import write_figure

        write_json(folder / "summary.json", self.summary())
        write_jsonl(folder / "pairs.jsonl", [p.to_json() for p in self.pairs])
        save_torch({"head_effects": self.head_effects, "mlp_effects": self.mlp_effects, "head_q": self.head_q,
                    "head_k": self.head_k, "neuron_effects": self.neuron_effects, "graddrop": self.graddrop,
                    "exact_end": self.exact_end}, folder / "screen.pt")
        write_figure(self.figure(), folder / "screen.html")

    @classmethod
    def _read(cls, folder: Path) -> ScreenResult:
        s = read_json(folder / "summary.json")
        try:
            t = torch.load(folder / "screen.pt", map_location="cpu", weights_only=True)
        except Exception as err:  # torch raises several types for truncated files
            raise ResultError(f"{folder / 'screen.pt'} cannot be read ({type(err).__name__}: {err})") from None
        config = ScreenConfig.from_json(read_config(folder))
        pairs = [PromptPair.from_json(r) for r in read_jsonl(folder / "pairs.jsonl")]
        audit = {k: v for k, v in s.items() if k.startswith(("spearman", "exact_top", "largest", "n_components", "top5pct"))}
        return cls(config, pairs, s["metric"], s["mode"], t["head_effects"], t["mlp_effects"], t["head_q"], t["head_k"],
                   t["neuron_effects"], t["graddrop"], s.get("verified", []), audit or None, t["exact_end"],
                   s.get("seconds", {}))


def screen(model: HookedTransformer, pairs: Sequence[PromptPair], config: ScreenConfig | None = None,
           progress: bool = True, **kwargs: Any) -> ScreenResult:
    """Screen, verify and (``config.audit``) audit; ``config`` fields may be given as keywords."""
    config = (config.replace(**kwargs) if kwargs else config) if config is not None else ScreenConfig(**kwargs)
    pairs = list(pairs)
    seconds: dict[str, float] = {}
    att = attribute(model, pairs, config.metric, mode=config.mode, neurons=config.neurons,  # type: ignore[arg-type]
                    qk_fix=config.qk_fix, grad_drop=config.grad_drop, progress=progress)
    seconds["screen"] = att.seconds
    heads, mlps = att.effect(att.head), att.effect(att.mlp)
    neurons = att.effect(att.neuron) if att.neuron is not None else None
    q = att.effect(att.head_q) if att.head_q is not None else None
    k = att.effect(att.head_k) if att.head_k is not None else None
    t0 = time.perf_counter()
    verified = verify(model, pairs, att, config.verify, neurons, heads, mlps, config.memory_mb, progress) if config.verify else []
    seconds["verify"] = time.perf_counter() - t0
    audit, exact_end = None, {}
    if config.audit:
        t0 = time.perf_counter()
        act = sweep(model, pairs, config.mode, memory_mb=config.memory_mb, progress=progress)  # type: ignore[arg-type]
        exact_end["heads"], exact_end["mlps"] = act.effects(att.metric)
        path = None
        if config.mode == "activation":
            p_exact = sweep(model, pairs, "path", memory_mb=config.memory_mb, progress=progress).effects(att.metric)
            p_att = attribute(model, pairs, att.metric, mode="path", neurons=False, qk_fix=False, progress=progress)
            p_screen = (p_att.effect(p_att.head)[..., 0], p_att.effect(p_att.mlp)[..., 0])
            exact_end["path_heads"], exact_end["path_mlps"] = p_exact
            exact_end["path_screen_heads"], exact_end["path_screen_mlps"] = p_screen
            path = (p_screen, p_exact)
        audit = audit_table((heads[..., 0], mlps[..., 0]), (exact_end["heads"], exact_end["mlps"]), att.metric.sign, path)
        if config.grad_drop and att.graddrop:
            gd = audit_table((att.graddrop["head"][..., 0], att.graddrop["mlp"][..., 0]),
                             (exact_end["heads"].abs(), exact_end["mlps"].abs()), 1)
            audit.update({f"graddrop_{k}": v for k, v in gd.items() if k.startswith(("exact_top", "spearman_end"))})
        seconds["audit"] = time.perf_counter() - t0
    return ScreenResult(config, pairs, att.metric.name, config.mode, heads, mlps, q, k, neurons, att.graddrop, verified,
                        audit, exact_end, seconds)


def run_screen(config: ScreenConfig, out: str | Path, model: HookedTransformer | None = None,
               progress: bool = True) -> ScreenResult:
    """The ``circuits screen`` job: pairs (built or ``--pairs-from``), screen, verify, audit, saved to ``out``."""
    from circuits.models.loading import load_model

    model = model or load_model(config.model, dtype=config.dtype)
    pairs, _ = config.load_pairs(model)
    result = screen(model, pairs, config, progress=progress)
    result.save(out)
    return result
