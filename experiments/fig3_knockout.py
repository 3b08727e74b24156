"""Figure 3: accuracy and answer probability after mean-ablating the top-k heads (effect order) vs
k random heads (several seeds). Run: ``python experiments/fig3_knockout.py``; ``--replot`` redraws."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import _common as C

from circuits.ablation import compute_means, knockout_curve
from circuits.figures import knockout_panels, write_figure


@dataclass(frozen=True)
class Config(C.KeyHeadConfig):
    ks: tuple = (0, 1, 2, 3, 5, 10, 20)
    seeds: tuple = (0, 1, 2)
    prefix_policy: str = "keep"  # "counterfactual": X_c's few-shot prefix hides the operation too
    out: str = "results/fig3_knockout"


def main(config: Config) -> Path:
    t = C.Timer()
    model, ps, eff, ranking = C.key_heads_for(config, tag="" if config.prefix_policy == "keep" else "-cfprefix",
                                              prefix_policy=config.prefix_policy)
    t("effects")
    means = compute_means(model, ps.pairs)
    curve = knockout_curve(model, ps.pairs, means, ranking, list(config.ks), list(config.seeds))
    t("curve")
    C.save(config.out, config, {"curve": curve.to_json(), "n_pairs": len(ps.pairs), "task": config.task})
    return plot(config.out)


def plot(out) -> Path:
    return write_figure(knockout_panels(C.load(out)["curve"]), Path(out) / "figure.html")


if __name__ == "__main__":
    C.run(Config, main, plot)
