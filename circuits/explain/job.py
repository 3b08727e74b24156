"""The explain jobs: ``circuits attention`` (Figure 5: where the key heads look from END, by token role),
``circuits attention-views`` (Figures 7 and 16: circuitsvis views of their attention on a few prompts) and
``circuits lens`` (Figure 6: cos(MLP_in, W_U[A]) and cos(MLP_in, W_U[B]) per layer (6a), cos(MLP_out - MLP_in, W_U[C])
against the other number tokens (6b), and the top number tokens of MLP_out - MLP_in per layer for one example prompt
(6c)).

:func:`roles_result`, :func:`views_result` and :func:`lens_result` compute the results from an identify result (or,
for the lens, a task's pairs); ``experiments/fig5_attention_roles.py``, ``fig7_attention_views.py`` and
``fig6_mlp_logit_lens.py`` call them with their shared identify results. :func:`run_attention`, :func:`run_attention_views` and
:func:`run_lens` are the jobs' entry points (``--heads-from``, or identify made first; the other operations' pairs
built as identify builds them; the lens needs no key heads, so no identify run), and ``print_*`` what the commands
say when they finish."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from pathlib import Path

from circuits.data.pairs import PromptPair, make_pair
from circuits.explain.attention import AttentionRoles, AttentionViews, attention_html, attention_roles
from circuits.explain.config import LensConfig, RolesConfig, ViewsConfig
from circuits.explain.logit_lens import LogitLens, logit_lens
from circuits.identify.result import IdentifyResult, load_identify
from circuits.identify.source import model_for, pairs_of, resolved, run_from_identify, save
from circuits.models.backend import Model

PairsOf = Callable[[str], Sequence[PromptPair]]  # operation -> its prompt pairs


def roles_result(model: Model, made: IdentifyResult, config: RolesConfig, pairs_for: PairsOf) -> AttentionRoles:
    """Figure 5: the top ``config.n_key_heads`` heads of ``made``, their END attention by token role on the first
    ``config.n_prompts`` pairs of each of ``config.operations``."""
    heads = made.top_heads(config.n_key_heads)
    pairs = [p for op in config.operations for p in list(pairs_for(op))[: config.n_prompts]]
    return attention_roles(model, pairs, heads, config=config)


def views_result(model: Model, made: IdentifyResult, config: ViewsConfig, pairs_for: PairsOf) -> AttentionViews:
    """Figures 7 and 16: circuitsvis views of the top ``config.n_key_heads`` heads of ``made`` on the first
    ``config.prompts_per_operation`` prompts of each of ``config.operations``, cropped to ``config.last_tokens``."""
    heads = made.top_heads(config.n_key_heads)
    prompts = [p for op in config.operations for p in list(pairs_for(op))[: config.prompts_per_operation]]
    from circuits.types import top_heads_label

    title = f"The {top_heads_label(len(heads), made.config.key_rule)}, key rule's heads first (Figures 7, 16)"
    page = attention_html(model, prompts, heads, title=title, last_tokens=config.last_tokens)
    return AttentionViews(config, heads, [p.reference for p in prompts], page)


def lens_result(model: Model, pairs: Sequence[PromptPair], config: LensConfig) -> LogitLens:
    """Figure 6 on ``pairs``; 6c on ``config.example`` after the same few-shot prefix as the first equation-form
    pair."""
    pairs = list(pairs)
    eq = next((p for p in pairs if p.template_id.endswith("/0")), pairs[0])
    prefix = eq.reference[: eq.reference.rfind("\n") + 1]
    text = prefix + config.example
    example = make_pair(model.tokenizer, text, text, config.example_answer, allow_identical=True,
                        max_answer_tokens=1)  # only read, never patched
    result = logit_lens(model, pairs, example, k=config.top_k, config=config)
    result.example = config.example
    return result


def run_attention(config: RolesConfig, out: str | Path, *, model: Model | None = None,
                  progress: bool = True) -> AttentionRoles:
    """The ``circuits attention`` job: Figure 5 saved in ``out`` (``data.json``, ``figure.html``)."""
    return run_from_identify(config, out, lambda m, made, c: roles_result(m, made, c, lambda op: pairs_of(c, op, m, made)),
                             model=model, progress=progress)


def run_attention_views(config: ViewsConfig, out: str | Path, *, model: Model | None = None,
              progress: bool = True) -> AttentionViews:
    """The ``circuits attention-views`` job: the views saved in ``out`` (``data.json``, and the page itself as
    ``figure.html``)."""
    return run_from_identify(config, out, lambda m, made, c: views_result(m, made, c, lambda op: pairs_of(c, op, m, made)),
                             model=model, progress=progress, write=AttentionViews.save)  # the page is its figure


def run_lens(config: LensConfig, out: str | Path, *, model: Model | None = None, progress: bool = True) -> LogitLens:
    """The ``circuits lens`` job: Figure 6 saved in ``out`` (``data.json``, ``figure.html``, ``figure_6c.html``)."""
    config = resolved(config)
    model = model_for(config, model)
    made = load_identify(config.heads_from) if config.heads_from else None
    result = lens_result(model, pairs_of(config, config.task, model, made), config)
    save_lens(result, out)
    return result


def save_lens(result: LogitLens, out: str | Path) -> Path:
    """``result`` and its figures (``figure.html``: 6a and 6b; ``figure_6c.html``), in ``out``."""
    from circuits.distributed import is_main
    from circuits.viz.figures import prompt_label, top_tokens_figure, write_figure

    folder = save(result, out)
    if is_main():
        write_figure(top_tokens_figure(result.top_tokens, "6c: top number tokens of MLP_out - MLP_in for "
                                                          + prompt_label(result.example)), Path(out) / "figure_6c.html")
    return folder


def _share(d: dict, i: int, role: str) -> str:
    """Head ``i``'s mean attention to ``role`` with its interval over prompts where saved: ``45% [38-52]``."""
    j = d["roles"].index(role)
    text = f"{100 * d['mean'][i][j]:.0f}%"
    if "ci_low" in d:
        text += f" [{100 * d['ci_low'][i][j]:.0f}-{100 * d['ci_high'][i][j]:.0f}]"
    return text


def print_attention(args: argparse.Namespace, config: RolesConfig, r: AttentionRoles, seconds: float) -> None:
    level = next((d["ci_level"] for d in r.by_operation.values() if "ci_level" in d), None)
    for op, d in r.by_operation.items():
        if d.get("no_roles_given"):
            print(f"  {op}: no roles given ({d.get('n_without_roles', '?')} pairs mark no operand or operator: give "
                  "\"roles\" in the pairs file, docs/identify.md#token-roles)")
            continue
        skipped = f", {d['n_without_roles']} without roles left out" if d.get("n_without_roles") else ""
        print(f"  {op} ({d.get('n_prompts', '?')} prompts{skipped}): " + ", ".join(
            f"{h} {role} {_share(d, i, role)}" for i, (h, role) in enumerate(d.get("dominant", {}).items())))
    ci = f" [{level:.0%} bootstrap interval over prompts]" if level is not None else ""
    print(f"the most-attended role of each head and its share of END's attention{ci}, {seconds:.0f} s "
          f"-> {args.out}/figure.html")


def print_attention_views(args: argparse.Namespace, config: ViewsConfig, r: AttentionViews, seconds: float) -> None:
    print(f"heads {', '.join(f'{h[0]}.{h[1]}' for h in r.heads)} on {len(r.prompts)} prompts, {seconds:.0f} s "
          f"-> {args.out}/figure.html")


def _cos(r: LogitLens, key: str, layer: int) -> str:
    """The mean cosine of ``key`` at ``layer`` with its interval over pairs where saved: ``0.12 [0.10, 0.14]``."""
    text = f"{r.means[key][layer]:.3f}"
    if r.intervals.get(key):
        low, high = r.intervals[key][layer]
        text += f" [{low:.3f}, {high:.3f}]"
    return text


def print_lens(args: argparse.Namespace, config: LensConfig, r: LogitLens, seconds: float) -> None:
    a, b = r.peak("in_A"), r.peak("in_B")
    ci = f" (cosines with their {r.ci_level:.0%} bootstrap intervals over pairs)" if r.intervals else ""
    start = r.writing_start
    writes = (f"the MLPs write the answer from layer {start} (cos {_cos(r, 'delta_C', start)} against "
              f"{_cos(r, 'delta_other', start)} for the other numbers)" if start is not None else
              "no layer's MLP writes the answer above the other numbers (cos(MLP_out - MLP_in, W_U[C]) does not stay "
              "0.02 above them)")
    print(f"[{config.task}] {r.n_pairs} pairs, {seconds:.0f} s{ci}: MLP inputs point at A most at layer {a} "
          f"(cos {_cos(r, 'in_A', a)}), at B at layer {b} (cos {_cos(r, 'in_B', b)}); {writes} -> {args.out}/figure.html")
