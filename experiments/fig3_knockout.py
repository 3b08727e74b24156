"""Figure 3: accuracy and answer probability after mean-ablating the top-k heads (effect order) vs
k random heads (several seeds). Run: ``python experiments/fig3_knockout.py``; ``--replot`` redraws.
The same job as ``circuits knockout --heads-from results/identify/addition`` (:mod:`circuits.validate.job`)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import _common as C
import _tables as T

from circuits.config import count, option
from circuits.validate.config import KnockoutConfig
from circuits.validate.knockout import KnockoutResult
from circuits.validate.job import knockout_result
from circuits.viz.figures import write_figure


@dataclass(frozen=True)
class Config(C.KeyHeadConfig, KnockoutConfig):
    ks: tuple[int, ...] = count((0, 1, 2, 3, 5, 10, 20), minimum=0, nonempty=True, unique=True, help="numbers of heads knocked out (0: none, the baseline)")
    seeds: tuple[int, ...] = option((0, 1, 2), minimum=0, nonempty=True, unique=True, help="seeds of the random orders")
    out: str = option("results/fig3_knockout")


def main(config: Config, model=None) -> KnockoutResult:
    t = C.Timer()
    model = model or C.model_for(config.model, config.dtype)
    r = C.identify_result(config, model=model)
    t("key heads")
    result = knockout_result(model, r, config)  # the job of `circuits knockout`
    t("curve")
    result.save(config.out)
    return result


def published(result: KnockoutResult) -> dict:
    """The table of docs/results.md this result gives (experiments/_tables.py renders it; publish.py copies it)."""
    c = result.curve
    return {"fig3_knockout": {"render": "fig3_knockout", "data": {
        "task": result.task, "n_pairs": result.n_pairs, "ks": list(c.ks), "effect_accuracy": list(c.effect_accuracy),
        "effect_prob": list(c.effect_prob), "random_accuracy": [list(r) for r in c.random_accuracy],
        "random_prob": [list(r) for r in c.random_prob]}}}


def plot(result: KnockoutResult, out: Path) -> Path:
    T.write_published(out, published(result))
    return write_figure(result.figure(), Path(out) / "figure.html")


if __name__ == "__main__":
    C.run(Config, main, plot)
