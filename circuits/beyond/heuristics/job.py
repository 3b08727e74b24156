"""Heuristic neurons as a job: ``circuits heuristics`` (Nikankin et al., ICLR 2025, "Arithmetic Without Algorithms").

1. The key MLPs (``--layers``; else those of ``--neurons-from``, of ``--pairs-from``'s identify result, or of an
   identify run made first on the config's pairs) and their top neurons by the exact END effect
   (:func:`~circuits.patching.engines.neuron_sweep.sweep_neurons` on the task's prompt pairs, or the effects a saved
   ``circuits neurons`` result holds).
2. Those neurons' ``hook_post`` at END over the operand grid (:func:`~circuits.data.grid.operand_grid`), averaged
   over the grid's templates per cell, and each neuron's heuristic classes
   (:func:`~circuits.explain.heuristics.rules.classify`) and whether its output promotes the answers its rule covers.
3. The causal check (:func:`~circuits.explain.heuristics.causal_check.class_knockout`): the neurons sharing a rule knocked
   out together, the drop on the prompts the rule covers against the rest, and against random neurons.
4. Nikankin et al.'s per-prompt knockout (:func:`~circuits.explain.heuristics.prompt_knockout.prompt_knockout`): per
   correct grid prompt, the neurons of its associated heuristics knocked out against as many random ones, read on
   accuracy.
"""

from __future__ import annotations

import argparse
import hashlib
import time
from dataclasses import fields
from pathlib import Path
from typing import Any

import torch

from circuits.beyond.heuristics.config import HeuristicsConfig
from circuits.beyond.faithfulness.job import weights_digest
from circuits.beyond.heuristics.result import HeuristicsResult
from circuits.data.answers import at_answer_position
from circuits.data.grid import OperandGrid, grid_at_answer_position, operand_grid
from circuits.data.pairs import PromptPair, use_few_shot
from circuits.data.source import PairSpec
from circuits.explain.heuristics.activations import grid_activations, output_logits, promotion
from circuits.explain.heuristics.causal_check import class_knockout
from circuits.explain.heuristics.nulls import null_neurons
from circuits.explain.heuristics.prompt_knockout import prompt_knockout
from circuits.explain.heuristics.rules import NONE, NeuronClasses, Rule, classify
from circuits.identify.validity import check_job, print_warnings
from circuits.models.backend import Model
from circuits.io import load_torch, save_torch
from circuits.models.loading import load_model
from circuits.patching.engines.neuron_sweep import sweep_neurons
from circuits.patching.core.metrics import get_metric
from circuits.patching.core.ranking import contributions, order
from circuits.results import ResultError, a_kind, load_result
from circuits.types import Neuron


def key_mlps(config: HeuristicsConfig, model: Model, *, progress: bool = True
             ) -> tuple[list[int], list[PromptPair], dict[int, torch.Tensor] | None, str, dict[str, Any] | None]:
    """The MLP layers, the prompt pairs (read at ``config.answer_position``), (from ``--neurons-from``) every
    neuron's effect per layer with its metric (``None`` effects: the caller sweeps them), and the pairs' statistics
    (their accuracy before filtering, for the validity checks; None where unknown)."""
    layers = list(config.layers)
    if config.neurons_from:
        try:
            saved = load_result(config.neurons_from)
        except (ResultError, FileNotFoundError) as err:
            raise ValueError(f"--neurons-from {config.neurons_from}: {err}") from None
        if saved.kind != "neurons":
            raise ValueError(f"--neurons-from {config.neurons_from} holds {a_kind(saved.kind)} result, not a "
                             "`circuits neurons` one")
        if saved.config.model != config.model:
            raise ValueError(f"--neurons-from {config.neurons_from} was made with model {saved.config.model!r}, not "
                             f"{config.model!r}; pass --model {saved.config.model}")
        effects = saved.sweep.scores(saved.metric).by_layer()  # type: ignore[attr-defined]
        layers = layers or sorted(effects)[: config.top_mlps]
        missing = [l for l in layers if l not in effects]
        if missing:
            raise ValueError(f"--neurons-from {config.neurons_from} swept MLPs {sorted(effects)}, not MLP{missing[0]}")
        v = saved.validity()  # type: ignore[attr-defined]
        before = None if v is None or v.accuracy_before_filtering is None else {"accuracy": v.accuracy_before_filtering}
        return layers, list(saved.pairs), effects, saved.metric, before  # type: ignore[attr-defined]
    if config.pairs_from and not layers:
        from circuits.identify.result import load_identify

        made = load_identify(config.pairs_from)
        layers = [c.layer for c in made.scores(None).top(config.top_mlps, "mlps", first=made.key_rule)]
    if layers:
        pairs, stats = config.load_pairs(model)
        return layers, at_answer_position(pairs, config.answer_position, model.tokenizer), None, config.metric, stats
    from circuits.identify.config import IdentifyConfig
    from circuits.identify.job import identify

    # identify reads its pairs at the answer position itself (and hands them back so read)
    # its pairs are checked once, by heuristics (check_job), not here too
    made = identify(model, config=IdentifyConfig(**{f.name: getattr(config, f.name) for f in fields(PairSpec)},
                                                 mode=config.mode, answer_position=config.answer_position),
                    progress=progress, warn=False, refuse=False)
    return [c.layer for c in made.scores(None).top(config.top_mlps, "mlps", first=made.key_rule)], list(made.pairs), None, config.metric, made.pair_stats


def top_of_layers(effects: dict[int, torch.Tensor], layers: list[int], k: int, sign: int) -> list[Neuron]:
    """The ``k`` neurons of each layer with the most important effects (by the metric's sign; NaN never)."""
    out = []
    for l in layers:
        e = effects[l]
        ranked = [int(i) for i in order(e, sign).tolist() if not torch.isnan(e[int(i)])]
        out += [Neuron(l, i) for i in ranked[:k]]
    return out


def cells_of(grid: OperandGrid) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The grid's cells that have a prompt: ``a``, ``b``, the result, and their flat index into ``[a, b]``."""
    mask = grid.mask()
    rows, cols = mask.nonzero(as_tuple=True)
    a = torch.tensor(grid.values)[rows]
    b = torch.tensor(grid.values)[cols]
    res = {(p.operands[0], p.operands[1]): p.operands[2] for p in grid.prompts}
    c = torch.tensor([res[(int(x), int(y))] for x, y in zip(a, b)])
    return a, b, c, rows * len(grid.values) + cols


def grid_classes(grid: OperandGrid, acts: torch.Tensor, config: HeuristicsConfig) -> list[NeuronClasses]:
    """Each neuron's fitted classes over the grid's cells (templates averaged), at the config's thresholds."""
    a, b, c, flat = cells_of(grid)
    n = len(grid.values)
    cell_acts = grid.to_grid(acts.T).reshape(n * n, -1)[flat].T  # [neuron, cell]
    return classify(cell_acts, a, b, c, threshold=config.threshold, min_support=config.min_support, alpha=config.alpha)


def fit_classes(model: Model, grid: OperandGrid, neurons: list[Neuron], acts: torch.Tensor,
                config: HeuristicsConfig) -> list[dict[str, Any]]:
    """Each neuron's classes (over the grid's cells, templates averaged) with its primary rule's promotion."""
    a, b, c, flat = cells_of(grid)
    fitted = grid_classes(grid, acts, config)
    answers = grid.answers_grid().reshape(-1)[flat]
    logits = output_logits(model, neurons, answers)  # [neuron, cell]
    out = []
    for i, f in enumerate(fitted):
        entry: dict[str, Any] = {"classes": f.classes, "promotion": None, "best": {
            k: {"rule": r.to_json(), "text": r.text(config.task), "score": s, "polarity": p,
                "chance": (f.chance or {}).get(k, 1.0)} for k, (r, s, p) in f.best.items()}}
        if f.primary is not None:
            rule, _, pol = f.primary
            covered = rule.holds(a, b, c)[None]
            entry["promotion"] = float(promotion(logits[i : i + 1], covered, torch.tensor([pol]))[0])
        out.append(entry)
    return out


def classify_nulls(model: Model, grid: OperandGrid, drawn: dict[str, list[Neuron]], config: HeuristicsConfig, *,
                   progress: bool = False) -> dict[str, dict[str, Any]]:
    """The same classifier on each null group of :func:`~circuits.explain.heuristics.nulls.null_neurons` (one pass
    over the grid for all of them): per group, its neurons, whether each is classified, and the class counts."""
    everyone = [n for group in drawn.values() for n in group]
    if not everyone:
        return {}
    fitted = grid_classes(grid, grid_activations(model, grid, everyone, progress=progress), config)
    out, at = {}, 0
    for name, group in drawn.items():
        classes = [f.classes for f in fitted[at : at + len(group)]]
        at += len(group)
        counts: dict[str, int] = {}
        for cs in classes:
            for k in cs:
                counts[k] = counts.get(k, 0) + 1
        out[name] = {"neurons": [[n.layer, n.index] for n in group], "classified": [cs[0] != NONE for cs in classes],
                     "class_counts": counts}
    return out


def knockout_classes(grid: OperandGrid, neurons: list[Neuron], classes: list[dict[str, Any]], effects: torch.Tensor,
                     sign: int, k: int, task: str) -> dict[str, tuple[dict[int, list[int]], torch.Tensor]]:
    """The ``k`` rules shared by the most classified neurons (ties: the larger summed effect), each as its neurons
    ``{layer: [index]}`` and the grid prompts it covers."""
    by_rule: dict[tuple, list[int]] = {}
    for i, c in enumerate(classes):
        if c["classes"][0] != NONE:
            by_rule.setdefault(tuple(map(str, c["best"][c["classes"][0]]["rule"])), []).append(i)
    weight = (effects * sign).nan_to_num(0).clamp_min(0)
    chosen = sorted(by_rule.items(), key=lambda kv: (-len(kv[1]), -float(weight[kv[1]].sum())))[:k]
    a = torch.tensor([p.operands[0] for p in grid.prompts])
    b = torch.tensor([p.operands[1] for p in grid.prompts])
    c = torch.tensor([p.operands[2] for p in grid.prompts])
    out = {}
    for _, members in chosen:
        first = classes[members[0]]
        rule = Rule.from_json(first["best"][first["classes"][0]]["rule"])
        sets: dict[int, list[int]] = {}
        for i in members:
            sets.setdefault(neurons[i].layer, []).append(neurons[i].index)
        out[rule.text(task)] = (sets, rule.holds(a, b, c))
    return out


NULL_NAMES = {"top": "top neurons", "random": "random neurons of the same MLPs",
              "low_effect": "their lowest-effect neurons"}
PARTS = "parts"  # the working folder of a run: the neuron sweep and the knockout once finished


def _key(*items: Any) -> str:
    """A digest of what a part was made from (the model's weights, the fields that decide it, its prompts)."""
    return hashlib.sha256(repr(items).encode()).hexdigest()


def _cached(parts: Path | None, name: str, key: str, make: Any) -> Any:
    """``make()``, or the value a previous run kept in ``parts/<name>.pt`` for the same ``key`` (a part cut short by
    a kill, or made from anything else, is made again)."""
    path = parts / f"{name}.pt" if parts is not None else None
    if path is not None and path.is_file():
        try:
            part = load_torch(path, f"heuristics part {name}")
        except ValueError:
            part = None
        if isinstance(part, dict) and part.get("key") == key:
            return part["value"]
    value = make()
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        save_torch({"key": key, "value": value}, path)
    return value


def heuristics(model: Model, config: HeuristicsConfig | None = None, *, progress: bool = True,
               parts: str | Path | None = None, refuse: bool = True, **kwargs: Any) -> HeuristicsResult:
    """Classify the key MLPs' top neurons into heuristics and knock the classes out (``cc.heuristics(model,
    task="addition", layers=(19, 24, 29))``; ``config`` fields may be given as keywords), without saving.
    ``parts``: a folder where the neuron sweep and the knockout are kept once finished, and reused by a later call
    made from the same model weights, fields and prompts. The pairs' validity checks come first
    (:func:`~circuits.identify.validity.check_job`): a :class:`ValidityWarning` past a threshold, refused past a hard
    one, as the job refuses, unless ``force=True`` (``config.force``; ``refuse=False``: warn only)."""
    config = (config.replace(**kwargs) if kwargs else config) if config is not None else HeuristicsConfig(**kwargs)
    parts = Path(parts) if parts is not None else None
    for l in config.layers:
        if not 0 <= l < model.cfg.n_layers:
            raise ValueError(f"MLP layer {l} is outside this model (layers 0..{model.cfg.n_layers - 1})")
    start = time.perf_counter()
    layers, pairs, effects, metric, stats = key_mlps(config, model, progress=progress)
    validity = check_job(model, pairs, stats, config, "heuristics", refuse)  # before the neurons are ranked
    m = get_metric(metric)
    weights = weights_digest(model) if parts is not None else ""
    if effects is None:
        def swept() -> dict[int, torch.Tensor]:
            sweep = sweep_neurons(model, pairs, config.mode, layers=layers, memory_mb=config.memory_mb,  # type: ignore[arg-type]
                                  prob=m.name == "prob", progress=progress)
            return sweep.scores(m).by_layer()

        effects = _cached(parts, "sweep", _key("sweep", weights, config.mode, m.name, layers,
                                               [(p.reference_token_ids, p.counterfactual_token_ids, p.answer_token_id)
                                                for p in pairs]), swept)
    totals = {l: float(contributions(effects[l], m.sign).sum()) for l in layers}
    neurons = top_of_layers(effects, layers, config.neurons_per_mlp, m.sign)
    top_effects = torch.tensor([float(effects[n.layer][n.index]) for n in neurons])
    lo, hi = config.operands
    grid = operand_grid(model.tokenizer, config.task, lo, hi, templates=config.templates,
                        few_shot=use_few_shot(model, config.few_shot), seed=config.seed)
    grid = grid_at_answer_position(grid, int(config.answer_position), model.tokenizer)
    acts = grid_activations(model, grid, neurons, progress=progress)
    classes = fit_classes(model, grid, neurons, acts, config)
    result = HeuristicsResult(config, pairs, grid.prompts, neurons, top_effects, acts, classes, m.name, totals,
                              _validity=validity)
    if config.null_neurons:  # the null of "X% classified": random and lowest-effect neurons of the same MLPs
        result.nulls = classify_nulls(model, grid, null_neurons(effects, layers, neurons, config.null_neurons,
                                                                config.knockout_seed), config, progress=progress)
    chosen = knockout_classes(grid, neurons, classes, top_effects, m.sign, config.knockout_classes, config.task)
    if chosen:
        key = _key("knockout", weights, config.n_random, config.knockout_seed, config.n_boot,
                   [(p.reference_token_ids, p.answer_token_id) for p in grid.prompts],
                   {n: (v[0], v[1].tolist()) for n, v in chosen.items()})
        result.knockout = _cached(parts, "knockout", key, lambda: class_knockout(
            model, grid, chosen, n_random=config.n_random, seed=config.knockout_seed, n_boot=config.n_boot,
            progress=progress))
    if config.prompt_knockout_limits:
        key = _key("prompt_knockout", weights, config.prompt_knockout_limits, config.n_random, config.knockout_seed,
                   config.prompt_knockout_ablation, config.prompt_knockout_control, config.prompt_knockout_prompts,
                   [(p.reference_token_ids, p.answer_token_id, p.operands) for p in grid.prompts],
                   [list(n) for n in neurons], classes, top_effects.tolist())
        result.prompt_knockout = _cached(parts, "prompt_knockout", key, lambda: prompt_knockout(
            model, grid, neurons, classes, limits=config.prompt_knockout_limits, effects=top_effects, sign=m.sign,
            n_random=config.n_random, seed=config.knockout_seed, ablation=config.prompt_knockout_ablation,
            control=config.prompt_knockout_control, prompts=config.prompt_knockout_prompts, progress=progress))
    result.seconds = time.perf_counter() - start
    return result


def run(config: HeuristicsConfig, out: str | Path, *, model: Model | None = None,
        progress: bool = True) -> HeuristicsResult:
    """The ``circuits heuristics`` job; a stopped run resumes from ``<out>/parts`` (the neuron sweep, the knockout)."""
    result = heuristics(model or load_model(config.model, dtype=config.dtype), config, progress=progress,
                        parts=Path(out) / PARTS, refuse=True)
    result.save(out)
    return result


def printout(args: argparse.Namespace, config: HeuristicsConfig, r: HeuristicsResult, seconds: float) -> None:
    s = r.summary()
    print(f"  {s['n_classified']} of {s['n_neurons']} top neurons classified ({', '.join(f'{k} {v}' for k, v in s['class_counts'].items())}); "
          f"they carry {100 * s['share_carried']:.0f}% of the top neurons' effect")
    rates = s.get("classified_rates", {})
    if len(rates) > 1:  # the nulls: the same test on neurons not chosen for their effect
        print("  share classified (95% Wilson interval): " + "; ".join(
            f"{NULL_NAMES.get(g, g)} {v['n_classified']} of {v['n']} ({v['rate']:.0%} [{v['low']:.0%}, {v['high']:.0%}]"
            + (f", Fisher p = {v['p_vs_top']:.2g} against the top neurons)" if "p_vs_top" in v else ")")
            for g, v in rates.items()))
    for name, k in s["knockout"].items():
        cov, unc = k["covered_drop"], k["uncovered_drop"]
        vs = k.get("covered_vs_random")
        holm = (f"; minus random {vs['mean']:+.4f} [{vs['low']:+.4f}, {vs['high']:+.4f}] at {100 * vs['level']:.1f}%, "
                f"Holm over {len(s['knockout'])}: {'apart' if vs['holm_apart'] else 'not apart'}") if vs else ""
        print(f"  knock out '{name}' ({k['n_neurons']} neurons): drop {cov['mean']:+.4f} covered "
              f"[{cov['low']:+.4f}, {cov['high']:+.4f}] vs {unc['mean']:+.4f} uncovered; random "
              f"{k['random_covered_drop']['mean']:+.4f} / {k['random_uncovered_drop']['mean']:+.4f}{holm}")
    pk = s.get("prompt_knockout", {})
    if pk and next(iter(pk.values()))["n_prompts"] == 0:
        print("  per-prompt knockout: no grid prompt to read (the model answers none of the grid; "
              "--prompt-knockout-prompts all reads every one)")
        pk = {}
    if pk:
        k0 = next(iter(pk.values()))
        which = (f"all {k0['n_prompts']} grid prompts" if r.prompt_knockout["prompts"] == "all" else
                 f"the {k0['n_prompts']} grid prompts answered correctly")
        print(f"  per-prompt knockout (Nikankin et al.; {r.prompt_knockout['ablation']} ablation, {which}, accuracy before "
              f"{k0['before']['mean']:.3f}; 95% bootstrap intervals; associated minus random, Holm over {len(pk)}):")
    for limit, k in pk.items():
        a, rnd, d = k["associated"], k["random"], k["difference"]
        print(f"    up to {limit} per MLP ({k['mean_ablated']:.1f} neurons per prompt): accuracy {a['mean']:.3f} "
              f"[{a['low']:.3f}, {a['high']:.3f}] vs random {rnd['mean']:.3f} [{rnd['low']:.3f}, {rnd['high']:.3f}]; "
              f"difference {d['mean']:+.3f} [{d['low']:+.3f}, {d['high']:+.3f}], "
              f"{'apart' if d['holm_apart'] else 'not apart'}")
    print(f"-> {args.out}/figure.html")
    print_warnings(r.validity(), f"[{config.task}]")
