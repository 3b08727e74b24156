"""Figure 2: the effect of every head and MLP on the answer logit, pooled over the four operations (path
patching at END, Section 4.1). This is ``circuits identify --task all``: one result per operation and the
pooled one in ``all/``, shared with every other figure script.

Run: ``python experiments/fig2_key_heads.py [--pairs 64]``; ``--replot`` redraws from the saved result. The results
go under ``--identify-dir`` (``results/identify``), in a folder of their own when they were made with another config
(other ``--pairs``, ``--seed``, ...): the script prints where."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import _common as C

from circuits.config import option, redefault
from circuits.identify.result import IdentifyResult
from circuits.viz.figures import write_figure


@dataclass(frozen=True)
class Config(C.KeyHeadConfig):
    task: str = redefault(C.KeyHeadConfig, "task", "all")  # 'all' pools the four operations, as the paper's Figure 2
    out: str = option("", help="the result's folder: where the identify cache puts it (default: <identify-dir>/all for "
                               "the default config); another is refused")

    def __post_init__(self) -> None:
        super().__post_init__()
        if not self.out:  # the figure lives with its identify result, keyed by the identify config
            object.__setattr__(self, "out", str(self.identify_folder()))
        elif Path(self.out) != self.identify_folder():
            raise ValueError(f"--out {self.out}: this config's result goes to {self.identify_folder()} (the identify "
                             "cache, keyed by the config); leave --out unset")


def main(config: Config, model=None) -> IdentifyResult:
    t = C.Timer()
    result = C.identify_result(config, model=model)
    t(f"identify: {config.identify_folder()}")
    return result


def plot(result: IdentifyResult, out: Path) -> Path:
    return write_figure(result.figure(), Path(out) / "heads.html")


if __name__ == "__main__":
    C.run(Config, main, plot)
