"""Edges inside identify: ``circuits identify --receivers`` sweeps every sender into chosen receivers after the head
sweep (:func:`resolve_receivers` names them), keeps them in its result (``edges.pt``) and draws the circuit
(``circuit.html``: :func:`circuit_figure`). :mod:`circuits.beyond.edges` saves the same edges as their own result
and uses these functions."""

from __future__ import annotations

import re
from typing import Any

import torch

from circuits.patching.engines.edge_sweep import EdgeSweep
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
    ranked = [c for c, _ in result.scores(None).ranked(part=("heads", "mlps")) if isinstance(c, Component) or c.layer]
    return Receiver.parse_many([str(c if isinstance(c, Component) else Component.of(c)) for c in ranked[:k]])


def edge_intervals(edges: EdgeSweep, metric: str, n_boot: int = 200, level: float = 0.95,
                   seed: int = 0) -> tuple[torch.Tensor, torch.Tensor] | None:
    """Percentile bootstrap intervals ``[sender, receiver]`` (low, high) of every edge's effect over ``n_boot``
    resamples of the pairs (as :func:`circuits.patching.core.uncertainty.bootstrap` does for heads); None with fewer
    than two pairs."""
    from circuits.patching.core.uncertainty import _Resample, percentile_interval, resample_pairs

    m = edges.metric(metric)
    n_pairs = int(edges.baseline.answer.shape[-1])
    if n_pairs < 2:
        return None
    idx = resample_pairs(n_pairs, n_boot, seed)
    draws = []
    for start in range(0, n_boot, 25):
        rows = idx[start:start + 25]
        draws.append(m.effect(_Resample(edges.readouts, rows), _Resample(edges.baseline, rows)).movedim(-1, 0))
    return percentile_interval(torch.cat(draws).float(), level)


def circuit_edges(edges: EdgeSweep, receiver_effects: dict[str, float], metric: str, top: int = 10,
                  intervals: bool = True) -> list[tuple]:
    """The edges a circuit graph draws: exactly those of :func:`edge_summary` (each receiver's ``top`` senders, a
    head receiver's q, k and v inputs each on their own), as ``(sender, receiver, value, (low, high) or None)``, then
    each receiver component's own effect on the logits ``(component, "logits", value, None)``."""
    ci = edge_intervals(edges, metric) if intervals else None
    scores = edges.scores(metric)
    out: list[tuple] = []
    for j, r in enumerate(edges.receivers):
        for s, v in scores.ranked(top, into=r):
            i = edges.senders.index(s)
            out.append((str(s), str(r), float(v), (float(ci[0][i, j]), float(ci[1][i, j])) if ci is not None else None))
    for comp in dict.fromkeys(r.component for r in edges.receivers):
        if str(comp) in receiver_effects:
            out.append((str(comp), "logits", float(receiver_effects[str(comp)]), None))
    return out


def circuit_figure(edges: EdgeSweep, receiver_effects: dict[str, float], metric: str, title: str, top: int = 10):
    """The layered circuit graph of :func:`circuit_edges` (every edge ``summary.json`` lists, with its interval)."""
    from circuits.viz.analysis_figures import circuit_graph

    return circuit_graph(circuit_edges(edges, receiver_effects, metric, top), title, metric,
                         n_pairs=int(edges.baseline.answer.shape[-1]))


def receiver_effects_of(result: Any, receivers: list[Receiver], metric: str) -> dict[str, float]:
    """Each receiver component's own path-patching effect on the logits, from an identify result."""
    s = result.scores(metric)
    out = {}
    for r in receivers:
        c = r.component
        out[str(c)] = s.value(c)
    return out


def edge_summary(edges: EdgeSweep, metric: str, top: int = 10) -> dict[str, Any]:
    """Each receiver's ``top`` senders with their effects by ``metric`` (``summary.json``'s ``edges``)."""
    scores = edges.scores(metric)
    return {str(r): [[str(s), v] for s, v in scores.ranked(top, into=r)] for r in edges.receivers}

