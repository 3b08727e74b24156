"""The saved heuristic-neuron analysis: the top neurons of the key MLPs, their activations over the operand grid,
their fitted classes, and the class knockout."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from circuits.beyond.heuristics.config import HeuristicsConfig
from circuits.data.grid import OperandGrid
from circuits.data.pairs import PromptPair, read_pairs, write_pairs
from circuits.data.templates import compute_answer
from circuits.explain.heuristics.rules import NONE, SYMBOLS, Rule
from circuits.identify.validity import CheckedPairs, Validity, validity_from_summary, validity_json
from circuits.io import Shapes, load_torch, read_json, save_torch, write_json
from circuits.patching.core.metrics import get_metric
from circuits.patching.core.ranking import order as rank_order
from circuits.results import Result, ResultError, number
from circuits.types import Neuron


@dataclass(eq=False, repr=False)
class HeuristicsResult(CheckedPairs, Result[HeuristicsConfig]):
    """Top neurons of the key MLPs classified into heuristics over the operand grid, and the class knockout.

    ``classes[i]`` describes ``neurons[i]``: ``classes`` (the passing kinds, or ``["none"]``), ``best`` (kind ->
    ``{rule, text, score, polarity, chance}``) and ``promotion`` (how its output favours the answers its primary rule
    covers, :func:`~circuits.explain.heuristics.activations.promotion`; None for ``none``). ``effects[i]`` is the
    neuron's exact END effect (``metric``); ``activations[i, p]`` its ``hook_post`` at END of grid prompt ``p``.
    ``layer_totals``: each MLP's summed important-direction neuron effect over all its neurons (NaN where only the top
    neurons' effects were known)."""

    kind = "heuristics"
    in_place = True  # its folder is also the run's working folder (parts/: the finished sweep and knockout)
    work = "parts"

    pairs: list[PromptPair]
    grid_prompts: list[PromptPair]
    neurons: list[Neuron]
    effects: torch.Tensor
    activations: torch.Tensor
    classes: list[dict[str, Any]]
    metric: str
    layer_totals: dict[int, float] = field(default_factory=dict)
    knockout: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0
    nulls: dict[str, Any] = field(default_factory=dict)  # group -> neurons, classified flags, class counts (issue 43)
    prompt_knockout: dict[str, Any] = field(default_factory=dict)  # Nikankin's per-prompt knockout's reads (issue 43)

    @property
    def grid(self) -> OperandGrid:
        lo, hi = self.config.operands
        return OperandGrid(self.config.task, tuple(range(lo, hi + 1)), self.grid_prompts)

    def primary(self, i: int) -> tuple[Rule, float, int] | None:
        """Neuron ``i``'s best passing rule, its score and polarity (None: class ``none``)."""
        k = self.classes[i]["classes"][0]
        if k == NONE:
            return None
        b = self.classes[i]["best"][k]
        return Rule.from_json(b["rule"]), b["score"], b["polarity"]

    def classified(self) -> list[int]:
        return [i for i in range(len(self.neurons)) if self.primary(i) is not None]

    def share_carried(self) -> float:
        """The share of the top neurons' summed important-direction effect that the classified neurons carry."""
        c = (self.effects * get_metric(self.metric).sign).nan_to_num(0).clamp_min(0)
        total = float(c.sum())
        return float(c[self.classified()].sum()) / total if total > 0 else float("nan")

    def class_counts(self) -> dict[str, int]:
        """How many neurons each kind holds (a neuron may hold several; ``none`` those with no class)."""
        out: dict[str, int] = {}
        for c in self.classes:
            for k in c["classes"]:
                out[k] = out.get(k, 0) + 1
        return out

    def table_rows(self) -> list[dict[str, Any]]:
        """One row per neuron, largest effect first: its name, effect, classes, primary rule, score and promotion."""
        sign = get_metric(self.metric).sign
        order = [int(i) for i in rank_order(self.effects.float(), sign, keep_nan=True)]
        rows = []
        for i in order:
            p = self.primary(i)
            rows.append({"neuron": str(self.neurons[i]), "effect": float(self.effects[i]),
                         "classes": self.classes[i]["classes"], "rule": p[0].text(self.config.task) if p else "",
                         "score": p[1] if p else max((b["score"] for b in self.classes[i]["best"].values()), default=0.0),
                         "polarity": p[2] if p else 0, "promotion": self.classes[i].get("promotion")})
        return rows

    def classified_rates(self) -> dict[str, dict[str, float]]:
        """The share of the top neurons classified, and of each null group (random and lowest-effect neurons of the
        same MLPs, where measured), each with its 95% Wilson interval; a null group's ``p_vs_top``: Fisher's exact
        two-sided p-value of its share against the top neurons'."""
        from circuits.explain.heuristics.nulls import rate

        from circuits.explain.heuristics.nulls import fisher_p

        out = {"top": rate(len(self.classified()), len(self.neurons))}
        for name, g in self.nulls.items():
            k, n = sum(map(bool, g["classified"])), len(g["classified"])
            out[name] = {**rate(k, n), "p_vs_top": fisher_p(out["top"]["n_classified"], out["top"]["n"], k, n)
                         if n and out["top"]["n"] else float("nan")}
        return out

    def knockout_vs_random(self) -> dict[str, dict[str, Any]]:
        """Per knocked-out class, the covered prompts' drop minus the random neurons', Holm-corrected over the classes
        (:func:`~circuits.explain.heuristics.nulls.knockout_vs_random`)."""
        from circuits.explain.heuristics.nulls import knockout_vs_random

        classes = self.knockout.get("classes", {})
        return knockout_vs_random(classes, self.config.n_boot, self.config.knockout_seed) if classes else {}

    def prompt_knockout_table(self) -> dict[str, dict[str, Any]]:
        """Per limit, the per-prompt knockout's accuracies and the associated-minus-random difference
        (:func:`~circuits.explain.heuristics.prompt_knockout.prompt_knockout_table`)."""
        from circuits.explain.heuristics.prompt_knockout import prompt_knockout_table

        pk = self.prompt_knockout
        return prompt_knockout_table(pk, self.config.n_boot, self.config.knockout_seed) if pk else {}

    def summary(self) -> dict[str, Any]:
        k = self.knockout
        vs = self.knockout_vs_random()
        return {"model": self.config.model, "task": self.config.task, "metric": self.metric,
                "n_pairs": len(self.pairs), "n_grid_prompts": len(self.grid_prompts),
                "layers": sorted({n.layer for n in self.neurons}), "n_neurons": len(self.neurons),
                "n_classified": len(self.classified()), "share_carried": self.share_carried(),
                "class_counts": self.class_counts(),
                "layer_totals": {str(l): v for l, v in self.layer_totals.items()},
                "clean_accuracy": k.get("clean_accuracy"),
                "classified_rates": self.classified_rates(),
                "null_class_counts": {g: v["class_counts"] for g, v in self.nulls.items()},
                "knockout": {n: {**{x: c[x] for x in ("n_neurons", "accuracy", "random_accuracy", "covered_drop",
                                                      "uncovered_drop", "random_covered_drop", "random_uncovered_drop")},
                                 "covered_vs_random": vs[n]}
                             for n, c in k.get("classes", {}).items()},
                "prompt_knockout": self.prompt_knockout_table(),
                "seconds": self.seconds, **validity_json(self._validity)}

    def figure(self, n_neurons: int = 4):
        """The largest-effect classified neurons' grid heat maps beside their rules' patterns."""
        from circuits.viz.heuristics_figures import grid_heatmaps

        grid = self.grid
        cells = grid.to_grid(self.activations.T)  # [a, b, neuron]
        a = torch.tensor(grid.values)[:, None].expand(len(grid.values), len(grid.values))
        b = a.T
        c = torch.tensor([[-1 if (v := compute_answer(self.config.task, x, y)) is None else v  # type: ignore[arg-type]
                           for y in grid.values] for x in grid.values])
        mask = grid.mask()
        rows = [r for r in self.table_rows() if r["rule"]][:n_neurons]
        acts, rules, titles = [], [], []
        for r in rows:
            i = [str(n) for n in self.neurons].index(r["neuron"])
            rule = self.primary(i)[0]  # type: ignore[index]
            acts.append(cells[..., i].numpy())
            rules.append((rule.holds(a, b, c) & mask).float().masked_fill(~mask, float("nan")).numpy())
            where = "highest" if r["polarity"] > 0 else "lowest"
            titles.append(f"{r['neuron']}: {where} where {rule.text(self.config.task)} (match {r['score']:.2f})")
        return grid_heatmaps(acts, rules, titles, grid.values, SYMBOLS.get(self.config.task, "?"))

    def knockout_figure(self):
        from circuits.viz.heuristics_figures import knockout_bars

        return knockout_bars(self.knockout.get("classes", {}), "drop of p(answer)")

    def knockout_figures(self) -> list:
        """The figures of ``knockout.html``: the class knockout's and the per-prompt knockout's, where each ran."""
        return ([self.knockout_figure()] if self.knockout else []) + \
            ([self.prompt_knockout_figure()] if self.prompt_knockout else [])

    def prompt_knockout_figure(self):
        from circuits.viz.heuristics_figures import prompt_knockout_bars

        pk = self.prompt_knockout
        return prompt_knockout_bars(self.prompt_knockout_table(), pk.get("ablation", ""), pk.get("prompts", ""))

    def _write(self, folder: Path) -> None:
        from circuits.viz.figures import write_figure, write_figures

        write_json(folder / "summary.json", self.summary_json())
        write_json(folder / "classes.json", {"neurons": [list(n) for n in self.neurons], "classes": self.classes,
                                             "metric": self.metric, "knockout": self.knockout,
                                             "layer_totals": {str(l): v for l, v in self.layer_totals.items()},
                                             "seconds": self.seconds, "nulls": self.nulls,
                                             "prompt_knockout": self.prompt_knockout})
        write_pairs(folder / "pairs.jsonl", self.pairs)
        write_pairs(folder / "grid.jsonl", self.grid_prompts)
        save_torch({"effects": self.effects, "activations": self.activations}, folder / "heuristics.pt")
        write_figure(self.figure(), folder / "figure.html", validity=self.validity())
        figs = self.knockout_figures()
        if figs:
            write_figures(figs, folder / "knockout.html")

    @classmethod
    def _read(cls, folder: Path, config: HeuristicsConfig) -> HeuristicsResult:
        path = folder / "classes.json"
        d = read_json(path)
        t = load_torch(folder / "heuristics.pt", "heuristic neurons")
        if not isinstance(d, dict):
            raise ResultError(f"{path}: expected a JSON object, found {type(d).__name__}")
        neurons = d.get("neurons")
        if not isinstance(neurons, list) or not all(
                isinstance(n, list) and len(n) == 2 and all(type(x) is int for x in n) for n in neurons):
            raise ResultError(f"{path}: field 'neurons' must be a list of [layer, index] integer pairs")
        totals = d.get("layer_totals", {})
        if not isinstance(totals, dict) or not all(str(k).isdigit() for k in totals):
            raise ResultError(f"{path}: field 'layer_totals' must map layer numbers to numbers")
        _check_numbers(d.get("classes"), path, ("classes",))
        _check_numbers(d.get("knockout", {}), path, ("knockout",))
        nulls = d.get("nulls", {})  # absent from results saved before issue 43
        _check_numbers(nulls, path, ("nulls",))
        pk = d.get("prompt_knockout", {})  # absent from results saved before issue 43's per-prompt knockout
        _check_numbers(pk, path, ("prompt_knockout",))
        if not isinstance(pk, dict) or (pk and not (
                isinstance(pk.get("kept"), list) and isinstance(pk.get("by_limit"), dict)
                and isinstance(pk.get("clean_correct"), list) and len(pk["clean_correct"]) == len(read_pairs(folder / "grid.jsonl"))
                and all(isinstance(v, dict) and all(len(v.get(x, ())) == len(pk["kept"]) for x in
                                                    ("ablated", "random", "correct", "random_correct"))
                        for v in pk["by_limit"].values()))):
            raise ResultError(f"{path}: field 'prompt_knockout' must hold the kept prompts, a clean read per grid "
                              "prompt, and per limit one read per kept prompt")
        if not isinstance(nulls, dict) or not all(
                isinstance(g, dict) and isinstance(g.get("neurons"), list) and isinstance(g.get("classified"), list)
                and len(g["neurons"]) == len(g["classified"]) and isinstance(g.get("class_counts", {}), dict)
                for g in nulls.values()):
            raise ResultError(f"{path}: field 'nulls' must map each group to its neurons, as many classified flags, "
                              "and class counts")
        grid = read_pairs(folder / "grid.jsonl")
        # effects[neuron], activations[neuron, grid prompt]: one per neuron classes.json names, one per grid prompt
        shapes = Shapes(folder / "heuristics.pt", neuron=(len(neurons), "classes.json's neurons"),
                        prompt=(len(grid), "grid.jsonl"))
        if not isinstance(t, dict):
            raise shapes.fail(f"it holds a {type(t).__name__}, not the heuristics' tensors")
        effects = shapes.tensor("effects", t.get("effects"), ("neuron",), no_inf=True)
        activations = shapes.tensor("activations", t.get("activations"), ("neuron", "prompt"), no_inf=True)
        return cls(config, read_pairs(folder / "pairs.jsonl"), grid,
                   [Neuron(*n) for n in neurons], effects, activations, d.get("classes"), d.get("metric"),
                   {int(k): number(totals, k, path) for k in totals}, d.get("knockout", {}),
                   number(d, "seconds", path, 0.0), nulls, pk, _validity=_saved_validity(folder / "summary.json"))


def _saved_validity(path: Path) -> Validity | None:
    """The validity record summary.json keeps (None: a result saved before heuristics checked, or without the file)."""
    if not path.is_file():
        return None
    s = read_json(path)
    return validity_from_summary(s, path) if isinstance(s, dict) else None


def _text_at(where: tuple) -> bool:
    """Where classes.json holds text: a neuron's class names, a rule's text, kind and variable (``rule[0]``,
    ``rule[1]``), a pattern rule's parameters, the knockout's metric."""
    keys = [k for k in where if isinstance(k, str)]
    if where[-1] == "metric" and where[:1] == ("knockout",):
        return True
    if where[:1] == ("prompt_knockout",) and len(where) == 2 and where[1] in ("metric", "ablation", "control", "prompts"):
        return True
    if len(where) >= 3 and where[-2] == "classes" and isinstance(where[-1], int) and where[0] == "classes":
        return True
    if keys and keys[-1] == "text":
        return True
    if "rule" in where:
        i = where.index("rule")
        rest = where[i + 1:]
        return (len(rest) == 1 and rest[0] in (0, 1)) or ("pattern" in keys and len(rest) == 2 and rest[0] == 2)
    return False


def _check_numbers(value: Any, path: Path, where: tuple) -> None:
    """Every leaf of classes.json's ``classes`` and ``knockout`` is a number (or a flag, or None for a promotion)
    except where text belongs (:func:`_text_at`); else one :class:`ResultError` naming the file and the field."""
    if isinstance(value, dict):
        for k, v in value.items():
            _check_numbers(v, path, (*where, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            _check_numbers(v, path, (*where, i))
    elif isinstance(value, str):
        if not _text_at(where):
            raise ResultError(f"{path}: field {'.'.join(map(str, where))} holds text where a number belongs")
    elif value is None:
        if where[-1] != "promotion":
            raise ResultError(f"{path}: field {'.'.join(map(str, where))} is empty where a number belongs")
    elif not isinstance(value, (int, float)):
        raise ResultError(f"{path}: field {'.'.join(map(str, where))} holds {type(value).__name__}")
