"""The circuit as a graph (which components feed the top ones, beyond the paper's head list): path patching from every
earlier head and MLP into the most important components at END (their query, key and value inputs, or an MLP's input),
then senders -> key heads -> MLPs -> logits. The same as ``circuits identify --receivers top5`` and ``circuits edges
--heads-from results/identify/addition``.

Run: ``python experiments/fig_circuit.py [--receivers top5]``; ``--replot`` redraws."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import _common as C

from circuits.config import option
from circuits.beyond.edges.config import EdgesConfig
from circuits.beyond.edges.job import edges_result
from circuits.beyond.edges.result import EdgeResult
from circuits.viz.figures import write_figure


@dataclass(frozen=True)
class Config(C.KeyHeadConfig, EdgesConfig):
    receivers: str = option("top5", help="receivers: topK, or e.g. 20.8,MLP19")
    out: str = option("results/fig_circuit")


def main(config: Config, model=None) -> EdgeResult:
    t = C.Timer()
    model = model or C.model_for(config.model, config.dtype)
    r = C.identify_result(config, model=model)
    result = edges_result(model, r, config, progress=False)  # the job of `circuits edges`
    t(f"edges into {', '.join(result.receiver_effects)}")
    result.save(config.out)
    return result


def plot(result: EdgeResult, out: Path) -> Path:
    return write_figure(result.figure(), Path(out) / "circuit.html")


if __name__ == "__main__":
    C.run(Config, main, plot)
