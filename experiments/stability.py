"""How stable the key-head set is (beyond the paper, which reports one run): per operation, the Jaccard overlap of the
key heads found with different seeds (new operands, templates and words: one identify run each, shared under
``--identify-dir``) and on each template form alone (equation, statement, question; from the seed-0 run's per-pair
values).

Run: ``python experiments/stability.py [--seeds 0,1,2]``; ``--replot`` redraws. The same as ``circuits stability``."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import _common as C
import _tables as T

from circuits.config import option
from circuits.data.templates import OPERATIONS
from circuits.beyond.stability.config import StabilityConfig
from circuits.beyond.stability.result import StabilityResult
from circuits.beyond.stability.job import stability
from circuits.viz.figures import write_figure


@dataclass(frozen=True)
class Config(C.KeyHeadConfig):
    operations: tuple[str, ...] = option(tuple(OPERATIONS), help="operations")
    seeds: tuple[int, ...] = option((0, 1, 2), minimum=0, nonempty=True, unique=True, help="seeds of the pairs")
    out: str = option("results/stability")


def main(config: Config, model=None) -> StabilityResult:
    t = C.Timer()
    model = model or C.model_for(config.model, config.dtype)
    results = {}
    for op in config.operations:
        results[op] = {s: C.identify_result(config.replace(seed=s), op, model=model) for s in config.seeds}
        t(op)
    result = stability(results, StabilityConfig(identify=config.identify_config(), operations=config.operations,
                                                seeds=config.seeds, identify_dir=config.identify_dir))
    result.save(config.out)
    return result


def published(result: StabilityResult) -> dict:
    """The table of docs/results.md this result gives (experiments/_tables.py renders it; publish.py copies it)."""
    per = result.summary()["per_operation"]
    forms = sorted({f for v in per.values() for f in v["forms"]})
    return {"stability": {"render": "stability", "data": {"forms": forms, "per_operation": {
        op: {"mean_jaccard_seeds": v["mean_jaccard_seeds"], "mean_jaccard_forms": v["mean_jaccard_forms"],
             "key_heads_per_form": {f: len(v["key_heads_by_form"].get(f, [])) for f in forms}}
        for op, v in per.items()}}}}


def plot(result: StabilityResult, out: Path) -> Path:
    T.write_published(out, published(result))
    return write_figure(result.figure(), Path(out) / "figure.html")


if __name__ == "__main__":
    C.run(Config, main, plot)
