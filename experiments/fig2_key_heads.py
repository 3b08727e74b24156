"""Figure 2: the effect of every head and MLP on the answer logit (path patching, Section 4.1).

Run: ``python experiments/fig2_key_heads.py [--task addition --n-pairs 32]``; ``--replot`` redraws."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import _common as C

from circuits.figures import effects_figure, write_figure


@dataclass(frozen=True)
class Config(C.KeyHeadConfig):
    threshold: float = -0.05  # the paper's key-head cut (relative logit)
    out: str = "results/fig2_key_heads"


def main(config: Config) -> Path:
    t = C.Timer()
    model, ps = C.model_and_pairs(config.model, config.task, config.n_pairs, config.seed)
    t(f"{len(ps.pairs)} pairs (accuracy before filtering {ps.accuracy:.2f})")
    eff = C.head_effects(model, config.model, config.task, ps.pairs, config.seed)
    t("sweep done")
    ranking = C.key_heads(eff)
    n_heads = model.cfg.n_layers * model.cfg.n_heads
    below = C.key_heads(eff, threshold=config.threshold)
    data = {**eff, "pair_stats": {k: v for k, v in ps.stats().items() if k != "per_template"},
            "top_heads": [[l, h, eff["head_effects"][l][h], eff["head_fraction"][l][h]] for l, h in ranking[:20]],
            "n_below_threshold": len(below), "share_below_threshold": len(below) / n_heads}
    C.save(config.out, config, data)
    return plot(config.out)


def plot(out) -> Path:
    d = C.load(out)
    fig = effects_figure(d["head_effects"], d["mlp_effects"], f"Path patching, {d['task']}: relative change of the answer logit")
    return write_figure(fig, Path(out) / "figure.html")


if __name__ == "__main__":
    C.run(Config, main, plot)
