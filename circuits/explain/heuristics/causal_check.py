"""The causal check of heuristic classes: knock one class's neurons out over the operand grid, and compare the drop on
the prompts the class covers with the prompts it does not, and with as many random neurons of the same MLPs
(Nikankin et al., ICLR 2025, Section 5: ablating a heuristic's neurons hurts the prompts it covers).

A knocked-out neuron's ``hook_post`` becomes its mean over the grid's prompts, at each position of the template
(:func:`~circuits.patching.ablation.values.compute_means` over the grid's reference prompts, per template and length),
at every position, the prefix included; every set of neurons (each class, each random draw, and none) is one mask of
the ablation executor (:func:`~circuits.patching.ablation.executor.run_ablation`), so many sets run per forward
pass and a shared few-shot prefix once per set. The metric is the drop of the correct answer's probability at END
(its first token: the leading digit where numbers are split into digits), ``p(clean) - p(knocked out)``, per prompt;
the intervals are percentile bootstraps over prompts (:mod:`circuits.patching.core.uncertainty`).
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from typing import Any

import torch
from jaxtyping import Bool, Float
from torch import Tensor
from tqdm.auto import tqdm

from circuits.data.grid import OperandGrid
from circuits.models.backend import Model
from circuits.models.forward import unembed_end
from circuits.patching.ablation.executor import AblationMasks, AblationSpec, run_ablation
from circuits.patching.ablation.values import AblationValues, compute_means
from circuits.patching.core.uncertainty import percentile_interval, resample_pairs

NeuronSet = dict[int, list[int]]  # {layer: [index, ...]}


def grid_means(model: Model, grid: OperandGrid, layers: Sequence[int]) -> AblationValues:
    """``hook_post`` of ``layers`` averaged over the grid's prompts, per template, length and position."""
    return compute_means(model, grid.prompts, source="reference", heads_and_mlps=False, neuron_layers=sorted(layers),
                         progress=False)


@torch.no_grad()
def answer_probs(model: Model, grid: OperandGrid, sets: Sequence[Mapping[int, Sequence[int]]], means: AblationValues,
                 *, rows_per_batch: int = 256, progress: bool = False
                 ) -> tuple[Float[Tensor, "set prompt"], Bool[Tensor, "set prompt"]]:
    """The correct answer's probability at END of every grid prompt with each set's neurons mean-ablated (an empty
    set: the clean run), and whether the answer is the top token."""
    for s in sets:
        for layer, idx in s.items():
            if layer not in means.post:
                raise ValueError(f"No grid means for MLP layer {layer}; take means over layers {sorted(means.post)}")
            bad = [i for i in idx if not 0 <= int(i) < model.cfg.d_mlp]
            if bad:
                raise ValueError(f"Neuron index {bad[0]} of layer {layer} is outside d_mlp "
                                 f"(accepted: 0..{model.cfg.d_mlp - 1})")
    prompts = grid.prompts
    answers = torch.tensor([p.answer_token_id for p in prompts])
    out = torch.empty(len(sets), len(prompts))
    top = torch.empty(len(sets), len(prompts), dtype=torch.bool)
    # sets in chunks of what one batch holds, only so the bar moves: each set's rows are the same either way
    per = max(1, rows_per_batch // max(1, len(prompts)))
    bar = tqdm(total=len(sets), desc="class knockout", unit="set", disable=not progress)
    for s0 in range(0, len(sets), per):
        chunk = sets[s0 : s0 + per]
        masks = AblationMasks.of_sets(model, [((), ())] * len(chunk), [dict(s) for s in chunk])
        resid = run_ablation(model, prompts, AblationSpec(means, masks), rows_per_batch=rows_per_batch).resid
        for j in range(len(chunk)):
            probs = unembed_end(model, resid[j]).softmax(-1).cpu()
            out[s0 + j] = probs[torch.arange(len(prompts)), answers]
            top[s0 + j] = probs.argmax(-1) == answers
        bar.update(len(chunk))
    bar.close()
    return out, top


def random_like(neurons: Mapping[int, Sequence[int]], d_mlp: int, rng: random.Random) -> NeuronSet:
    """As many neurons per layer as ``neurons`` has, drawn uniformly from the rest of each layer."""
    out = {}
    for layer, idx in neurons.items():
        taken = set(int(i) for i in idx)
        out[int(layer)] = sorted(rng.sample([i for i in range(d_mlp) if i not in taken], len(taken)))
    return out


def interval(values: Float[Tensor, " prompt"], n_boot: int, seed: int) -> dict[str, float]:
    """The mean of per-prompt values with its 95% percentile bootstrap interval over prompts."""
    if len(values) == 0:
        return {"mean": float("nan"), "low": float("nan"), "high": float("nan"), "n": 0}
    idx = resample_pairs(len(values), n_boot, seed)
    low, high = percentile_interval(values[idx].mean(1))
    return {"mean": float(values.mean()), "low": float(low), "high": float(high), "n": len(values)}


def class_knockout(model: Model, grid: OperandGrid, classes: Mapping[str, tuple[NeuronSet, Bool[Tensor, " prompt"]]],
                   *, n_random: int = 5, seed: int = 0, n_boot: int = 1000, means: AblationValues | None = None,
                   rows_per_batch: int = 256, progress: bool = False) -> dict[str, Any]:
    """Knock out each class's neurons (``classes[name] = (neurons, covered prompts)``) and ``n_random`` draws of as
    many random neurons of the same MLPs; per class, the answer-probability drop (mean and interval) on covered and
    uncovered prompts, for the class and for the random draws (each prompt's drop averaged over the draws), and the
    per-prompt drops. ``clean``: each prompt's answer probability without ablation."""
    if n_random < 1:
        raise ValueError(f"n_random must be at least 1, got {n_random}")
    names = list(classes)
    layers = sorted({l for n in names for l in classes[n][0]})
    if not layers:
        raise ValueError("No class has neurons to knock out")
    means = means if means is not None else grid_means(model, grid, layers)
    rng = random.Random(seed)
    sets: list[Mapping[int, Sequence[int]]] = [{}]
    for n in names:
        sets.append(classes[n][0])
        sets += [random_like(classes[n][0], model.cfg.d_mlp, rng) for _ in range(n_random)]
    probs, top = answer_probs(model, grid, sets, means, rows_per_batch=rows_per_batch, progress=progress)
    clean = probs[0]
    out: dict[str, Any] = {"metric": "drop of the answer's probability at END (first answer token), p(clean) - "
                                     "p(knocked out)", "n_random": n_random, "clean": clean.tolist(),
                           "clean_accuracy": float(top[0].float().mean()), "classes": {}}
    for i, n in enumerate(names):
        at = 1 + i * (1 + n_random)
        drop = clean - probs[at]
        rnd = (clean[None] - probs[at + 1 : at + 1 + n_random]).mean(0)
        cov = classes[n][1].bool()
        out["classes"][n] = {
            "neurons": {str(l): list(map(int, v)) for l, v in classes[n][0].items()},
            "n_neurons": sum(len(v) for v in classes[n][0].values()),
            "accuracy": float(top[at].float().mean()),
            "random_accuracy": float(top[at + 1 : at + 1 + n_random].float().mean()),
            "covered": cov.tolist(),
            "drop": drop.tolist(), "random_drop": rnd.tolist(),
            "covered_drop": interval(drop[cov], n_boot, seed), "uncovered_drop": interval(drop[~cov], n_boot, seed),
            "random_covered_drop": interval(rnd[cov], n_boot, seed),
            "random_uncovered_drop": interval(rnd[~cov], n_boot, seed),
        }
    return out
