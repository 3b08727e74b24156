"""Figure 3 under each ablation kind (whether the paper's conclusion depends on mean ablation): the key heads' and
random heads' knockout curves with the knocked-out outputs replaced by their mean over counterfactual prompts (the
paper's), by zero, and by another prompt's counterfactual value (resample), side by side, per operation.

Run: ``python experiments/fig3_ablation_kinds.py``; ``--replot`` redraws."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import _common as C
import _tables as T

from circuits.config import count, option
from circuits.data.templates import OPERATIONS
from circuits.validate.ablation_kinds import AblationComparison, AblationKindsConfig, compare_ablations
from circuits.viz.figures import write_figure


@dataclass(frozen=True)
class Config(C.KeyHeadConfig, AblationKindsConfig):
    operations: tuple[str, ...] = option(tuple(OPERATIONS), help="operations")
    ks: tuple[int, ...] = count((0, 1, 2, 3, 5, 10, 20), minimum=0, nonempty=True, unique=True, help="numbers of heads knocked out (0: none, the baseline)")
    seeds: tuple[int, ...] = option((0, 1, 2), minimum=0, nonempty=True, unique=True, help="seeds of the random orders")
    kinds: tuple[str, ...] = option(("mean", "zero", "resample"), help="ablation kinds")
    out: str = option("results/fig3_ablation_kinds")


def main(config: Config, model=None) -> AblationComparison:
    t = C.Timer()
    model = model or C.model_for(config.model, config.dtype)
    curves, n = {}, {}
    for op in config.operations:
        r = C.identify_result(config, op, model=model)
        ranking = [h for h, _ in r.scores(None).ranked(part="heads")]
        curves[op] = compare_ablations(model, r.pairs, ranking, [k for k in config.ks if k <= len(ranking)], config.seeds,
                                       config.kinds)
        n[op] = len(r.pairs)
        t(op)
    result = AblationComparison(config, curves, n)
    result.save(config.out)
    return result


SHOWN_KS = (1, 3, 5, 10, 20)  # the columns of docs/results.md's table


def published(result: AblationComparison) -> dict:
    """The table of docs/results.md this result gives: per operation and kind, accuracy after knocking out the top-k
    heads and the mean over the random orders, at the ks of SHOWN_KS it has (experiments/_tables.py renders it)."""
    first = next(iter(next(iter(result.curves.values())).values()))
    ks = [k for k in first.ks if k in SHOWN_KS]
    curves = {}
    for op, by_kind in result.curves.items():
        for kind, c in by_kind.items():
            at = [c.ks.index(k) for k in ks]
            curves.setdefault(op, {})[kind] = {
                "effect_accuracy": [c.effect_accuracy[i] for i in at],
                "random_accuracy_mean": [sum(r[i] for r in c.random_accuracy) / len(c.random_accuracy) for i in at]}
    return {"ablation_kinds": {"render": "ablation_kinds", "data": {"ks": ks, "curves": curves}}}


def plot(result: AblationComparison, out: Path) -> Path:
    T.write_published(out, published(result))
    paths = [write_figure(result.figure(task), Path(out) / f"figure-{task}.html") for task in result.curves]
    return paths[0]


if __name__ == "__main__":
    C.run(Config, main, plot)
