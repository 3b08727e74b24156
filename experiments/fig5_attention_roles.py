"""Figure 5: where the key heads look from END, by token role (A, B, operator, answer prefix,
few-shot prefix, other), averaged over prompts of each operation.
Run: ``python experiments/fig5_attention_roles.py``; ``--replot`` redraws."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import _common as C

from circuits.attention import attention_by_role
from circuits.figures import roles_panels, write_figure
from circuits.prompts import PairConfig, build_pairs


@dataclass(frozen=True)
class Config(C.KeyHeadConfig):
    n_key_heads: int = 8
    operations: tuple = ("addition", "subtraction", "multiplication", "division")
    n_prompts: int = 32  # per operation (the paper: 1000)
    out: str = "results/fig5_attention_roles"


def main(config: Config) -> Path:
    t = C.Timer()
    model, ps, eff, heads = C.key_heads_for(config, top=config.n_key_heads)
    out = {}
    for op in config.operations:
        pairs = ps.pairs if op == config.task else build_pairs(model, PairConfig(task=op, n_pairs=config.n_prompts, seed=config.seed)).pairs
        ra = attention_by_role(model, pairs[: config.n_prompts], heads)
        out[op] = {**ra.to_json(), "dominant": ra.dominant()}
        t(op)
    C.save(config.out, config, {"heads": [list(h) for h in heads], "by_operation": out})
    return plot(config.out)


def plot(out) -> Path:
    return write_figure(roles_panels(C.load(out)["by_operation"]), Path(out) / "figure.html")


if __name__ == "__main__":
    C.run(Config, main, plot)
