"""Figure 15 (Appendix D): key heads per operation and how many they share.
Run: ``python experiments/fig15_per_operation.py``; ``--replot`` redraws."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import _common as C
import _tables as T

from circuits.config import count, option
from circuits.data.templates import OPERATIONS
from circuits.identify import PerOperation
from circuits.identify.result import PerOperationConfig
from circuits.viz.figures import heatmap_grid, overlap_figure, write_figure


@dataclass(frozen=True)
class Config(C.KeyHeadConfig, PerOperationConfig):
    operations: tuple[str, ...] = option(OPERATIONS)
    top: int = count(10, help="key heads compared per operation")
    out: str = option("results/fig15_per_operation")


def main(config: Config, model=None) -> PerOperation:
    t = C.Timer()
    model = model or C.model_for(config.model, config.dtype)
    results = {}
    for op in config.operations:
        results[op] = C.identify_result(config, op, model=model)
        t(op)
    result = PerOperation.from_identify(config, results, config.top)
    result.save(config.out)
    return result


def published(result: PerOperation) -> dict:
    """The table of docs/results.md this result gives (experiments/_tables.py renders it; publish.py copies it)."""
    return {"fig15_overlap": {"render": "fig15_overlap", "data": {
        "operations": list(result.operations), "key_heads": {op: [list(h) for h in hs] for op, hs in result.key_heads.items()}}}}


def plot(result: PerOperation, out: Path) -> Path:
    T.write_published(out, published(result))
    write_figure(overlap_figure(result.operations, result.overlap, f"Shared top-{len(next(iter(result.key_heads.values())))} "
                                                                    "key heads"), Path(out) / "figure_overlap.html")
    return write_figure(heatmap_grid(result.head_effects, f"Head effects per operation ({result.metric})", result.metric),
                        Path(out) / "figure.html")


if __name__ == "__main__":
    C.run(Config, main, plot)
