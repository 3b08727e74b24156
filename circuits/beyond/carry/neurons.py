"""Measurement (2) of the carry study (issue 42): do the neurons of the key MLPs at END fit threshold rules on
``a + b`` (the carry: ``a + b >= 10`` is one), and those at END + 1 residue rules ``(a + b) mod 10`` (the units
digit)?

Per answer position: the key MLPs there (the top ``neuron_mlps`` by the absolute mean effect the study measured at
that position), each one's top ``neurons_per_mlp`` neurons by their exact effect on the study's pairs read there
(:func:`~circuits.patching.engines.neuron_sweep.sweep_neurons`, ranked as ``circuits heuristics`` ranks them), and as
many random neurons of the same MLPs outside that top set (the null: :func:`~circuits.explain.heuristics.nulls.null_neurons`).
Every neuron's ``hook_post`` is read over the whole 10 x 10 grid of ``a + b = `` and classified by the heuristic
classifier of ``circuits heuristics`` (:func:`~circuits.explain.heuristics.rules.classify`, at its defaults), its
primary rule then named by :func:`rule_family`.

At END + 1 every cell is read one token after its answer's first token, teacher-forced (the grid's prompts with that
token appended): for a two-digit sum the position that writes its units digit, for a one-digit sum the position after
its whole answer. Both positions are so read over the same 100 cells, with the same candidate rules and the same
chance. That view has a confound at END + 1: the one-digit cells are read after a finished answer, the two-digit ones
while the units digit is written, so a neuron that only tells those two situations apart fits the threshold
``a + b in [10, 18]`` (the random neurons' share there measures how often). END + 1 is therefore also classified on
the 45 two-digit cells alone (``two_digit``), the same activations: there ``(a + b) mod 10 == r`` holds exactly where
``a + b == 10 + r``, so a residue rule is an identity of the sum (:func:`rule_family`'s ``identity_is_residue``), and
the units digit is not told apart from the sum itself (single-digit operands cannot do that).

The shares (a binomial count: the neurons are the units) have 95% Wilson intervals; each top group's share against
its random group's, and END's against END + 1's, has Fisher's exact p (:func:`~circuits.explain.heuristics.nulls.fisher_p`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import torch
from torch import Tensor

from circuits.data.answers import at_answer_position
from circuits.data.grid import OperandGrid
from circuits.data.pairs import PromptPair
from circuits.explain.heuristics.activations import grid_activations
from circuits.explain.heuristics.nulls import fisher_p, null_neurons, rate
from circuits.explain.heuristics.rules import NeuronClasses, classify
from circuits.models.backend import Model
from circuits.patching.core.metrics import get_metric
from circuits.patching.core.ranking import order
from circuits.patching.engines.neuron_sweep import sweep_neurons
from circuits.types import MIB_METRIC, Neuron

THRESHOLD = "threshold"  # the primary rule is a range of a + b: a + b in [lo, hi]
RESIDUE = "residue"  # the primary rule is (a + b) mod 10 == r
FAMILIES = (THRESHOLD, RESIDUE)
GROUPS = ("top", "random")
METRIC = MIB_METRIC  # the study's metric, the logit difference: its component effects and its circuits' curves


def rule_family(classes: NeuronClasses, identity_is_residue: bool = False) -> str:
    """``"threshold"``, ``"residue"``, ``"other"`` (another rule passed) or ``"none"``: the family of a neuron's
    primary (best passing) rule. ``identity_is_residue``: on cells whose sums all lie in 10..18 ``(a + b) mod 10 == r``
    holds exactly where ``a + b == 10 + r``, and the classifier names that cell set by the simpler rule (an identity):
    count it as a residue."""
    p = classes.primary
    if p is None:
        return "none"
    rule = p[0]
    if rule.on == "c" and rule.kind == "range":
        return THRESHOLD
    if rule.on == "c" and ((rule.kind == "modulo" and rule.args[0] == 10) or
                           (identity_is_residue and rule.kind == "identity")):
        return RESIDUE
    return "other"


def forced_grid(grid: Sequence[PromptPair], k: int) -> OperandGrid:
    """The carry grid as an :class:`~circuits.data.grid.OperandGrid` read at END + ``k`` (``k`` in 0, 1): each
    prompt followed by its answer's first ``k`` tokens (module docstring: a one-digit sum's whole answer at k = 1)."""
    if k not in (0, 1):
        raise ValueError(f"answer position {k}: the carry study reads END (0) and END + 1 (1)")
    prompts = []
    for p in grid:
        forced = tuple(p.answer_ids[:k])
        ids = tuple(p.reference_token_ids) + forced
        prompts.append(replace(p, reference_token_ids=ids, counterfactual_token_ids=ids))
    values = tuple(sorted({p.operands[0] for p in grid} | {p.operands[1] for p in grid}))
    return OperandGrid("addition", values, prompts)


def classify_grid(acts: Tensor, grid: OperandGrid) -> list[NeuronClasses]:
    """Each neuron's classes from its activation ``acts[neuron, prompt]`` over ``grid`` (one prompt a cell)."""
    return classify(acts, grid.a, grid.b, grid.result)


def family_shares(families: dict[str, list[str]]) -> dict[str, Any]:
    """Per family (:data:`FAMILIES`), each group's share with its Wilson interval, and the top group's against the
    random one's (Fisher's exact p)."""
    out: dict[str, Any] = {}
    for fam in FAMILIES:
        out[fam] = {g: rate(sum(f == fam for f in families[g]), len(families[g])) for g in GROUPS if families.get(g)}
        t, r = out[fam].get("top"), out[fam].get("random")
        out[fam]["p_top_vs_random"] = (fisher_p(t["n_classified"], t["n"], r["n_classified"], r["n"])
                                       if t and r and t["n"] and r["n"] else None)
    out["classified"] = {g: rate(sum(f != "none" for f in families[g]), len(families[g])) for g in GROUPS
                         if families.get(g)}
    return out


def key_mlps(effects: Tensor, n_layers: int, n_heads: int, k: int) -> list[int]:
    """The ``k`` MLP layers with the largest absolute mean effect in ``effects[component, pair]`` (heads first,
    then MLPs), in that order."""
    mean = effects[n_layers * n_heads:].mean(1).abs()
    return [int(i) for i in order(mean, 1)[:k].tolist()]


def neuron_rules(model: Model, pairs: list[PromptPair], grid: list[PromptPair], effects: Tensor, *, mode: str,
                 neuron_mlps: int, neurons_per_mlp: int, null_neurons_per_mlp: int, seed: int,
                 memory_mb: float = 1024, progress: bool = False) -> tuple[dict[str, Any], dict[str, Tensor]]:
    """Measurement (2) at END and END + 1 (module docstring) from the study's ``effects[position, component, pair]``.
    Returns the summary (per position its MLPs, each group's neurons with their rule and family, the shares) and the
    activations ``{position: [neuron, cell]}`` (the top neurons, then the random ones)."""
    from circuits.beyond.carry.result import POSITIONS

    L, H = model.cfg.n_layers, model.cfg.n_heads
    m = get_metric(METRIC)
    summary: dict[str, Any] = {"mlps_per_position": neuron_mlps, "neurons_per_mlp": neurons_per_mlp,
                               "null_neurons_per_mlp": null_neurons_per_mlp, "metric": m.name, "n_cells": len(grid)}
    acts_out: dict[str, Tensor] = {}
    families: dict[str, dict[str, list[str]]] = {}
    for k, at in enumerate(POSITIONS):
        layers = key_mlps(effects[k], L, H, neuron_mlps)
        sweep = sweep_neurons(model, at_answer_position(pairs, k, model.tokenizer), mode, layers=layers,  # type: ignore[arg-type]
                              memory_mb=memory_mb, prob=False, progress=progress)
        by_layer = sweep.scores(m).by_layer()
        top: list[Neuron] = []
        for l in layers:  # as circuits heuristics ranks them: the metric's important direction, NaN never
            e = by_layer[l]
            top += [Neuron(l, int(i)) for i in order(e, m.sign).tolist() if not torch.isnan(e[int(i)])][:neurons_per_mlp]
        drawn = null_neurons(by_layer, layers, top, null_neurons_per_mlp, seed)["random"]
        g = forced_grid(grid, k)
        everyone = top + drawn
        acts = grid_activations(model, g, everyone, progress=progress)
        fitted = classify_grid(acts, g)
        fams = [rule_family(f) for f in fitted]
        families[at] = {"top": fams[: len(top)], "random": fams[len(top):]}

        def entry(n: Neuron, f: NeuronClasses, fam: str) -> dict[str, Any]:
            p = f.primary
            return {"neuron": [n.layer, n.index], "effect": float(by_layer[n.layer][n.index]), "family": fam,
                    "rule": p[0].text("addition") if p else "", "score": float(p[1]) if p else None}

        summary[at] = {"mlps": layers,
                       "top": [entry(n, f, fam) for n, f, fam in zip(top, fitted, fams)],
                       "random": [entry(n, f, fam) for n, f, fam in zip(drawn, fitted[len(top):], fams[len(top):])],
                       "shares": family_shares(families[at])}
        if k == 1:  # the two-digit cells alone (module docstring), the same activations
            two = torch.tensor([len(p.answer_ids) > 1 for p in grid])
            if int(two.sum()):
                fitted2 = classify(acts[:, two], g.a[two], g.b[two], g.result[two])
                fams2 = [rule_family(f, identity_is_residue=True) for f in fitted2]
                for e, f, fam in zip(summary[at]["top"] + summary[at]["random"], fitted2, fams2):
                    p2 = f.primary
                    e["two_digit"] = {"family": fam, "rule": p2[0].text("addition") if p2 else "",
                                      "score": float(p2[1]) if p2 else None}
                summary[at]["two_digit"] = {"n_cells": int(two.sum()), "shares": family_shares(
                    {"top": fams2[: len(top)], "random": fams2[len(top):]})}
        acts_out[at] = acts
    # Across positions: the top neurons' threshold share at END against END + 1's, the residue share the reverse.
    summary["across"] = {}
    for fam in FAMILIES:
        e, n = summary["end"]["shares"][fam].get("top"), summary["next"]["shares"][fam].get("top")
        both = bool(e and n)
        summary["across"][fam] = {"end_minus_next": e["rate"] - n["rate"] if both else None,  # type: ignore[index]
                                  "p": fisher_p(e["n_classified"], e["n"], n["n_classified"], n["n"])  # type: ignore[index]
                                  if both else None}
    return summary, acts_out
