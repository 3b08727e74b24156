"""Figure 15 (Appendix D): key heads per operation and how many they share.
Run: ``python experiments/fig15_per_operation.py``; ``--replot`` redraws."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import _common as C
from plotly.subplots import make_subplots

from circuits.figures import heatmap_grid, overlap_figure, write_figure
from circuits.models import load_model
from circuits.prompts import PairConfig, build_pairs


@dataclass(frozen=True)
class Config:
    model: str = "smollm2"
    operations: tuple = ("addition", "subtraction", "multiplication", "division")
    n_pairs: int = 24
    seed: int = 0
    top: int = 10  # key heads compared per operation
    out: str = "results/fig15_per_operation"


def main(config: Config) -> Path:
    t = C.Timer()
    model = load_model(config.model)
    per_op, accuracy = {}, {}
    for op in config.operations:
        ps = build_pairs(model, PairConfig(task=op, n_pairs=config.n_pairs, seed=config.seed))
        per_op[op] = C.head_effects(model, config.model, op, ps.pairs, config.seed)
        accuracy[op] = {"accuracy": ps.accuracy, "n_pairs": len(ps.pairs)}
        t(op)
    keys = {op: C.key_heads(e, top=config.top) for op, e in per_op.items()}
    ops = list(config.operations)
    overlap = [[len(set(keys[a]) & set(keys[b])) for b in ops] for a in ops]
    data = {"operations": ops, "head_effects": {op: e["head_effects"] for op, e in per_op.items()},
            "key_heads": {op: [list(h) for h in v] for op, v in keys.items()}, "overlap": overlap, "pairs": accuracy}
    C.save(config.out, config, data)
    return plot(config.out)


def plot(out) -> Path:
    d = C.load(out)
    grid = heatmap_grid(d["head_effects"], "Head effects per operation (Figure 15)")
    ov = overlap_figure(d["operations"], d["overlap"], f"Shared top-{len(next(iter(d['key_heads'].values())))} key heads")
    write_figure(ov, Path(out) / "figure_overlap.html")
    return write_figure(grid, Path(out) / "figure.html")


if __name__ == "__main__":
    C.run(Config, main, plot)
