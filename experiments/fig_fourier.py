"""How the key components compute (issue 32; kept apart from fig_heuristics.py): the key heads' and MLPs' direct
effect at END over the number line and its Fourier spectrum (Zhou et al. 2024), the model's accuracy on two-digit
sums, and, where it handles them, which neurons of the key MLPs move the answer's units digit and which its tens
(Baeumel et al. 2025). The key components come from the shared identify result (results/identify/<task>).

Run: ``python experiments/fig_fourier.py [--n-heads 8 --n-mlps 4]``; ``--replot`` redraws."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

import _common as C

from circuits.config import option
from circuits.explain.numbers.config import NumbersConfig
from circuits.explain.numbers.job import numbers
from circuits.explain.numbers.result import NumbersResult
from circuits.viz.figures import write_figure


@dataclass(frozen=True)
class Config(C.KeyHeadConfig, NumbersConfig):
    """The identify run (its shared folder) and ``circuits numbers``'s own fields, each declared once there."""

    out: str = option("results/fig_fourier")


def main(config: Config, model=None) -> NumbersResult:
    t = C.Timer()
    model = model or C.model_for(config.model, config.dtype)
    made = C.identify_result(config, model=model)
    t(f"identify: {len(made.pairs)} pairs")
    own = {f.name: getattr(config, f.name) for f in dataclasses.fields(NumbersConfig)}
    nc = NumbersConfig(**{**own, "heads_from": str(config.identify_folder())})
    result = numbers(model, made, nc, progress=False)
    t("Fourier view and digit positions")
    result.save(config.out)
    return result


def plot(result: NumbersResult, out: Path) -> Path:
    digits = result.digit_figure()
    if digits is not None:
        write_figure(digits, Path(out) / "digits.html")
    return write_figure(result.figure(), Path(out) / "figure.html")


if __name__ == "__main__":
    C.run(Config, main, plot)
