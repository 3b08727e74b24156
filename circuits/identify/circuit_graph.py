"""Edges inside identify: ``circuits identify --receivers`` sweeps every sender into chosen receivers after the head
sweep (:func:`resolve_receivers` names them), keeps them in its result (``edges.pt``) and draws the circuit
(``circuit.html``: :func:`circuit_figure`). :mod:`circuits.beyond.edges` saves the same edges as their own result
and uses these functions."""

from __future__ import annotations

import re
from typing import Any

import torch

from circuits.patching.engines.edge_sweep import EdgeSweep
from circuits.patching.core.metrics import get_metric
from circuits.patching.core.ranking import order
from circuits.types import Component, Receiver


_TOP = re.compile(r"^\s*top\s*(\d+)\s*$", re.IGNORECASE)


def resolve_receivers(text: str, result: Any) -> list[Receiver]:
    """``"20.8,MLP19"`` as given, or ``"top5"``: the five most important components (heads and MLPs) of an identify
    result by its key rule's metric (heads of layer 0 left out: nothing comes before them)."""
    m = _TOP.match(text)
    if not m:
        return Receiver.parse_many(text)
    k = int(m.group(1))
    if k < 1:
        raise ValueError("--receivers topK needs K >= 1")
    metric = result.metric()
    heads, mlps = result.effects(metric)
    cands = [(Component("head", l, h), float(heads[l, h])) for l in range(1, heads.shape[0]) for h in range(heads.shape[1])]
    cands += [(Component.mlp(l), float(mlps[l])) for l in range(mlps.shape[0])]
    ranked = order(torch.tensor([e for _, e in cands]), metric.sign)[:k].tolist()
    return Receiver.parse_many([str(cands[i][0]) for i in ranked])


def circuit_edges(edges: EdgeSweep, receiver_effects: dict[str, float], metric: str, top: int = 4) -> tuple[list, dict]:
    """The edges a circuit graph draws: each receiver's ``top`` senders (the channel with the largest effect for a
    head), and each receiver's own edge to the logits; with the x position (layer) of every node."""
    m = get_metric(metric)
    eff = edges.effects(m)
    out, layers = [], {"logits": float(max((r.layer for r in edges.receivers), default=0) + 1.5)}
    for comp in dict.fromkeys(r.component for r in edges.receivers):
        cols = [j for j, r in enumerate(edges.receivers) if r.component == comp]
        best: dict[Component, tuple[float, str]] = {}
        for j in cols:
            for i, s in enumerate(edges.senders):
                v = float(eff[i, j])
                if v == v and (s not in best or abs(v) > abs(best[s][0])):
                    best[s] = (v, edges.receivers[j].channel or "")
        items = list(best.items())
        ranked = [items[i] for i in order(torch.tensor([v for _, (v, _) in items]), m.sign)[:top].tolist()]
        name = str(comp)
        layers[name] = comp.layer + (0.5 if comp.kind == "mlp" else 0.0)
        for s, (v, ch) in ranked:
            layers.setdefault(str(s), s.layer + (0.5 if s.kind == "mlp" else 0.0))
            out.append((str(s), name, v, ch))
        if name in receiver_effects:
            out.append((name, "logits", receiver_effects[name], ""))
    return out, layers


def circuit_figure(edges: EdgeSweep, receiver_effects: dict[str, float], metric: str, title: str, top: int = 4):
    from circuits.viz.analysis_figures import circuit_graph

    e, layers = circuit_edges(edges, receiver_effects, metric, top)
    return circuit_graph(e, layers, title, metric)


def receiver_effects_of(result: Any, receivers: list[Receiver], metric: str) -> dict[str, float]:
    """Each receiver component's own path-patching effect on the logits, from an identify result."""
    heads, mlps = result.effects(metric)
    out = {}
    for r in receivers:
        c = r.component
        out[str(c)] = float(heads[c.layer, c.head] if c.kind == "head" else mlps[c.layer])
    return out


def edge_summary(edges: EdgeSweep, metric: str, top: int = 10) -> dict[str, Any]:
    """Each receiver's ``top`` senders with their effects by ``metric`` (``summary.json``'s ``edges``)."""
    return {str(r): [[str(s), v] for s, v in edges.top_senders(r, top, metric)] for r in edges.receivers}
