"""Neurons of the key MLPs (the shape of Nikankin et al. 2025's finding): every neuron of the key MLPs patched alone at
END, exactly; what share of each layer's neurons carries most of its effect; and accuracy after knocking out only the
top neurons of the key MLPs against the whole MLPs and as many random neurons (Figure 3-style).

Run: ``python experiments/fig_neurons.py [--top-mlps 3]``; ``--replot`` redraws."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import _common as C
import _tables as T

from circuits.config import count, option
from circuits.patching.engines.end_sweep import sweep
from circuits.patching.core.metrics import get_metric
from circuits.beyond.neurons.config import NeuronConfig
from circuits.beyond.neurons.result import NeuronResult
from circuits.beyond.neurons.job import neuron_knockout
from circuits.patching.engines.neuron_sweep import sweep_neurons
from circuits.types import Component
from circuits.viz.figures import write_figure


@dataclass(frozen=True)
class Config(C.KeyHeadConfig):
    top_mlps: int = count(3, help="key MLPs whose neurons are swept")
    metric: str = option("fraction")
    shares: tuple[float, ...] = option((0.005, 0.01, 0.02, 0.05, 0.1), help="shares of neurons knocked out")
    out: str = option("results/fig_neurons")


def main(config: Config, model=None) -> NeuronResult:
    t = C.Timer()
    model = model or C.model_for(config.model, config.dtype)
    r = C.identify_result(config, model=model)
    layers = [c.layer for c in r.scores(None).top(config.top_mlps, "mlps", first=r.key_rule)]
    t(f"key MLPs {layers}")
    m = get_metric(config.metric)
    start = time.perf_counter()
    ns = sweep_neurons(model, r.pairs, config.mode, layers=layers, prob=m.name == "prob", progress=False)  # type: ignore[arg-type]
    whole = sweep(model, r.pairs, config.mode, components=[Component.mlp(l) for l in layers], progress=False).scores(m).mlps  # type: ignore[arg-type]
    nc = NeuronConfig(model=config.model, task=config.task, n_pairs=len(r.pairs), seed=config.seed, layers=tuple(layers),
                      mode=config.mode, metric=m.name, shares=config.shares, pairs_from=str(config.identify_folder()))
    result = NeuronResult(nc, r.pairs, ns, m.name, {l: float(whole[l]) for l in layers})
    t("every neuron patched")
    result.knockout = neuron_knockout(model, r.pairs, ns.scores(m).by_layer(), m.sign, config.shares)
    result.seconds = time.perf_counter() - start
    t("knockout")
    result.save(config.out)
    return result


def published(result: NeuronResult) -> dict:
    """The two tables of docs/results.md this result gives (experiments/_tables.py renders them; publish.py copies
    them)."""
    keep = ("share_for_50pct", "share_for_80pct", "share_for_90pct", "top1pct_of_total", "sum_of_neuron_effects",
            "whole_mlp_effect")
    shares = {f"MLP{l}": {k: v[k] for k in keep} for l, v in result.shares().items()}
    k = result.knockout
    tables = {"neurons": {"render": "neurons", "data": {"shares": shares}}}
    if k:
        tables["neurons_knockout"] = {"render": "neurons_knockout", "data": {"knockout": {
            f: k[f] for f in ("shares", "n_neurons", "top_accuracy", "random_accuracy", "whole_accuracy")}}}
    return tables


def plot(result: NeuronResult, out: Path) -> Path:
    T.write_published(out, published(result))
    return write_figure(result.figure(), Path(out) / "figure.html")


if __name__ == "__main__":
    C.run(Config, main, plot)
