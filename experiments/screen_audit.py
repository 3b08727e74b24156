"""The attribution screen audited by the exact engine (how far the fast linear screen can be trusted): attribution
patching of every head, MLP and neuron at every position on one task's identify pairs, the top-N re-measured exactly,
and the audit table (Spearman with the exact END engine, exact top-10 / top-5% missed by the screen's top-N, the largest
misses and why).

Run: ``python experiments/screen_audit.py --task addition``; ``--replot`` redraws from the saved result. The same
as ``circuits screen --pairs-from results/identify/<task>``."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import _common as C

from circuits.config import count, option
from circuits.beyond.screen.config import ScreenConfig
from circuits.beyond.screen.result import ScreenResult
from circuits.beyond.screen.job import screen
from circuits.viz.figures import write_figure


@dataclass(frozen=True)
class Config(C.KeyHeadConfig):
    metric: str = option("fraction", help="what is estimated and ranked")
    verify: int = count(20, help="top-N re-measured exactly")
    grad_drop: bool = option(False, help="AtP*'s GradDrop scores too (n_layers extra backward passes)")
    out: str = option("results/screen_audit")


def main(config: Config, model=None) -> ScreenResult:
    t = C.Timer()
    model = model or C.model_for(config.model, config.dtype)
    r = C.identify_result(config, model=model)
    t("identify pairs")
    sc = ScreenConfig(model=config.model, task=config.task, n_pairs=len(r.pairs), seed=config.seed,
                      pairs_from=str(config.identify_folder()), metric=config.metric, verify=config.verify,
                      grad_drop=config.grad_drop)
    result = screen(model, r.pairs, sc, progress=False)
    t(f"screen {result.seconds.get('screen', 0):.1f} s, verify, audit")
    result.save(config.out)
    return result


def plot(result: ScreenResult, out: Path) -> Path:
    return write_figure(result.figure(), Path(out) / "screen.html")


if __name__ == "__main__":
    C.run(Config, main, plot)
