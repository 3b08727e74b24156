"""Neurons at END as a job and a saved result: ``circuits neurons`` (the shape of Nikankin et al. 2025's finding).

For each chosen MLP (by default the key MLPs of an identify result) every neuron is patched at END exactly
(:func:`~circuits.patching.engines.neuron_sweep.sweep_neurons`); the result says what share of each layer's neurons carries
most of its neurons' summed effect, and compares knocking out only the top neurons of the key MLPs (mean
ablation, per template position) with knocking out the whole MLPs and as many random neurons -- accuracy, as the
paper's Figure 3 compares key and random heads."""

from __future__ import annotations

import argparse
import random
import time
from pathlib import Path
from typing import Any
import torch
from circuits.models.backend import Model
from circuits.data.pairs import PromptPair
from circuits.identify.result import load_identify
from circuits.identify.validity import check_job, print_warnings
from circuits.models.loading import load_model
from circuits.patching.engines.end_sweep import sweep
from circuits.patching.core.metrics import get_metric
from circuits.patching.engines.neuron_sweep import sweep_neurons, top_neurons
from circuits.types import Component
from circuits.validate.knockout import knockout, replacement_values
from circuits.validate.neuron_knockout import knockout_neurons, neuron_means
from circuits.beyond.neurons.config import NeuronConfig
from circuits.beyond.neurons.result import NeuronResult


def neuron_knockout(model: Model, pairs: list[PromptPair], effects: dict[int, torch.Tensor], sign: int,
                    shares: tuple[float, ...], seed: int = 0) -> dict[str, Any]:
    """Accuracy with the top ``share`` of each layer's neurons (by ``effects``) mean-ablated, with as many random
    neurons, with the whole MLPs, and with nothing."""
    layers = sorted(effects)
    means = neuron_means(model, pairs, layers)
    rng = random.Random(seed)
    d_mlp = model.cfg.d_mlp
    none = knockout(model, pairs, [], means=replacement_values(model, pairs))
    whole = knockout(model, pairs, [], layers, means=replacement_values(model, pairs))
    out: dict[str, Any] = {"layers": layers, "shares": list(shares), "none_accuracy": none.accuracy,
                           "whole_accuracy": whole.accuracy, "whole_answer_prob": whole.answer_prob,
                           "top_accuracy": [], "top_answer_prob": [], "random_accuracy": [], "n_neurons": []}
    for share in shares:
        top = {l: top_neurons(effects[l], sign, share) for l in layers}
        rnd = {l: rng.sample(range(d_mlp), len(top[l])) for l in layers}
        t = knockout_neurons(model, pairs, top, means)
        r = knockout_neurons(model, pairs, rnd, means)
        out["top_accuracy"].append(t.accuracy)
        out["top_answer_prob"].append(t.answer_prob)
        out["random_accuracy"].append(r.accuracy)
        out["n_neurons"].append(sum(len(v) for v in top.values()))
    return out


def run(config: NeuronConfig, out: str | Path, *, model: Model | None = None,
                progress: bool = True) -> NeuronResult:
    """The ``circuits neurons`` job."""
    layers = list(config.layers)
    if not layers:
        if not config.pairs_from:
            raise ValueError("Give --layers (e.g. 19,24) or --pairs-from an identify result whose key MLPs are taken")
        made = load_identify(config.pairs_from)
        layers = [c.layer for c in made.scores(None).top(config.top_mlps, "mlps", first=made.key_rule)]
    model = model or load_model(config.model, dtype=config.dtype)
    for l in layers:
        if not 0 <= l < model.cfg.n_layers:
            raise ValueError(f"MLP layer {l} is outside this model (layers 0..{model.cfg.n_layers - 1})")
    pairs, stats = config.load_pairs(model)
    # The pairs' validity checks (docs/identify.md): past a hard threshold one line now, before the sweep
    validity = check_job(model, pairs, stats, config, "neurons")
    start = time.perf_counter()
    m = get_metric(config.metric)
    ns = sweep_neurons(model, pairs, config.mode, layers=layers, memory_mb=config.memory_mb,  # type: ignore[arg-type]
                       prob=m.name == "prob", progress=progress)
    whole = sweep(model, pairs, config.mode, components=[Component.mlp(l) for l in layers],  # type: ignore[arg-type]
                  memory_mb=config.memory_mb, progress=False).scores(m).mlps
    result = NeuronResult(config, pairs, ns, m.name, {l: float(whole[l]) for l in layers}, _validity=validity)
    if config.shares:
        result.knockout = neuron_knockout(model, pairs, result.sweep.scores(m).by_layer(), m.sign, config.shares, config.knockout_seed)
    result.seconds = time.perf_counter() - start
    result.save(out)
    return result


def printout(args: argparse.Namespace, config: NeuronConfig, r: NeuronResult, seconds: float) -> None:
    for layer, s in r.shares().items():
        print(f"  MLP{layer}: {100 * s['share_for_80pct']:.1f}% of neurons carry 80% of the summed neuron effect; "
              f"top 1% carry {100 * s['top1pct_of_total']:.0f}%")
    k = r.knockout
    if k:
        print(f"  accuracy: none {k['none_accuracy']:.2f}, whole MLPs {k['whole_accuracy']:.2f}, top "
              + ", ".join(f"{100 * s:g}% {a:.2f}" for s, a in zip(k['shares'], k['top_accuracy'])))
    print(f"-> {args.out}/figure.html")
    print_warnings(r.validity(), f"[{config.task}]")
