"""The information flow of Stolfo et al. (2023) on this model (beyond the paper's END-only view): activation patching of
every head and MLP at every position of one template's prompts, exact (only positions from the patch to END recompute),
the effect shown by layer and position with the operand and operator positions marked from the template roles.

Run: ``python experiments/fig_information_flow.py [--template addition/0]``; ``--replot`` redraws."""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import _common as C

from circuits.config import count, option
from circuits.beyond.positions.config import PositionConfig
from circuits.beyond.positions.result import PositionResult, token_strings
from circuits.patching.engines.position_sweep import sweep_positions
from circuits.viz.figures import write_figure


@dataclass(frozen=True)
class Config(C.KeyHeadConfig):
    template: str = option("", help="the template whose pairs are swept (default: the most common in the pairs)")
    max_pairs: int = count(16, help="pairs of that template swept")
    metric: str = option("logit_diff", help="the metric the figure shows")
    out: str = option("results/fig_information_flow")


def main(config: Config, model=None) -> PositionResult:
    t = C.Timer()
    model = model or C.model_for(config.model, config.dtype)
    pairs = C.identify_result(config, model=model).pairs
    template = config.template or Counter(p.template_id for p in pairs).most_common(1)[0][0]
    chosen = [p for p in pairs if p.template_id == template][: config.max_pairs]
    if not chosen:
        raise ValueError(f"No pairs of template {template!r}; templates: {sorted({p.template_id for p in pairs})}")
    t(f"{len(chosen)} pairs of {template}")
    start = time.perf_counter()
    sweep = sweep_positions(model, chosen, progress=False)
    pc = PositionConfig(model=config.model, task=config.task, n_pairs=len(chosen), seed=config.seed, template=template,
                        metric=config.metric, pairs_from=str(config.identify_folder()))
    result = PositionResult(pc, chosen, sweep, time.perf_counter() - start)
    result.tokens = token_strings(model, result.representative())
    t(f"every head and MLP at every position in {result.seconds:.0f} s")
    result.save(config.out)
    return result


def plot(result: PositionResult, out: Path) -> Path:
    return write_figure(result.figure(), Path(out) / "flow.html")


if __name__ == "__main__":
    C.run(Config, main, plot)
