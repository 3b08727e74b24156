"""The saved ``circuits numbers`` result: the Fourier view of the key heads and MLPs, the two-digit accuracy, and the
digit labels of the key MLPs' top neurons."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from circuits.explain.digits import DIGITS, LABELS, digit_labels, digit_scores
from circuits.explain.fourier import NumberSpectra
from circuits.explain.numbers.config import NumbersConfig
from circuits.io import Shapes, load_torch, read_json, save_torch, write_json
from circuits.results import Result, ResultError, number
from circuits.types import Component, Neuron


def _component(c: Any) -> Component:
    kind, layer, head = c
    return Component(kind, int(layer), None if head is None else int(head))


@dataclass(eq=False, repr=False)
class NumbersResult(Result[NumbersConfig]):
    """``spectra``: the key components' direct effects on the number tokens and their spectra; ``problems``,
    ``accuracy[problem]``: the two-digit problems and whether greedy decoding got each right; ``neurons``,
    ``neuron_effects`` (the END effect that ranked them), ``digit_effects[neuron, digit changed, answer digit,
    problem]`` (empty where the accuracy was under the floor; ``note`` says why)."""

    kind = "numbers"

    spectra: NumberSpectra
    problems: list[tuple[int, int]] = field(default_factory=list)
    accuracy: Tensor = field(default_factory=lambda: torch.zeros(0))
    neurons: list[Neuron] = field(default_factory=list)
    neuron_effects: list[float] = field(default_factory=list)
    digit_effects: Tensor = field(default_factory=lambda: torch.zeros(0, 2, 2, 0))
    note: str = ""
    seconds: float = 0.0

    @property
    def task(self) -> str:
        return self.config.task

    def labels(self) -> list[str]:
        return digit_labels(self.digit_effects) if self.neurons else []

    def by_kind(self) -> dict[str, dict[str, float]]:
        """Mean share of the energy at each period over the heads and over the MLPs (Zhou et al.: MLPs low
        frequencies, attention high ones)."""
        shares = self.spectra.shares()
        out = {}
        for kind in ("head", "mlp"):
            rows = [i for i, c in enumerate(self.spectra.components) if c.kind == kind]
            if rows:
                out[kind] = {f"{p:g}": float(v) for p, v in zip(self.spectra.periods, shares[rows].mean(0))}
        return out

    def summary(self) -> dict[str, Any]:
        sp = self.spectra
        shares = sp.shares()
        ramp = sp.ramp_share()
        comps = {str(c): {"shares": {f"{p:g}": float(v) for p, v in zip(sp.periods, shares[i])},
                          "mean_share": float(sp.mean_share()[i]), "ramp_share": float(ramp[i]),
                          "energy": float(sp.energy[i].sum())}
                 for i, c in enumerate(sp.components)}
        ci = {k: {f"{p:g}": [float(lo), float(hi)] for p, lo, hi in zip(sp.periods, low, high)}
              for k, (_, low, high) in sp.kind_share_intervals().items()}
        # the nulls (issue 43): chance and straight-trend shares on this number line, intervals over the components
        comp_ci = {k: {f"{p:g}": [float(lo), float(hi)] for p, lo, hi in zip(sp.periods, low, high)}
                   for k, (_, low, high) in sp.component_share_intervals().items()}
        diff = sp.kind_difference()
        out: dict[str, Any] = {"model": self.config.model, "task": self.config.task, "n_pairs": int(sp.effects.shape[1]),
                               "numbers": sp.numbers, "periods": sp.periods, "components": comps,
                               "dominant_periods": sp.dominant(0.5), "by_kind": self.by_kind(),
                               "by_kind_ci": ci, "by_kind_component_ci": comp_ci,
                               "chance_shares": {f"{p:g}": float(v) for p, v in zip(sp.periods, sp.chance())},
                               "trend_shares": {f"{p:g}": float(v) for p, v in zip(sp.periods, sp.trend())},
                               "n_problems": len(self.problems), "note": self.note, "seconds": self.seconds}
        if diff is not None:
            from circuits.patching.core.uncertainty import holm

            apart, levels = holm(diff[3])
            out["mlp_minus_head"] = {f"{p:g}": {"difference": float(d), "low": float(lo), "high": float(hi), "p": pv,
                                                "holm_apart": a}
                                     for p, d, lo, hi, pv, a in zip(sp.periods, *diff, apart)}
        if len(self.accuracy):
            out["two_digit_accuracy"] = float(self.accuracy.mean())
        if self.neurons:
            units, tens, score = digit_scores(self.digit_effects)
            labels = self.labels()
            out["neurons"] = [{"neuron": str(n), "end_effect": e, "units": float(u), "tens": float(t), "score": float(s),
                               "label": lab} for n, e, u, t, s, lab in zip(self.neurons, self.neuron_effects, units,
                                                                         tens, score, labels)]
            out["label_counts"] = {lab: labels.count(lab) for lab in LABELS}
        return out

    def figure(self):
        from circuits.viz.figures import model_label
        from circuits.viz.number_figures import fourier_figure

        sp = self.spectra
        return fourier_figure(sp.aligned(), sp.shares(), [str(c) for c in sp.components], sp.numbers, sp.periods,
                              f"Key heads and MLPs over the number line 0..{len(sp.numbers) - 1} and their Fourier "
                              f"spectrum<br><sup>{model_label(self.config.model)}, {self.config.task}, "
                              f"{sp.effects.shape[1]} pairs; Zhou et al. 2024</sup>")

    def digit_figure(self):
        """The digit map (None where no neuron was labelled)."""
        if not self.neurons:
            return None
        from circuits.viz.figures import model_label
        from circuits.viz.number_figures import digit_map_figure

        units, tens, _ = digit_scores(self.digit_effects)
        return digit_map_figure(units, tens, [f"L{n.layer} N{n.index}" for n in self.neurons], self.labels(),
                                f"Which neurons move the answer's units and tens digit<br><sup>"
                                f"{model_label(self.config.model)}, {len(self.problems)} two-digit sums, accuracy "
                                f"{float(self.accuracy.mean()):.0%}; Baeumel et al. 2025</sup>")

    def _write(self, folder: Path) -> None:
        from circuits.viz.figures import write_figure

        sp = self.spectra
        write_json(folder / "summary.json", self.summary_json())
        save_torch({"components": [[c.kind, c.layer, c.head] for c in sp.components], "numbers": sp.numbers,
                    "tokens": sp.tokens, "effects": sp.effects, "energy": sp.energy, "answers": sp.answers,
                    "problems": [list(p) for p in self.problems], "accuracy": self.accuracy,
                    "neurons": [list(n) for n in self.neurons], "neuron_effects": self.neuron_effects,
                    "digit_effects": self.digit_effects, "digits": list(DIGITS)}, folder / "numbers.pt")
        write_figure(self.figure(), folder / "figure.html")
        digits = self.digit_figure()
        if digits is not None:
            write_figure(digits, folder / "digits.html")

    @classmethod
    def _read(cls, folder: Path, config: NumbersConfig) -> NumbersResult:
        path = folder / "summary.json"
        s = read_json(path)
        if not isinstance(s, dict) or not isinstance(s.get("note", ""), str):
            raise ResultError(f"{path}: expected a JSON object whose field 'note' is text")
        t = load_torch(folder / "numbers.pt", "numbers result")
        _check_numbers(t, folder / "numbers.pt")
        spectra = NumberSpectra([_component(c) for c in t["components"]], list(t["numbers"]), list(t["tokens"]),
                                t["effects"], t["energy"], list(t["answers"]))
        return cls(config, spectra, [tuple(p) for p in t["problems"]], t["accuracy"], [Neuron(*n) for n in t["neurons"]],
                   list(t["neuron_effects"]), t["digit_effects"], s.get("note", ""), number(s, "seconds", path, 0.0))


def _check_numbers(t: Any, path: Path) -> None:
    """A ``numbers.pt`` fits itself before anything is drawn from it: ``effects [component, pair, number]`` over as
    many components, pairs and numbers as its lists name, ``energy [component, freq]`` with the number line's
    ``n // 2 + 1`` frequencies, ``accuracy [problem]`` in [0, 1], ``digit_effects [neuron, digit, digit, problem]``;
    else one line naming the file and the tensor (a short file failed the whole report)."""
    shapes = Shapes(path)
    if not isinstance(t, dict):
        raise shapes.fail(f"it holds a {type(t).__name__}, not the numbers result's tensors")
    lists = {k: t.get(k) for k in ("components", "numbers", "tokens", "answers", "problems", "neurons",
                                   "neuron_effects")}
    bad = [k for k, v in lists.items() if not isinstance(v, list)]
    if bad:
        raise shapes.fail(f"{bad[0]} is {type(lists[bad[0]]).__name__}, not a list")
    n = len(lists["numbers"])
    known = {"component": (len(lists["components"]), "components"), "number": (n, "numbers"),
             "pair": (len(lists["answers"]), "answers"), "freq": (n // 2 + 1, f"a number line of {n}"),
             "problem": (len(lists["problems"]), "problems"), "neuron": (len(lists["neurons"]), "neurons"),
             "digit": (len(DIGITS), "the digits (units, tens)")}
    shapes.sizes.update(known)
    if len(lists["tokens"]) != n or len(lists["neuron_effects"]) != len(lists["neurons"]):
        raise shapes.fail(f"tokens ({len(lists['tokens'])}) or neuron_effects ({len(lists['neuron_effects'])}) does "
                          f"not match numbers ({n}) or neurons ({len(lists['neurons'])})")
    shapes.tensor("effects", t.get("effects"), ("component", "pair", "number"), no_inf=True)
    shapes.tensor("energy", t.get("energy"), ("component", "freq"), no_inf=True)
    acc = t.get("accuracy")
    if not (isinstance(acc, Tensor) and acc.numel() == 0):  # no two-digit problems asked: an empty accuracy
        shapes.tensor("accuracy", acc, ("problem",), "number", finite=True)
        if acc.numel() and not bool(((acc >= 0) & (acc <= 1)).all()):
            raise shapes.fail(f"accuracy holds {float(acc.min()):g}..{float(acc.max()):g}, outside [0, 1]")
    digits = t.get("digit_effects")
    if isinstance(digits, Tensor) and not lists["neurons"]:  # no neuron labelled (accuracy under the floor): empty
        shapes = Shapes(path, neuron=(0, "neurons"), digit=known["digit"])
    shapes.tensor("digit_effects", digits, ("neuron", "digit", "answer digit", "problem"), no_inf=True)
    if digits.shape[2] != len(DIGITS):
        raise shapes.fail(f"digit_effects has shape {list(digits.shape)}, not {len(DIGITS)} answer digits")
    for k in ("components", "problems", "neurons"):
        if not all(isinstance(x, (list, tuple)) for x in lists[k]):
            raise shapes.fail(f"{k} holds something other than lists")
