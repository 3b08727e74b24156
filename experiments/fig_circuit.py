"""The circuit as a graph (which components feed the top ones, beyond the paper's head list): path patching from every
earlier head and MLP into the most important components at END (their query, key and value inputs, or an MLP's input),
then senders -> key heads -> MLPs -> logits. The same as ``circuits identify --receivers top5``.

Run: ``python experiments/fig_circuit.py [--receivers top5]``; ``--replot`` redraws."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import _common as C

from circuits.config import option
from circuits.beyond.edges.config import EdgesConfig
from circuits.beyond.edges.result import EdgeResult, receiver_effects_of
from circuits.beyond.edges.job import resolve_receivers
from circuits.patching.edges import sweep_edges
from circuits.viz.figures import write_figure


@dataclass(frozen=True)
class Config(C.KeyHeadConfig, EdgesConfig):
    receivers: str = option("top5", help="receivers: topK, or e.g. 20.8,MLP19")
    out: str = option("results/fig_circuit")


def main(config: Config, model=None) -> EdgeResult:
    t = C.Timer()
    model = model or C.model_for(config.model, config.dtype)
    r = C.identify_result(config, model=model)
    receivers = resolve_receivers(config.receivers, r)
    t(f"receivers {', '.join(map(str, receivers))}")
    edges = sweep_edges(model, r.pairs, receivers, progress=False)
    metric = r.key_rule.metric
    result = EdgeResult(config, r.pairs, edges, receiver_effects_of(r, receivers, metric), metric)
    t("edges")
    result.save(config.out)
    return result


def plot(result: EdgeResult, out: Path) -> Path:
    return write_figure(result.figure(), Path(out) / "circuit.html")


if __name__ == "__main__":
    C.run(Config, main, plot)
