"""Figure 6: cos(MLP_in, W_U[A]), cos(MLP_in, W_U[B]) per layer (6a); cos(MLP_out - MLP_in, W_U[C])
against the other number tokens (6b); top number tokens of MLP_out - MLP_in per layer for one prompt (6c).
Run: ``python experiments/fig6_mlp_logit_lens.py``; ``--replot`` redraws.
The same job as ``circuits lens`` (:mod:`circuits.explain.job`)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import _common as C

from circuits.config import count, option
from circuits.explain.config import LensConfig
from circuits.explain.job import lens_result
from circuits.explain.logit_lens import LogitLens


@dataclass(frozen=True)
class Config(C.KeyHeadConfig, LensConfig):
    example: str = option("4 + 3 = ", help="Figure 6c's prompt (after the task's few-shot prefix)")
    example_answer: str = option("7")
    top_k: int = count(5)
    out: str = option("results/fig6_mlp_logit_lens")


def main(config: Config, model=None) -> LogitLens:
    t = C.Timer()
    model = model or C.model_for(config.model, config.dtype)
    result = lens_result(model, C.pairs_for(config, config.task, model), config)  # the job of `circuits lens`
    t("lens")
    result.save(config.out)
    return result


def plot(result: LogitLens, out: Path) -> Path:
    """``figure.html`` (6a, 6b) and ``figure_6c.html``, as ``circuits lens`` writes them, redrawn over the result."""
    from circuits.viz.figures import prompt_label, top_tokens_figure, write_figure

    write_figure(top_tokens_figure(result.top_tokens, "6c: top number tokens of MLP_out - MLP_in for " + prompt_label(result.example)),
                 Path(out) / "figure_6c.html")
    return write_figure(result.figure(), Path(out) / "figure.html")


if __name__ == "__main__":
    C.run(Config, main, plot)
