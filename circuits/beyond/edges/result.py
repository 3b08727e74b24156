"""The saved edges of a circuit and its graph."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from circuits.data.pairs import PromptPair, read_pairs, write_pairs
from circuits.patching.edges import EdgeSweep
from circuits.patching.metrics import get_metric
from circuits.patching.ranking import order
from circuits.io import load_torch, read_json, save_torch, write_json
from circuits.beyond.edges.config import EdgesConfig
from circuits.results import Result
from circuits.types import Component, Receiver


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
    return {str(r): [[str(s), v] for s, v in edges.top_senders(r, top, metric)] for r in edges.receivers}


@dataclass(eq=False, repr=False)
class EdgeResult(Result):
    """Sender-by-receiver path-patching effects at END and the circuit they draw."""

    kind = "edges"
    config_type = EdgesConfig

    config: EdgesConfig
    pairs: list[PromptPair]
    edges: EdgeSweep
    receiver_effects: dict[str, float]
    metric: str = "fraction"

    def figure(self, title: str | None = None):
        return circuit_figure(self.edges, self.receiver_effects, self.metric,
                              title or f"Circuit of {getattr(self.config, 'task', '')}: senders -> receivers -> logits")

    def top_senders(self, top: int = 10) -> dict[str, Any]:
        """Each receiver's ``top`` senders with their effects (``summary.json``'s ``edges``)."""
        return edge_summary(self.edges, self.metric, top)

    @classmethod
    def of_identify(cls, result: Any) -> EdgeResult | None:
        """The edges an identify result made with ``--receivers`` keeps, as an edge result (None when it has none);
        each receiver's own effect on the logits comes from its sweep, by its key rule's metric."""
        if result.edges is None:
            return None
        metric = result.key_rule.metric
        return cls(EdgesConfig.from_json(result.config.to_json()), result.pairs, result.edges,
                   receiver_effects_of(result, result.edges.receivers, metric), metric)

    def _write(self, folder: Path) -> None:
        from circuits.viz.figures import write_figure

        write_json(folder / "summary.json", {"metric": self.metric, "receiver_effects": self.receiver_effects,
                                             "edges": edge_summary(self.edges, self.metric),
                                             "effects": self.edges.effects(self.metric).tolist(),
                                             "senders": [str(s) for s in self.edges.senders],
                                             "receivers": [str(r) for r in self.edges.receivers]})
        write_pairs(folder / "pairs.jsonl", self.pairs)
        save_torch(self.edges.tensors(), folder / "edges.pt")
        write_figure(self.figure(), folder / "circuit.html")

    @classmethod
    def _read(cls, folder: Path, config: EdgesConfig) -> EdgeResult:
        s = read_json(folder / "summary.json")
        t = load_torch(folder / "edges.pt", "edge sweep")
        pairs = read_pairs(folder / "pairs.jsonl") if (folder / "pairs.jsonl").is_file() else []
        return cls(config, pairs, EdgeSweep.from_tensors(t), s["receiver_effects"], s.get("metric", "fraction"))
