"""The attention jobs (Figures 5, 7 and 16): ``circuits attention`` (where the key heads look from END, by token role)
and ``circuits attention-views`` (circuitsvis views of their attention on a few prompts).

:func:`roles_result` and :func:`views_result` compute the results from an identify result and a way to get each
operation's pairs (``experiments/fig5_attention_roles.py`` and ``fig7_attention_views.py`` call them with their shared
identify results); :func:`run_roles` and :func:`run_views` are the jobs' entry points (``--heads-from``, or identify
made first; the other operations' pairs built as identify builds them)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from circuits.data.pairs import PromptPair
from circuits.explain.attention import AttentionRoles, AttentionViews, attention_html, attention_roles
from circuits.explain.config import RolesConfig, ViewsConfig
from circuits.identify.result import IdentifyResult
from circuits.identify.source import model_for, pairs_of, resolved, source_result
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
    page = attention_html(model, prompts, heads, title="Key heads (Figures 7, 16)", last_tokens=config.last_tokens)
    return AttentionViews(config, heads, [p.reference for p in prompts], page)


def run_roles(config: RolesConfig, out: str | Path, *, model: Model | None = None,
              progress: bool = True) -> AttentionRoles:
    """The ``circuits attention`` job: Figure 5 saved in ``out`` (``data.json``, ``figure.html``)."""
    from circuits.identify.source import save

    config = resolved(config)
    model = model_for(config, model)
    made = source_result(config, model, progress=progress)
    result = roles_result(model, made, config, lambda op: pairs_of(config, op, model, made))
    save(result, out)
    return result


def run_views(config: ViewsConfig, out: str | Path, *, model: Model | None = None,
              progress: bool = True) -> AttentionViews:
    """The ``circuits attention-views`` job: the views saved in ``out`` (``data.json``, and the page itself as
    ``figure.html``)."""
    config = resolved(config)
    model = model_for(config, model)
    made = source_result(config, model, progress=progress)
    result = views_result(model, made, config, lambda op: pairs_of(config, op, model, made))
    result.save(out)
    return result
