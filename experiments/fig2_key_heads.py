"""Figure 2: the effect of every head and MLP on the answer logit, pooled over the four operations (path
patching at END, Section 4.1). This is ``circuits identify --task all``: one result per operation and the
pooled one in ``all/``, shared with every other figure script.

Run: ``python experiments/fig2_key_heads.py [--pairs 64]``; ``--replot`` redraws from the saved result."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import _common as C

from circuits.config import option
from circuits.identify import IdentifyResult, run_identify
from circuits.viz.figures import write_figure


@dataclass(frozen=True)
class Config(C.KeyHeadConfig):
    task: str = option("all", help="'all' pools the four operations, as the paper's Figure 2")
    out: str = option("results/identify/all", help="the pooled result's folder (inside identify_dir)")


def main(config: Config, model=None) -> IdentifyResult:
    t = C.Timer()
    folders = run_identify(config.identify_config(), config.identify_dir,
                           model=model or C.model_for(config.model), progress=False)
    t(f"identify: {', '.join(folders)}")
    return IdentifyResult.load(folders[config.task] if config.task in folders else config.out)


def plot(result: IdentifyResult, out: Path) -> Path:
    return write_figure(result.figure(), Path(out) / "heads.html")


if __name__ == "__main__":
    C.run(Config, main, plot)
