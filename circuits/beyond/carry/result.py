"""The saved carry study: every measurement with its null and interval (``summary.json``), the tensors they came from
(``carry.pt``) and the pairs (``pairs.jsonl``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from torch import Tensor

from circuits.identify.validity import CheckedPairs, validity_from_summary, validity_json
from circuits.beyond.carry.config import CarryConfig
from circuits.data.pairs import PromptPair, read_pairs
from circuits.io import Shapes, load_torch, read_json
from circuits.patching.circuit_curves import FaithfulnessCurve
from circuits.results import Result, ResultError, number, write_parts

POSITIONS = ("end", "next")  # END (the first answer token: the carry) and END + 1 (the units digit)
SUMMARY_PARTS = ("overlap", "across", "direction", "accuracy", "fourier")


@dataclass(eq=False, repr=False)
class CarryResult(CheckedPairs, Result[CarryConfig]):
    """The carry study on one model.

    ``effects[position, component, pair]``: each head's and MLP's (:func:`~circuits.beyond.carry.measures.component_names`)
    patched change of the logit difference on each pair, at END and END + 1; ``overlap``: their top-k sets' Jaccard
    with its interval and nulls (:func:`~circuits.beyond.carry.measures.overlap`); ``curves["<ranked at>@<scored
    at>"]``: MIB's faithfulness curve of the ranking made at one position (or ``random``) scored at one, on held-out
    pairs; ``across``: the halves and each scoring position's CMD margins; ``direction``: the carry direction's layer,
    separation and flip rates against random directions; ``separation[fit|test, layer]``; ``accuracy``: what the
    model answers on the grid; ``neurons`` (measurement 2, :func:`~circuits.beyond.carry.neurons.neuron_rules`; empty
    when not measured, as in results saved before it): per position the key MLPs, the classified top and random
    neurons and the shares of threshold and residue rules; ``grid_activations[position]``: their activations
    ``[neuron, cell]`` over the grid (top neurons first)."""

    kind = "carry"

    pairs: list[PromptPair]
    effects: Tensor
    overlap: dict[str, Any]
    curves: dict[str, FaithfulnessCurve]
    across: dict[str, Any]
    direction: dict[str, Any]
    separation: Tensor
    accuracy: dict[str, Any]
    fourier: dict[str, Any]
    seconds: float = 0.0
    neurons: dict[str, Any] = field(default_factory=dict)
    grid_activations: dict[str, Tensor] = field(default_factory=dict)

    def summary(self) -> dict[str, Any]:
        cmd = {k: {"cmd": c.cmd, "low": c.cmd_interval[0], "high": c.cmd_interval[1], "cpr": c.cpr,
                   "n_pairs": c.n_pairs} for k, c in self.curves.items()}
        return {"model": self.config.model, "positions": {"end": "the first answer token (the carry '1') at END",
                                                          "next": "the units digit at END + 1"},
                "accuracy": self.accuracy, "overlap": self.overlap, "across": self.across, "cmd": cmd,
                "direction": self.direction, "fourier": self.fourier, "neurons": self.neurons, "seconds": self.seconds,
                **validity_json(self._validity)}

    def lines(self) -> list[str]:
        """What the command prints: each measurement against its null."""
        o, a, d = self.overlap, self.accuracy, self.direction
        sh = o["split_half"]
        out = [f"{a['n_pairs']} two-digit sums answered (both tokens {a['both_tokens']:.0%} of {a['two_token_sums']}; "
               f"first token {a['first_token']:.0%} of {a['n_prompts']})",
               f"(1) top-{o['k']} of {o['n_components']} at END and END+1: Jaccard {o['jaccard']:.2f} "
               f"[{o['low']:.2f}, {o['high']:.2f}]; random sets {o['null']['mean']:.2f} [{o['null']['low']:.2f}, "
               f"{o['null']['high']:.2f}] (p = {o['p_random']:.3g}); split halves: within a position "
               f"{(sh['within_end'] + sh['within_next']) / 2:.2f}, across {sh['across']:.2f}, gap {sh['gap']:.2f} "
               f"[{sh['gap_low']:.2f}, {sh['gap_high']:.2f}]"]
        for at in POSITIONS:
            own = self.curves[f"{at}@{at}"]
            parts = [f"own {own.cmd:.3f} [{own.cmd_interval[0]:.3f}, {own.cmd_interval[1]:.3f}]"]
            for against, m in self.across["margins"][at].items():
                c = self.curves[f"{against}@{at}"]
                parts.append(f"{against}'s {c.cmd:.3f} (minus own {m['difference']:+.3f} [{m['low']:+.3f}, "
                             f"{m['high']:+.3f}])")
            out.append(f"(1) CMD scored at {at} on {own.n_pairs} held-out pairs: " + ", ".join(parts))
        f, r = d["flip"], d["random"]

        def pct(v: Any) -> str:
            return "n/a" if v is None else f"{v:.0%}"

        out.append(f"(4) carry direction at layer {d['layer']} (separation {d['separation_fit']:.2f} fit, "
                   f"{d['separation_test']:.2f} held out): flips {pct(f['rate'])} [{pct(f['low'])}, {pct(f['high'])}] "
                   f"of {f['n']} held-out prompts (add {pct(d['flip_add']['rate'])}, subtract "
                   f"{pct(d['flip_subtract']['rate'])}); {r['n']} random directions of its norm: mean {pct(r['mean'])}, "
                   f"max {pct(r['max'])} (p = {d['p_random'] if d['p_random'] is None else round(d['p_random'], 3)})")
        out.append(f"(3) {self._fourier_text()}")
        out += [f"(2) {line}" for line in self._neuron_texts()]
        return out

    def _neuron_texts(self) -> list[str]:
        """Measurement (2), one line a position: the top neurons' threshold and residue shares beside the random
        neurons' (none when not measured)."""
        nu = self.neurons
        out = []
        for at, fam in (("end", "threshold"), ("next", "residue")):
            if at not in nu:
                continue
            parts = []
            for f in ("threshold", "residue"):
                sh = nu[at]["shares"][f]
                t, r = sh.get("top"), sh.get("random")
                text = f"{f} {_share(t)}" + (f" vs random {_share(r)}" if r else "")
                if sh.get("p_top_vs_random") is not None:
                    text += f" (Fisher p = {sh['p_top_vs_random']:.2g})"
                parts.append(text)
            out.append(f"{'END' if at == 'end' else 'END+1'}: MLPs {nu[at]['mlps']}, top {nu['neurons_per_mlp']} "
                       f"neurons each: " + "; ".join(parts) + f" (expected there: {fam})")
        two = nu.get("next", {}).get("two_digit")
        if two:
            sh = two["shares"]["residue"]
            out.append(f"END+1 on the {two['n_cells']} two-digit cells alone: residue (there: one value of a + b) "
                       f"{_share(sh.get('top'))} vs random {_share(sh.get('random'))}"
                       + (f" (Fisher p = {sh['p_top_vs_random']:.2g})" if sh.get("p_top_vs_random") is not None else ""))
        return out

    def _fourier_text(self) -> str:
        fo = self.fourier
        if "refused" in fo:
            return f"Fourier view refused: {fo['refused']}"
        return (f"energy at periods 10 and 5 beyond the straight trend, top components: END {fo['end']['share']:.2f} "
                f"[{fo['end']['low']:.2f}, {fo['end']['high']:.2f}], END+1 {fo['next']['share']:.2f} "
                f"[{fo['next']['low']:.2f}, {fo['next']['high']:.2f}]; END+1 minus END {fo['difference']:+.2f} "
                f"[{fo['low']:+.2f}, {fo['high']:+.2f}] (p = {fo['p']:.3g}); white noise {fo['chance']:.2f}")

    def table_rows(self) -> list[list[str]]:
        """The report's rows: measurement, value with its interval, null."""
        o, sh, d = self.overlap, self.overlap["split_half"], self.direction

        def pct(v: Any) -> str:
            return "n/a" if v is None else f"{v:.0%}"

        rows = [[f"Jaccard of the top {o['k']} of {o['n_components']} components, END vs END + 1 ({o['n_pairs']} pairs)",
                 f"{o['jaccard']:.2f} [{o['low']:.2f}, {o['high']:.2f}]",
                 f"random sets {o['null']['mean']:.2f} [{o['null']['low']:.2f}, {o['null']['high']:.2f}], "
                 f"p = {o['p_random']:.3g}"],
                [f"split halves: within a position minus across ({sh['n_splits']} splits)",
                 f"{sh['gap']:.2f} [{sh['gap_low']:.2f}, {sh['gap_high']:.2f}]",
                 f"within {(sh['within_end'] + sh['within_next']) / 2:.2f}, across {sh['across']:.2f}"]]
        for at in POSITIONS:
            own = self.curves[f"{at}@{at}"]
            for against, m in self.across["margins"][at].items():
                c = self.curves[f"{against}@{at}"]
                rows.append([f"CMD at {at} of the {against} circuit minus the {at} one's ({own.n_pairs} held-out pairs)",
                             f"{m['difference']:+.3f} [{m['low']:+.3f}, {m['high']:+.3f}]",
                             f"own {own.cmd:.3f}, {against} {c.cmd:.3f}"])
        f, r = d["flip"], d["random"]
        rows.append([f"carry direction (layer {d['layer']}) flips the first answer token ({f['n']} held-out prompts)",
                     f"{pct(f['rate'])} [{pct(f['low'])}, {pct(f['high'])}]",
                     f"{r['n']} random directions of its norm: mean {pct(r['mean'])}, max {pct(r['max'])}"])
        fo = self.fourier
        if "refused" in fo:
            rows.append(["Fourier energy at periods 10 and 5 beyond the trend", "refused", fo["refused"]])
        else:
            rows.append(["Fourier energy at periods 10 and 5 beyond the trend, END + 1 minus END (top components)",
                         f"{fo['difference']:+.2f} [{fo['low']:+.2f}, {fo['high']:+.2f}]",
                         f"END {fo['end']['share']:.2f}, END + 1 {fo['next']['share']:.2f}; white noise "
                         f"{fo['chance']:.2f}"])
        nu = self.neurons
        for at, fam in (("end", "threshold"), ("next", "residue")):
            if at not in nu:
                continue
            sh = nu[at]["shares"][fam]
            t, r = sh.get("top"), sh.get("random")
            where = "END" if at == "end" else "END + 1"
            rule = "a range of a + b (the family `threshold`)" if fam == "threshold" else "(a + b) mod 10"
            rows.append([f"top neurons of MLPs {nu[at]['mlps']} at {where} whose rule is {rule} "
                         f"({t['n'] if t else 0} neurons, classified over the {nu['n_cells']} cells)",
                         _share(t), f"random neurons of the same MLPs {_share(r)}"
                         + (f", Fisher p = {sh['p_top_vs_random']:.2g}" if sh.get("p_top_vs_random") is not None else "")])
        two = nu.get("next", {}).get("two_digit")
        if two:
            sh = two["shares"]["residue"]
            rows.append([f"top neurons at END + 1 whose rule is (a + b) mod 10, on the {two['n_cells']} two-digit cells "
                         "alone (there the same cells as one value of a + b)", _share(sh.get("top")),
                         f"random neurons of the same MLPs {_share(sh.get('random'))}"
                         + (f", Fisher p = {sh['p_top_vs_random']:.2g}" if sh.get("p_top_vs_random") is not None
                            else "")])
        return rows

    def _write(self, folder: Path) -> None:
        write_parts(folder, self.summary_json(), self.pairs, {"carry.pt": {
            "effects": self.effects, "separation": self.separation, "curves": {k: c.to_dict() for k, c in self.curves.items()},
            "grid_activations": dict(self.grid_activations)}})

    @classmethod
    def _read(cls, folder: Path, config: CarryConfig) -> CarryResult:
        path = folder / "carry.pt"
        pairs = read_pairs(folder / "pairs.jsonl")
        t = load_torch(path, "carry study")
        shapes = Shapes(path, pair=(len(pairs), "pairs.jsonl"), position=(len(POSITIONS), "the two answer positions"),
                        half=(2, "the fit and held-out halves of the grid"))
        if not isinstance(t, dict):
            raise shapes.fail("it holds no dictionary of tensors")
        effects = shapes.tensor("effects", t.get("effects"), ("position", "component", "pair"), no_inf=True)
        separation = shapes.tensor("separation", t.get("separation"), ("half", "layer"), no_inf=True)
        raw = t.get("curves")
        if not isinstance(raw, dict):
            raise shapes.fail("curves is missing")
        curves = {str(k): FaithfulnessCurve.checked(v, path, f"curves[{k}]") for k, v in raw.items()}
        s = read_json(folder / "summary.json")
        if not isinstance(s, dict) or any(not isinstance(s.get(k), dict) for k in SUMMARY_PARTS):
            raise ResultError(f"{folder / 'summary.json'} lacks one of {', '.join(SUMMARY_PARTS)}")
        neurons = s.get("neurons", {})  # absent in results saved before measurement 2
        if not isinstance(neurons, dict):
            raise ResultError(f"{folder / 'summary.json'}: field neurons should be a dictionary")
        for part in (*SUMMARY_PARTS, "neurons"):  # numbers where numbers are: only names and rules are text
            _check_numbers(s.get(part, {}), [part], folder / "summary.json")
        raw_acts = t.get("grid_activations", {})
        if not isinstance(raw_acts, dict) or set(raw_acts) - set(POSITIONS):
            raise shapes.fail(f"grid_activations should map {' and '.join(POSITIONS)} to tensors")
        acts = {}
        for at, v in raw_acts.items():
            at_shapes = Shapes(path, neuron=(_n_neurons(neurons, at), f"summary.json's neurons at {at}"))
            acts[at] = at_shapes.tensor(f"grid_activations[{at}]", v, ("neuron", "cell"), finite=True)
        return cls(config, pairs, effects, s["overlap"], curves, s["across"], s["direction"], separation,
                   s["accuracy"], s["fourier"], number(s, "seconds", folder / "summary.json", 0.0), neurons, acts,
                   _validity=validity_from_summary(s, folder / "summary.json"))


def _share(r: dict[str, Any] | None) -> str:
    """A share with its Wilson interval (``"12% [5%, 26%] of 40"``), or "n/a"."""
    if not r or not r.get("n"):
        return "n/a"
    return f"{r['rate']:.0%} [{r['low']:.0%}, {r['high']:.0%}] of {r['n']}"


def _n_neurons(neurons: dict[str, Any], at: str) -> int:
    part = neurons.get(at)
    if not isinstance(part, dict) or not isinstance(part.get("top"), list) or not isinstance(part.get("random"), list):
        raise ResultError(f"summary.json: neurons.{at} lacks its top and random neurons, which carry.pt's "
                          f"grid_activations[{at}] holds")
    return len(part["top"]) + len(part["random"])


# The summary's only text leaves: the direction's choice, a refused Fourier view, a neuron's rule and its family, and
# measurement 2's metric.
_TEXT_FIELDS = ("chosen", "refused", "rule", "family", "metric")


def _check_numbers(value: object, at: list, path: Path) -> None:
    """Every leaf of a summary part is a number, a bool or null, except the named text fields: one ResultError
    naming the field otherwise (a string where a number was would be drawn as it stands)."""
    if isinstance(value, dict):
        for k, v in value.items():
            _check_numbers(v, [*at, k], path)
    elif isinstance(value, list):
        for i, v in enumerate(value):
            _check_numbers(v, [*at, i], path)
    elif isinstance(value, str) and not (at and at[-1] in _TEXT_FIELDS):
        raise ResultError(f"{path}: field {'.'.join(map(str, at))} should be a number, got {value[:40]!r}")
