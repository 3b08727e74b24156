"""Figure 6: cos(MLP_in, W_U[A]), cos(MLP_in, W_U[B]) per layer (6a); cos(MLP_out - MLP_in, W_U[C])
against the other number tokens (6b); top number tokens of MLP_out - MLP_in per layer for one prompt (6c).
Run: ``python experiments/fig6_mlp_logit_lens.py``; ``--replot`` redraws."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import _common as C

from circuits.config import option
from circuits.data.pairs import make_pair
from circuits.explain import LogitLens, logit_lens
from circuits.explain.logit_lens import LensConfig
from circuits.viz.figures import top_tokens_figure, write_figure


@dataclass(frozen=True)
class Config(C.KeyHeadConfig, LensConfig):
    example: str = option("4 + 3 = ", help="Figure 6c's prompt (after the task's few-shot prefix)")
    example_answer: str = option("7")
    top_k: int = option(5)
    out: str = option("results/fig6_mlp_logit_lens")


def main(config: Config, model=None) -> LogitLens:
    t = C.Timer()
    model = model or C.model_for(config.model, config.dtype)
    pairs = C.pairs_for(config, config.task, model)
    # Figure 6c on the example, after the same few-shot prefix as the first equation-form pair.
    eq = next((p for p in pairs if p.template_id.endswith("/0")), pairs[0])
    prefix = eq.reference[: eq.reference.rfind("\n") + 1]
    text = prefix + config.example
    example = make_pair(model.tokenizer, text, text, config.example_answer, allow_identical=True)  # only read, never patched
    result = logit_lens(model, pairs, example, k=config.top_k, config=config)
    result.example = config.example
    t("lens")
    result.save(config.out)
    return result


def plot(result: LogitLens, out: Path) -> Path:
    write_figure(top_tokens_figure(result.top_tokens, f"6c: top number tokens of MLP_out - MLP_in for {result.example!r}"),
                 Path(out) / "figure_6c.html")
    return write_figure(result.figure(), Path(out) / "figure.html")


if __name__ == "__main__":
    C.run(Config, main, plot)
