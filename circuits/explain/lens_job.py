"""The logit-lens job (Figure 6, ``circuits lens``): cos(MLP_in, W_U[A]) and cos(MLP_in, W_U[B]) per layer (6a),
cos(MLP_out - MLP_in, W_U[C]) against the other number tokens (6b), and the top number tokens of MLP_out - MLP_in per
layer for one example prompt (6c).

:func:`lens_result` computes the result on a task's pairs (``experiments/fig6_mlp_logit_lens.py`` calls it on its
shared identify result's pairs); :func:`run` is the job's entry point: the pairs of ``--heads-from``'s identify result,
or pairs built from the flags (the lens needs no key heads, so no identify run)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from circuits.data.pairs import PromptPair, make_pair
from circuits.explain.config import LensConfig
from circuits.explain.logit_lens import LogitLens, logit_lens
from circuits.identify.result import load_identify
from circuits.identify.source import model_for, pairs_of, resolved
from circuits.models.backend import Model


def lens_result(model: Model, pairs: Sequence[PromptPair], config: LensConfig) -> LogitLens:
    """Figure 6 on ``pairs``; 6c on ``config.example`` after the same few-shot prefix as the first equation-form
    pair."""
    pairs = list(pairs)
    eq = next((p for p in pairs if p.template_id.endswith("/0")), pairs[0])
    prefix = eq.reference[: eq.reference.rfind("\n") + 1]
    text = prefix + config.example
    example = make_pair(model.tokenizer, text, text, config.example_answer, allow_identical=True)  # only read, never patched
    result = logit_lens(model, pairs, example, k=config.top_k, config=config)
    result.example = config.example
    return result


def run(config: LensConfig, out: str | Path, *, model: Model | None = None, progress: bool = True) -> LogitLens:
    """The ``circuits lens`` job: Figure 6 saved in ``out`` (``data.json``, ``figure.html``, ``figure_6c.html``)."""
    config = resolved(config)
    model = model_for(config, model)
    made = load_identify(config.heads_from) if config.heads_from else None
    result = lens_result(model, pairs_of(config, config.task, model, made), config)
    save(result, out)
    return result


def save(result: LogitLens, out: str | Path) -> Path:
    """``result`` and its figures (``figure.html``: 6a and 6b; ``figure_6c.html``), in ``out``."""
    from circuits.distributed import is_main
    from circuits.viz.figures import prompt_label, top_tokens_figure, write_figure

    folder = result.save(out)
    if is_main():
        write_figure(top_tokens_figure(result.top_tokens, "6c: top number tokens of MLP_out - MLP_in for "
                                                          + prompt_label(result.example)), Path(out) / "figure_6c.html")
        write_figure(result.figure(), Path(out) / "figure.html")
    return folder
