"""Figure 3 under each ablation kind the literature compares: how much of the knockout's conclusion depends on it.

The paper replaces a knocked-out head's output by its mean over the counterfactual prompts (Wang et al. 2023a);
zero ablation sets it to 0 (often off-distribution); resample ablation gives each prompt another prompt's
counterfactual value (Chan et al. 2022). :func:`compare_ablations` draws the same effect-rank and random-rank curves
under each, and :class:`AblationComparison` saves them side by side.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from circuits.models.backend import Model

from circuits.data.pairs import PromptPair
from circuits.data.templates import OPERATIONS
from circuits.io import read_json, write_json
from circuits.config import count, option
from circuits.identify.config import KeyHeadSource
from circuits.results import Result, number
from circuits.types import Ablation, Head
from circuits.validate.knockout import KnockoutCurve, knockout_curve, replacement_values


def compare_ablations(model: Model, pairs: Sequence[PromptPair], ranking: Sequence[Head], ks: Sequence[int],
                      seeds: Sequence[int] = (0, 1, 2), kinds: Sequence[Ablation | str] = tuple(Ablation),
                      resample_seed: int = 0) -> dict[str, KnockoutCurve]:
    """One Figure 3 curve per ablation kind, on the same pairs, ranking and random orders."""
    pairs = list(pairs)
    out = {}
    for kind in map(Ablation.parse, kinds):
        values = replacement_values(model, pairs, kind, seed=resample_seed)
        out[kind.value] = knockout_curve(model, pairs, ranking, ks, seeds, means=values)
    return out


@dataclass(frozen=True)
class AblationKindsConfig(KeyHeadSource):
    """What decides Figure 3 under each ablation kind: the operations, the numbers of heads, the seeds of the random
    orders and the kinds."""

    operations: tuple[str, ...] = option(OPERATIONS)
    ks: tuple[int, ...] = count((0, 1, 2, 3, 5, 10, 20), minimum=0, nonempty=True, unique=True,
                                 help="numbers of heads knocked out (0: none, the baseline)")
    seeds: tuple[int, ...] = option((0, 1, 2), minimum=0, nonempty=True, unique=True)
    kinds: tuple[str, ...] = option(("mean", "zero", "resample"))


@dataclass(eq=False, repr=False)
class AblationComparison(Result[AblationKindsConfig]):
    """Figure 3's curves for each ablation kind, per task."""

    kind = "ablation_kinds"

    curves: dict[str, dict[str, KnockoutCurve]]  # task -> ablation kind -> curve
    n_pairs: dict[str, int]

    def summary(self) -> dict[str, Any]:
        """Per task and kind: accuracy with the most heads knocked out, key heads against random ones."""
        out: dict[str, Any] = {}
        for task, by_kind in self.curves.items():
            out[task] = {}
            for kind, c in by_kind.items():
                k = max(c.ks)
                i = c.ks.index(k)
                out[task][kind] = {"k": k, "accuracy_none": c.effect_accuracy[0], "accuracy_key_heads": c.effect_accuracy[i],
                                   "accuracy_random_heads": sum(r[i] for r in c.random_accuracy) / max(1, len(c.random_accuracy))}
        return out

    def figure(self, task: str | None = None):
        from circuits.viz.analysis_figures import ablation_panels

        task = task or next(iter(self.curves))
        return ablation_panels({k: c.to_json() for k, c in self.curves[task].items()},
                               f"{task}: Figure 3 under each ablation kind ({self.n_pairs.get(task, '?')} pairs)")

    def _write(self, folder: Path) -> None:
        from circuits.viz.figures import write_figure

        write_json(folder / "data.json", {"curves": {t: {k: c.to_json() for k, c in by.items()} for t, by in self.curves.items()},
                                          "n_pairs": self.n_pairs, "summary": self.summary()})
        for task in self.curves:
            write_figure(self.figure(task), folder / f"figure-{task}.html")

    @classmethod
    def _read(cls, folder: Path, config: AblationKindsConfig) -> AblationComparison:
        d = read_json(folder / "data.json")
        path = folder / "data.json"
        curves = {t: {k: KnockoutCurve.from_json(c, f"{path}, curve {t}/{k}") for k, c in by.items()}
                  for t, by in d["curves"].items()}
        return cls(config, curves, {k: number(d["n_pairs"], k, path, kind=int) for k in d.get("n_pairs", {})})
