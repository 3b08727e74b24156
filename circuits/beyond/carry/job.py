"""The carry study as a job: ``circuits carry`` (issue 42).

The data: every ``a + b = `` with ``a, b`` in 0..9 after the config's solved examples (the 10 x 10 grid); the 45 sums
of 10 or more have two answer tokens, the carry "1" at END and the units digit at END + 1. The pairs of measurement
(1) are those sums against ``a + c = `` with ``c`` drawn so that ``a + c <= 9`` (a one-digit sum: the counterfactual
changes whether there is a carry, and the units digit), read at END and, teacher-forced with the reference's "1", at
END + 1 (:func:`circuits.data.answers.at_answer_position`)."""

from __future__ import annotations

import argparse
import random
import time
from pathlib import Path

import torch

from circuits.beyond.carry.config import CarryConfig
from circuits.beyond.carry.measures import (carry_directions, end_residuals, flat_components, flip_tops,
                                            fourier_contrast, overlap, random_directions, rate)
from circuits.beyond.carry.neurons import METRIC, neuron_rules
from circuits.beyond.carry.result import POSITIONS, CarryResult
from circuits.config import check_model_ranges
from circuits.data.answers import at_answer_position
from circuits.data.pairs import PromptPair, make_pair
from circuits.identify.validity import check_job, print_warnings
from circuits.models.backend import Model
from circuits.models.loading import load_model
from circuits.patching.circuit_curves import circuit_curve, cmd_margin
from circuits.patching.core.uncertainty import wilson_interval
from circuits.patching.engines.end_sweep import sweep
from circuits.types import MIB_COUNT, Component

MIN_PAIRS = 4  # two per half: fewer leave a half without a pair to rank or score on


def grid_prompts(tokenizer, prefix: str) -> list[PromptPair]:
    """The 100 questions ``a + b = `` (a, b in 0..9, row-major), each its own counterfactual (only read)."""
    return [make_pair(tokenizer, f"{prefix}{a} + {b} = ", f"{prefix}{a} + {b} = ", str(a + b), allow_identical=True,
                      operation="addition", operands=(a, b, a + b), template_id="carry")
            for a in range(10) for b in range(10)]


@torch.no_grad()
def answered(model: Model, prompts: list[PromptPair]) -> tuple[torch.Tensor, torch.Tensor]:
    """For each prompt, the model's top token at END and at END + 1 with the answer's first token teacher-forced
    (-1 where the answer has one token), from one forward pass per prompt batch."""
    rows = [list(p.reference_token_ids) + list(p.answer_ids[:1]) for p in prompts]
    width = max(map(len, rows))
    tokens = torch.tensor([r + [0] * (width - len(r)) for r in rows])
    ends = torch.tensor([len(p.reference_token_ids) - 1 for p in prompts])
    first, second = [], []
    for s in range(0, len(rows), 50):
        logits = model(tokens[s: s + 50].to(model.cfg.device))
        r, e = torch.arange(len(logits)), ends[s: s + 50].to(logits.device)
        first.append(logits[r, e].argmax(-1).cpu())
        second.append(logits[r, e + 1].argmax(-1).cpu())
    two = torch.tensor([len(p.answer_ids) > 1 for p in prompts])
    return torch.cat(first), torch.where(two, torch.cat(second), torch.full_like(two, -1, dtype=torch.long))


def carry_pairs(tokenizer, grid: list[PromptPair], keep: torch.Tensor, prefix: str, seed: int) -> list[PromptPair]:
    """The two-token sums of ``grid`` that ``keep`` marks, each against ``a + c = `` with ``c`` in 0..9-a drawn from
    ``seed`` (one per sum, in grid order)."""
    rng = random.Random(seed)
    out = []
    for p, k in zip(grid, keep.tolist()):
        a, b, s = p.operands
        if s < 10:
            continue
        c = rng.randint(0, 9 - a)
        if k:
            out.append(make_pair(tokenizer, p.reference, f"{prefix}{a} + {c} = ", str(s), operation="addition",
                                 operands=(a, b, s), template_id="carry"))
    return out


def _halves(n: int, seed: int) -> tuple[list[int], list[int]]:
    perm = torch.randperm(n, generator=torch.Generator().manual_seed(seed)).tolist()
    return sorted(perm[: n // 2]), sorted(perm[n // 2:])


def circuits_across(model: Model, pairs: list[PromptPair], effects: torch.Tensor, config: CarryConfig
                    ) -> tuple[dict, dict]:
    """Measurement (1b): each position's ranking (absolute mean effect on the first half of the pairs) scored at
    both positions on the second half (MIB's curve, counterfactual ablation at END), and a random ranking's at both;
    ``margins[at]``: the other position's circuit's CMD minus the own one's, and the random one's minus the own,
    each with a paired bootstrap interval over the scoring pairs."""
    L, H = model.cfg.n_layers, model.cfg.n_heads
    rank, score = _halves(len(pairs), config.seed)
    scored = {name: at_answer_position([pairs[i] for i in score], k, model.tokenizer)
              for k, name in enumerate(POSITIONS)}
    g = torch.Generator().manual_seed(config.seed + 2)
    rankings = {name: effects[k][:, rank].mean(1).abs() for k, name in enumerate(POSITIONS)}
    rankings["random"] = torch.rand(L * H + L, generator=g)
    curves = {}
    for by, r in rankings.items():
        for at in POSITIONS:
            curves[f"{by}@{at}"] = circuit_curve(model, scored[at], heads=r[: L * H].reshape(L, H), mlps=r[L * H:],
                                                 metric=METRIC, n_boot=config.n_boot, seed=config.seed,
                                                 memory_mb=config.memory_mb, count=MIB_COUNT)
    margins = {}
    for at in POSITIONS:
        other = next(p for p in POSITIONS if p != at)
        own = curves[f"{at}@{at}"]
        margins[at] = {}
        for against in (other, "random"):
            d, lo, hi = cmd_margin(own, curves[f"{against}@{at}"], n_boot=config.n_boot, seed=config.seed)
            margins[at][against] = {"difference": d, "low": lo, "high": hi}
    return curves, {"rank_pairs": rank, "score_pairs": score, "margins": margins}


def carry_direction(model: Model, grid: list[PromptPair], config: CarryConfig
                    ) -> tuple[dict, torch.Tensor]:
    """Measurement (4): the carry direction fitted on half the grid (sums of 1 left out: their first token is "1"
    with no carry), its layer the one where it separates the classes best there, and its flips on the other half
    against ``n_random`` random directions of its norm. Returns the summary and the separation per layer (fit
    half, held-out half)."""
    one = next(p.answer_ids[0] for p in grid if p.operands[2] == 10)
    cells = [i for i, p in enumerate(grid) if p.operands[2] != 1]
    fit_at, test_at = _halves(len(cells), config.seed + 3)
    fit, test = [cells[i] for i in fit_at], [cells[i] for i in test_at]
    carry = torch.tensor([p.operands[2] >= 10 for p in grid])
    width = max(len(p.reference_token_ids) for p in grid)
    tokens = torch.tensor([list(p.reference_token_ids) + [0] * (width - len(p.reference_token_ids)) for p in grid])
    ends = torch.tensor([p.end for p in grid])
    resid, tops = end_residuals(model, tokens, ends)
    dirs, sep = carry_directions(resid[:, fit], carry[fit])
    _, sep_test = carry_directions(resid[:, test], carry[test])
    layer = int(sep.argmax()) if config.direction_layer < 0 else config.direction_layer
    d = dirs[layer]
    # Eligible: the model's own first token already on its class's side ("1" for a carry, another token otherwise),
    # and right where the study keeps only answered sums.
    right = torch.tensor([int(t) == p.answer_ids[0] for t, p in zip(tops.tolist(), grid)])
    side = (tops == one) == carry
    eligible = [i for i in test if bool(side[i]) and (bool(right[i]) or not config.filter_correct)]
    signs = torch.tensor([-1.0 if bool(carry[i]) else 1.0 for i in eligible])
    randoms = random_directions(config.n_random, d.numel(), float(d.norm()), config.seed + 4)
    if eligible:
        patched = flip_tops(model, tokens[eligible], ends[eligible], layer, torch.cat([d[None], randoms]), signs)
        flipped = (patched == one) != carry[eligible][None]  # [direction, prompt]: now on the other class's side
    else:
        flipped = torch.zeros(1 + config.n_random, 0, dtype=torch.bool)
    c = carry[eligible] if eligible else torch.zeros(0, dtype=torch.bool)

    def share(row: torch.Tensor) -> dict:
        n, r = int(row.numel()), rate(row)
        lo, hi = wilson_interval(r, n) if r is not None else (None, None)
        return {"rate": r, "n": n, "low": lo, "high": hi}

    null = [rate(f) for f in flipped[1:]]
    obs = rate(flipped[0])
    above = sum(1 for v in null if v is not None and obs is not None and v >= obs)
    summary = {"layer": layer, "chosen": "best separation on the fit half" if config.direction_layer < 0 else
               "--direction-layer", "norm": float(d.norm()), "fit_cells": fit, "test_cells": test,
               "separation_fit": float(sep[layer]), "separation_test": float(sep_test[layer]),
               "eligible": eligible, "flip": share(flipped[0]), "flip_add": share(flipped[0][~c]),
               "flip_subtract": share(flipped[0][c]),
               "random": {"n": config.n_random, "rates": null,
                          # each side apart: a random direction of a large norm can knock "1" out without adding it
                          "add_rates": [rate(f[~c]) for f in flipped[1:]],
                          "subtract_rates": [rate(f[c]) for f in flipped[1:]],
                          "mean": rate(flipped[1:].flatten()) if flipped[1:].numel() else None,
                          "max": max((v for v in null if v is not None), default=None)},
               "p_random": (1 + above) / (1 + config.n_random) if obs is not None else None}
    return summary, torch.stack([sep, sep_test])


def components_of(model: Model, flat: list[int]) -> list[Component]:
    """The components of flat indices (:func:`~circuits.beyond.carry.measures.component_names`' order)."""
    L, H = model.cfg.n_layers, model.cfg.n_heads
    return [Component("head", i // H, i % H) if i < L * H else Component.mlp(i - L * H) for i in flat]


def fourier_view(model: Model, pairs: list[PromptPair], top: dict, config: CarryConfig) -> dict:
    """Measurement (3): each position's top components (``top["top_end"]``, ``top["top_next"]``) read through the
    Fourier view (:func:`circuits.explain.fourier.number_spectra`: direct effects on the digits 0..9) on the pairs
    read at that position, and :func:`~circuits.beyond.carry.measures.fourier_contrast`. A model whose sublayer
    outputs are normalised (Gemma 2/3) has no direct effect: ``{"refused": why}``."""
    from circuits.explain.fourier import number_spectra

    effects = []
    try:
        for k, key in enumerate(("top_end", "top_next")):
            forced = at_answer_position(pairs, k, model.tokenizer)
            effects.append(number_spectra(model, forced, components_of(model, top[key]), numbers=10).effects)
    except ValueError as err:
        return {"refused": str(err)}
    return fourier_contrast(effects[0], effects[1], n_boot=config.n_boot, seed=config.seed)


def carry_study(model: Model, config: CarryConfig, *, progress: bool = False, refuse: bool = True) -> CarryResult:
    """Every measurement of :class:`CarryConfig` on ``model`` (no file written). The pairs' validity checks at END
    come first (:func:`~circuits.identify.validity.check_job`; the accuracy before filtering: both tokens of the
    two-digit sums): a :class:`ValidityWarning` past a threshold, refused past a hard one, as the job refuses, unless
    ``config.force`` (``--force``; ``refuse=False``: warn only)."""
    start = time.perf_counter()
    tok = model.tokenizer
    grid = grid_prompts(tok, config.prefix)
    first, second = answered(model, grid)
    right0 = torch.tensor([int(t) == p.answer_ids[0] for t, p in zip(first.tolist(), grid)])
    two = torch.tensor([len(p.answer_ids) > 1 for p in grid])
    right1 = right0 & torch.tensor([len(p.answer_ids) > 1 and int(t) == p.answer_ids[1]
                                    for t, p in zip(second.tolist(), grid)])
    keep = right1 if config.filter_correct else two
    pairs = carry_pairs(tok, grid, keep, config.prefix, config.seed)
    if len(pairs) < MIN_PAIRS:
        raise ValueError(f"{len(pairs)} of the {int(two.sum())} two-digit sums are answered (both tokens); the study "
                         f"needs at least {MIN_PAIRS}. Try another --prefix, or --no-filter-correct")
    validity = check_job(model, pairs, {"accuracy": float(right1[two].float().mean())}, config, "carry", refuse)
    per = []
    for k in range(len(POSITIONS)):
        s = sweep(model, at_answer_position(pairs, k, tok), config.mode, prob=False, progress=progress,
                  memory_mb=config.memory_mb)
        per.append(flat_components(*s.scores(METRIC).per_pair.values()))
    effects = torch.stack(per)  # [position, component, pair]
    over = overlap(effects[0], effects[1], config.top_k, n_boot=config.n_boot, n_splits=config.n_splits,
                   seed=config.seed)
    fourier = fourier_view(model, pairs, over, config)
    curves, across = circuits_across(model, pairs, effects, config)
    direction, separation = carry_direction(model, grid, config)
    neurons, grid_acts = ({}, {}) if not config.neuron_mlps else neuron_rules(
        model, pairs, grid, effects, mode=config.mode, neuron_mlps=config.neuron_mlps,
        neurons_per_mlp=config.neurons_per_mlp, null_neurons_per_mlp=config.null_neurons, seed=config.seed,
        memory_mb=config.memory_mb, progress=progress)
    accuracy = {"first_token": float(right0.float().mean()), "n_prompts": len(grid), "two_token_sums": int(two.sum()),
                "both_tokens": float(right1[two].float().mean()), "n_pairs": len(pairs)}
    return CarryResult(config, pairs, effects, over, curves, across, direction, separation, accuracy, fourier,
                       time.perf_counter() - start, neurons, grid_acts, _validity=validity)


def run(config: CarryConfig, out: str | Path, *, model: Model | None = None, progress: bool = True) -> CarryResult:
    """The ``circuits carry`` job."""
    model = model or load_model(config.model, dtype=config.dtype)
    check_model_ranges(config, model.cfg.n_layers, model.cfg.n_heads)  # --direction-layer past the model, before work
    result = carry_study(model, config, progress=progress, refuse=True)
    result.save(out)
    return result


def printout(args: argparse.Namespace, config: CarryConfig, r: CarryResult, seconds: float) -> None:
    for line in r.lines():
        print(line)
    print(f"{seconds:.0f} s -> {args.out}")
    print_warnings(r.validity(), "[carry]")
