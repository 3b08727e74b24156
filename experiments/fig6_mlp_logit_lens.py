"""Figure 6: cos(MLP_in, W_U[A]), cos(MLP_in, W_U[B]) per layer (6a); cos(MLP_out - MLP_in, W_U[C])
against the other number tokens (6b); top number tokens of MLP_out - MLP_in per layer for one prompt (6c).
Run: ``python experiments/fig6_mlp_logit_lens.py``; ``--replot`` redraws."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import _common as C

from circuits.figures import lens_panels, top_tokens_figure, write_figure
from circuits.logit_lens import mlp_lens, top_number_tokens, writing_start
from circuits.prompts import make_pair


@dataclass(frozen=True)
class Config(C.KeyHeadConfig):
    example: str = "4 + 3 = "  # Figure 6c's prompt (after the task's few-shot prefix)
    top_k: int = 5
    out: str = "results/fig6_mlp_logit_lens"


def main(config: Config) -> Path:
    t = C.Timer()
    model, ps = C.model_and_pairs(config.model, config.task, config.n_pairs, config.seed)
    lens = mlp_lens(model, ps.pairs)
    t("lens")
    means = lens.means()
    # Figure 6c on the example, after the same few-shot prefix as the first equation-form pair.
    eq = next((p for p in ps.pairs if p.template_id.endswith("/0")), ps.pairs[0])
    prefix = eq.reference[: eq.reference.rfind("\n") + 1]
    example = make_pair(model.tokenizer, prefix + config.example, prefix + config.example, "7")
    top = top_number_tokens(model, example, k=config.top_k)
    data = {"means": means, "n_pairs": len(ps.pairs), "example": config.example, "top_tokens": top,
            "writing_start": writing_start(means["delta_C"], means["delta_other"]),
            "peak_in_A": int(max(range(len(means["in_A"])), key=means["in_A"].__getitem__)),
            "peak_in_B": int(max(range(len(means["in_B"])), key=means["in_B"].__getitem__))}
    C.save(config.out, config, data)
    return plot(config.out)


def plot(out) -> Path:
    d = C.load(out)
    write_figure(top_tokens_figure(d["top_tokens"], f"6c: top number tokens of MLP_out - MLP_in for {d['example']!r}"),
                 Path(out) / "figure_6c.html")
    return write_figure(lens_panels(d["means"]), Path(out) / "figure.html")


if __name__ == "__main__":
    C.run(Config, main, plot)
