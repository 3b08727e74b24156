"""Figure 5: where the key heads look from END, by token role (A, B, operator, answer prefix,
few-shot prefix, other), averaged over prompts of each operation.
Run: ``python experiments/fig5_attention_roles.py``; ``--replot`` redraws.
The same job as ``circuits attention`` (:mod:`circuits.explain.job`)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import _common as C
import _tables as T

from circuits.config import count, option
from circuits.data.templates import OPERATIONS
from circuits.explain.attention import AttentionRoles
from circuits.explain.job import roles_result
from circuits.explain.config import RolesConfig
from circuits.viz.figures import write_figure


@dataclass(frozen=True)
class Config(C.KeyHeadConfig, RolesConfig):
    n_key_heads: int = count(8)
    operations: tuple[str, ...] = option(OPERATIONS)
    n_prompts: int = count(32, help="prompts per operation (the paper: 1000)")
    out: str = option("results/fig5_attention_roles")


def main(config: Config, model=None) -> AttentionRoles:
    t = C.Timer()
    model = model or C.model_for(config.model, config.dtype)
    made = C.identify_result(config, model=model)
    result = roles_result(model, made, config, lambda op: C.pairs_for(config, op, model))  # `circuits attention`
    t("roles")
    result.save(config.out)
    return result


def published(result: AttentionRoles) -> dict:
    """The table of docs/results.md this result gives: the key heads' attention by role on the identify task's
    prompts (experiments/_tables.py renders it; publish.py copies it)."""
    cfg = result.config  # a Config after main, its saved fields after --replot
    task = cfg.get("task") if isinstance(cfg, dict) else getattr(cfg, "task", None)
    task = task if task in result.by_operation else next(iter(result.by_operation))
    r = result.by_operation[task]
    labels = [r["dominant"][f"{l}.{h}"] for l, h in r["heads"]]
    return {"fig5_roles": {"render": "fig5_roles", "data": {
        "operation": task, "heads": r["heads"], "roles": r["roles"], "shares": r["mean"], "labels": labels}}}


def plot(result: AttentionRoles, out: Path) -> Path:
    T.write_published(out, published(result))
    return write_figure(result.figure(), Path(out) / "figure.html")


if __name__ == "__main__":
    C.run(Config, main, plot)
