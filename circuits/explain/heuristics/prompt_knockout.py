"""Nikankin et al.'s per-prompt knockout read on accuracy (ICLR 2025, Section 4.2, "Knocking out neurons by
prompt"; their ``heuristics_analysis.prompt_knockout_experiment``; issue 43).

For each grid prompt the model answers correctly, the heuristics the prompt is *associated* with are those whose
condition its operands and result meet; the neurons classified into those heuristics are ranked (most of the
prompt's heuristics first, as their code ranks; then the highest match score, as their text says; then the larger
END effect) and the first ``limit`` of each MLP are knocked out together; the read is whether the model's top token
at END is still the answer (accuracy). The control knocks out as many neurons per MLP drawn at random, per prompt,
from the MLP's top neurons that the prompt is *not* associated with (their code draws from the layer's top neurons
less the ablated ones; their text says "neurons from unassociated heuristics"), ``n_random`` draws per prompt.

As theirs: the ablation is zero on ``hook_post`` at every position (``--prompt-knockout-ablation mean``: the grid's
mean, as the class knockout); the prompts are the correctly answered ones (``all``: every grid prompt). Where an MLP
has fewer unassociated top neurons than the limit asks, both arms take that many (the pairing stays exact; their
sweep never passes half the top neurons, so it never binds there). Each set runs through the ablation executor
(:func:`~circuits.patching.ablation.executor.run_ablation`), one prompt's sets per call. Accuracy per limit with 95%
percentile bootstrap intervals over prompts, and the paired difference associated minus random (Holm over the
limits) by :func:`prompt_knockout_table`, computed from the per-prompt reads the result keeps.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from typing import Any

import torch
from tqdm.auto import tqdm

from circuits.data.grid import OperandGrid
from circuits.explain.heuristics.rules import NONE, Rule
from circuits.models.backend import Model
from circuits.models.forward import unembed_end
from circuits.patching.ablation.executor import AblationMasks, AblationSpec, run_ablation
from circuits.patching.ablation.values import AblationValues, zero_values
from circuits.types import Neuron

ABLATIONS = ("zero", "mean")
CONTROLS = ("top", "mlp")  # the MLP's unassociated top neurons (theirs), or any of its unassociated neurons
PROMPTS = ("correct", "all")
METRIC = ("accuracy: the model's top token at END equals the answer's token there (the first answer token, or the "
          "token at --answer-position)")
NeuronSet = dict[int, list[int]]


def neuron_heuristics(classes: Sequence[Mapping[str, Any]]) -> list[list[tuple[Rule, float]]]:
    """Each neuron's heuristics: the best rule of every kind it passes, with its match score (none: empty)."""
    out = []
    for c in classes:
        kinds = [k for k in c["classes"] if k != NONE]
        out.append([(Rule.from_json(c["best"][k]["rule"]), float(c["best"][k]["score"])) for k in kinds])
    return out


def associated_neurons(grid: OperandGrid, neurons: Sequence[Neuron], classes: Sequence[Mapping[str, Any]],
                       effects: torch.Tensor | None = None, sign: int = 1) -> list[NeuronSet]:
    """Per grid prompt, ``{layer: [index, ...]}``: the neurons one of whose heuristics holds on the prompt's
    operands and result, ranked per layer by how many of them hold (most first), then the highest match score among
    them, then the larger important-direction effect (``effects[i]`` of ``neurons[i]``), then the order given."""
    rules = neuron_heuristics(classes)
    a, b, c = grid.a, grid.b, grid.result
    weight = [0.0] * len(neurons) if effects is None else (effects * sign).nan_to_num(0).tolist()
    holds = [[r.holds(a, b, c) for r, _ in rs] for rs in rules]
    out = []
    for p in range(len(grid.prompts)):
        ranked: dict[int, list[tuple]] = {}
        for i, n in enumerate(neurons):
            scores = [s for (_, s), h in zip(rules[i], holds[i]) if bool(h[p])]
            if scores:
                ranked.setdefault(n.layer, []).append((-len(scores), -max(scores), -weight[i], i, n.index))
        out.append({l: [x[-1] for x in sorted(v)] for l, v in sorted(ranked.items())})
    return out


def control_pools(neurons: Sequence[Neuron], d_mlp: int, control: str) -> NeuronSet:
    """Per MLP of ``neurons``, the neurons a control may draw from before the prompt's associated ones are taken
    out: its top neurons (``top``) or all of them (``mlp``)."""
    if control not in CONTROLS:
        raise ValueError(f"Unknown control {control!r}; accepted: {', '.join(CONTROLS)}")
    layers = sorted({n.layer for n in neurons})
    if control == "mlp":
        return {l: list(range(d_mlp)) for l in layers}
    return {l: sorted(n.index for n in neurons if n.layer == l) for l in layers}


def prompt_sets(associated: Mapping[int, Sequence[int]], pools: Mapping[int, Sequence[int]], limit: int,
                n_random: int, rng: random.Random) -> tuple[NeuronSet, list[NeuronSet]]:
    """One prompt's knocked-out neurons at ``limit`` per MLP (the first of its ranked associated neurons) and
    ``n_random`` control sets of as many neurons per MLP, drawn from the pool less every associated neuron (both arms
    take fewer where the pool has fewer)."""
    ablated: NeuronSet = {}
    counts: dict[int, int] = {}
    for l, idx in associated.items():
        free = len(set(pools.get(l, ())) - set(idx))
        k = min(limit, len(idx), free)
        if k:
            ablated[l], counts[l] = list(idx[:k]), k
    randoms = []
    for _ in range(n_random):
        randoms.append({l: sorted(rng.sample(sorted(set(pools[l]) - set(associated[l])), k)) for l, k in counts.items()})
    return ablated, randoms


@torch.no_grad()
def top_correct(model: Model, grid: OperandGrid, prompt_ids: Sequence[int], sets: Sequence[Mapping[int, Sequence[int]]],
                values: AblationValues, *, rows_per_batch: int = 256) -> torch.Tensor:
    """``[set, prompt]``: whether the model's top token at END is the answer's with each set's neurons ablated (by
    ``values``) at every position, every set over every prompt of ``prompt_ids``, through the ablation executor."""
    prompts = [grid.prompts[i] for i in prompt_ids]
    masks = AblationMasks.of_sets(model, [((), ())] * len(sets), [dict(s) for s in sets])
    resid = run_ablation(model, prompts, AblationSpec(values, masks), rows_per_batch=rows_per_batch).resid
    answers = torch.tensor([p.answer_token_id for p in prompts])
    out = torch.empty(len(sets), len(prompts), dtype=torch.bool)
    for s in range(len(sets)):
        out[s] = unembed_end(model, resid[s]).argmax(-1).cpu() == answers
    return out


def prompt_knockout(model: Model, grid: OperandGrid, neurons: Sequence[Neuron], classes: Sequence[Mapping[str, Any]],
                    *, limits: Sequence[int], effects: torch.Tensor | None = None, sign: int = 1, n_random: int = 5,
                    seed: int = 0, ablation: str = "zero", control: str = "top", prompts: str = "correct",
                    means: AblationValues | None = None, rows_per_batch: int = 256,
                    progress: bool = False) -> dict[str, Any]:
    """The per-prompt knockout (module docstring): per limit, per kept prompt, its knocked-out neurons, the random
    draws, whether the answer survives each. ``clean_correct``: every grid prompt's clean top-1 read; ``kept``: the
    grid prompts read (the correct ones, or all)."""
    if not limits or any(int(k) < 1 for k in limits):
        raise ValueError(f"limits must be counts of at least 1, got {list(limits)}")
    if n_random < 1:
        raise ValueError(f"n_random must be at least 1, got {n_random}")
    if ablation not in ABLATIONS:
        raise ValueError(f"Unknown ablation {ablation!r}; accepted: {', '.join(ABLATIONS)}")
    if prompts not in PROMPTS:
        raise ValueError(f"Unknown prompts {prompts!r}; accepted: {', '.join(PROMPTS)}")
    layers = sorted({n.layer for n in neurons})
    if ablation == "zero":
        values = zero_values(model, layers)
    else:
        from circuits.explain.heuristics.causal_check import grid_means

        values = means if means is not None else grid_means(model, grid, layers)
    everyone = list(range(len(grid.prompts)))
    clean = top_correct(model, grid, everyone, [{}], values, rows_per_batch=rows_per_batch)[0]
    kept = [i for i in everyone if prompts == "all" or bool(clean[i])]
    assoc = associated_neurons(grid, neurons, classes, effects, sign)
    pools = control_pools(neurons, model.cfg.d_mlp, control)
    rng = random.Random(seed)
    by_limit: dict[str, dict[str, list]] = {str(k): {"ablated": [], "random": [], "correct": [], "random_correct": []}
                                            for k in limits}
    for p in tqdm(kept, desc="prompt knockout", unit="prompt", disable=not progress):
        sets: list[NeuronSet] = []
        for k in limits:
            ablated, randoms = prompt_sets(assoc[p], pools, int(k), n_random, rng)
            by_limit[str(k)]["ablated"].append({str(l): v for l, v in ablated.items()})
            by_limit[str(k)]["random"].append([{str(l): v for l, v in r.items()} for r in randoms])
            sets += [ablated, *randoms]
        correct = top_correct(model, grid, [p], sets, values, rows_per_batch=rows_per_batch)[:, 0]
        for j, k in enumerate(limits):
            at = j * (1 + n_random)
            by_limit[str(k)]["correct"].append(bool(correct[at]))
            by_limit[str(k)]["random_correct"].append(float(correct[at + 1 : at + 1 + n_random].float().mean()))
    return {"metric": METRIC, "ablation": ablation, "control": control, "prompts": prompts, "n_random": n_random,
            "limits": [int(k) for k in limits], "clean_correct": [bool(x) for x in clean], "kept": kept,
            "associated": [{str(l): v for l, v in assoc[p].items()} for p in kept], "by_limit": by_limit}


def prompt_knockout_table(pk: Mapping[str, Any], n_boot: int = 1000, seed: int = 0,
                          alpha: float = 0.05) -> dict[str, dict[str, Any]]:
    """Per limit: the prompts read, the mean neurons knocked out per prompt (and how many prompts had none), the
    accuracy before, after the associated neurons and after the random ones (the draws' mean per prompt), each with
    its 95% percentile bootstrap interval over prompts, and the paired difference associated minus random (the same
    resamples): its 95% interval, its two-sided bootstrap ``p``, and Holm over the limits (``holm_apart``, the
    interval at the corrected level ``holm_level``)."""
    from circuits.patching.core.uncertainty import bootstrap_p, holm, percentile_interval, resample_pairs

    def ci(x: torch.Tensor, idx: torch.Tensor, level: float = 0.95) -> dict[str, float]:
        low, high = percentile_interval(x[idx].mean(1), level)
        return {"mean": float(x.mean()), "low": float(low), "high": float(high)}

    kept = pk.get("kept", [])
    n = len(kept)
    nan = {"mean": float("nan"), "low": float("nan"), "high": float("nan")}
    before = torch.tensor([float(pk["clean_correct"][i]) for i in kept], dtype=torch.float64)
    idx = resample_pairs(n, n_boot, seed) if n else None
    out, p_values, draws = {}, [], {}
    for k, v in pk.get("by_limit", {}).items():
        assoc = torch.tensor([float(x) for x in v["correct"]], dtype=torch.float64)
        rnd = torch.tensor(v["random_correct"], dtype=torch.float64)
        sizes = [sum(len(x) for x in s.values()) for s in v["ablated"]]
        row: dict[str, Any] = {"n_prompts": n, "mean_ablated": sum(sizes) / n if n else float("nan"),
                               "n_none_ablated": sum(s == 0 for s in sizes)}
        if n:
            d = assoc - rnd
            draws[k] = d[idx].mean(1)
            row.update(before=ci(before, idx), associated=ci(assoc, idx), random=ci(rnd, idx),
                       difference={**ci(d, idx), "p": bootstrap_p(draws[k])})
        else:
            row.update(before=nan, associated=nan, random=nan, difference={**nan, "p": float("nan")})
        out[k] = row
        p_values.append(row["difference"]["p"])
    apart, levels = holm(p_values, alpha)
    for (k, row), a, level in zip(out.items(), apart, levels):
        row["difference"]["holm_apart"] = a
        row["difference"]["holm_level"] = level
        if k in draws:
            low, high = percentile_interval(draws[k], level)
            row["difference"].update(holm_low=float(low), holm_high=float(high))
        else:
            row["difference"].update(holm_low=float("nan"), holm_high=float("nan"))
    return out


__all__ = ["associated_neurons", "control_pools", "prompt_knockout", "prompt_knockout_table", "prompt_sets",
           "top_correct"]
