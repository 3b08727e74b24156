"""The saved edges of a circuit and its graph."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any


from circuits.data.pairs import PromptPair, read_pairs
from circuits.identify.circuit_graph import circuit_edges, circuit_figure, edge_summary, receiver_effects_of
from circuits.patching.engines.edge_sweep import EdgeSweep
from circuits.patching.core.metrics import DEFAULT_METRIC
from circuits.io import load_torch, read_json
from circuits.beyond.edges.config import EdgesConfig
from circuits.results import Result, write_parts

__all__ = ["EdgeResult", "circuit_edges", "circuit_figure", "edge_summary", "receiver_effects_of"]


@dataclass(eq=False, repr=False)
class EdgeResult(Result[EdgesConfig]):
    """Sender-by-receiver path-patching effects at END and the circuit they draw."""

    kind = "edges"

    pairs: list[PromptPair]
    edges: EdgeSweep
    receiver_effects: dict[str, float]
    metric: str = DEFAULT_METRIC

    def figure(self, title: str | None = None):
        return circuit_figure(self.edges, self.receiver_effects, self.metric,
                              title or f"Circuit of {getattr(self.config, 'task', '')}: senders -> receivers -> logits")

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

        summary = {"metric": self.metric, "receiver_effects": self.receiver_effects,
                   "edges": edge_summary(self.edges, self.metric), "effects": self.edges.scores(self.metric)["edges"].tolist(),
                   "senders": [str(s) for s in self.edges.senders], "receivers": [str(r) for r in self.edges.receivers]}
        write_parts(folder, self.summary_json(summary), self.pairs, {"edges.pt": self.edges.tensors()})
        write_figure(self.figure(), folder / "circuit.html")

    @classmethod
    def _read(cls, folder: Path, config: EdgesConfig) -> EdgeResult:
        s = read_json(folder / "summary.json")
        t = load_torch(folder / "edges.pt", "edge sweep")
        pairs = read_pairs(folder / "pairs.jsonl") if (folder / "pairs.jsonl").is_file() else []
        return cls(config, pairs, EdgeSweep.from_tensors(t, folder / "edges.pt"), s["receiver_effects"], s.get("metric", DEFAULT_METRIC))
