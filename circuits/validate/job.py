"""The validate jobs: ``circuits knockout`` (Figure 3) and ``circuits transfer`` (Figure 4 and the MMLU check).

``knockout``: accuracy and answer probability after mean-ablating the first k heads of an identify result's ranking,
against k random heads (several seeds); the mechanism is :func:`circuits.validate.knockout.knockout_curve`.
``transfer``: the key heads found on the templates knocked out on SVAMP, multi-digit sums, decimals and time spans
(next-token accuracy) and MMLU (humanities letter accuracy), before and after, as many random heads as a control; the
mechanism is :func:`circuits.validate.transfer.transfer_knockout` and the knockout's mean values.

:func:`knockout_result` and :func:`transfer_result` compute the results from an identify result
(``experiments/fig3_knockout.py`` and ``fig4_transfer.py`` call them on their shared identify result);
:func:`run_knockout` and :func:`run_transfer` are the jobs' entry points (``--heads-from``, or identify made first),
and :func:`print_knockout` and :func:`print_transfer` what the commands say when they finish."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from circuits.data.benchmarks import load_svamp_all, sample_mmlu
from circuits.data.pairs import PromptPair
from circuits.identify.result import IdentifyResult
from circuits.identify.source import pairs_of, run_from_identify
from circuits.models.backend import Model
from circuits.validate.config import KnockoutConfig, TransferSets
from circuits.validate.knockout import KnockoutResult, compute_means, knockout_curve, random_order
from circuits.validate.transfer import (TransferResult, mmlu_accuracy, mmlu_items, synthetic_set,
                                        transfer_knockout, with_intervals, word_problem_set)


def knockout_result(model: Model, made: IdentifyResult, config: KnockoutConfig,
                    pairs: Sequence[PromptPair] | None = None) -> KnockoutResult:
    """Figure 3 on ``pairs`` (default: ``made``'s): ``made``'s ranking by its key rule's metric knocked out k heads at
    a time (``config.ks`` no longer than the ranking), against random orders (``config.seeds``)."""
    pairs = list(made.pairs if pairs is None else pairs)
    ranking = [h for h, _ in made.scores(None).ranked(part="heads")]
    if max(config.ks) > len(ranking):  # never dropped silently (the command checks this before any work)
        raise ValueError(f"--ks {','.join(map(str, config.ks))}: each value must be at most {len(ranking)} (the heads "
                         f"ranked), got {max(config.ks)}")
    curve = knockout_curve(model, pairs, ranking, list(config.ks), config.seeds)
    return KnockoutResult(config, curve, config.task, len(pairs))


def transfer_result(model: Model, made: IdentifyResult, config: TransferSets,
                    pairs: Sequence[PromptPair] | None = None) -> TransferResult:
    """Figure 4: the top ``config.n_key_heads`` heads of ``made`` and as many random heads knocked out (mean
    ablation, means pooled over ``pairs``, default ``made``'s) on each transfer set and on MMLU."""
    from circuits.data.benchmarks import resolve_data_dir

    config = config.replace(data_dir=str(resolve_data_dir(config.data_dir)))  # saved as read (it said null)
    heads = made.top_heads(config.n_key_heads)
    control = random_order(model.cfg.n_layers, model.cfg.n_heads, config.random_seed)[: config.n_key_heads]
    means = compute_means(model, list(made.pairs if pairs is None else pairs), pooled=True)
    tok = model.tokenizer
    sets = {"svamp": word_problem_set(tok, load_svamp_all(config.data_dir), config.n, shots=config.svamp_shots,
                                      seed=config.seed)}
    for task in ("multi_digit", "decimal", "time_span"):
        sets[task] = synthetic_set(tok, task, config.n, seed=config.seed)
    res = transfer_knockout(model, sets, means, heads)
    ctrl = transfer_knockout(model, sets, means, control)
    for k in res:
        res[k]["accuracy_random_heads"] = ctrl[k]["accuracy_after"]
    mm = mmlu_items(tok, sample_mmlu(n=config.n_mmlu, seed=config.seed, data_dir=config.data_dir))
    res["mmlu_humanities"] = {"n": len(mm), "accuracy_before": mmlu_accuracy(model, mm, means),
                              "accuracy_after": mmlu_accuracy(model, mm, means, heads),
                              "accuracy_random_heads": mmlu_accuracy(model, mm, means, control)}
    res = {k: with_intervals(v) for k, v in res.items()}  # Wilson intervals over each set's items
    return TransferResult(config, res, heads, control, {k: v[0].reference[-120:] for k, v in sets.items() if v})


def run_knockout(config: KnockoutConfig, out: str | Path, *, model: Model | None = None,
                 progress: bool = True) -> KnockoutResult:
    """The ``circuits knockout`` job: Figure 3 saved in ``out`` (``data.json``, ``figure.html``), on the identify
    result's pairs or the job's own (``--pairs``, ``--pairs-file``, ... with ``--heads-from``: :func:`pairs_of`)."""
    return run_from_identify(config, out, lambda m, made, c: knockout_result(m, made, c, pairs_of(c, c.task, m, made)),
                             model=model, progress=progress)


def run_transfer(config: TransferSets, out: str | Path, *, model: Model | None = None,
                 progress: bool = True) -> TransferResult:
    """The ``circuits transfer`` job: Figure 4 saved in ``out`` (``data.json``, ``figure.html``)."""
    return run_from_identify(config, out, lambda m, made, c: transfer_result(m, made, c, pairs_of(c, c.task, m, made)),
                             model=model, progress=progress)


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.0f}%"


def _pct_ci(x: float | None, ci: tuple[float, float] | None) -> str:
    """A share with its interval: ``62% [31-86]``."""
    if x is None:
        return "n/a"
    return _pct(x) + ("" if ci is None or ci[0] != ci[0] else f" [{100 * ci[0]:.0f}-{100 * ci[1]:.0f}]")


def _heads(heads: Any) -> str:
    return ", ".join(f"{h[0]}.{h[1]}" for h in heads)


def print_knockout(args: argparse.Namespace, config: KnockoutConfig, r: KnockoutResult, seconds: float) -> None:
    c = r.curve
    i = c.ks.index(max(c.ks))
    rnd = sum(row[i] for row in c.random_accuracy) / max(1, len(c.random_accuracy))
    g = c.gap() if c.n_pairs else None  # the key-vs-random gap at the largest k, its bootstrap interval over pairs
    where = "" if g is None else "above 0" if g["low"] > 0 else "holds 0: not told apart from random heads on these pairs"
    gap = "" if g is None else (f"; gap {g['gap'] * 100:+.1f} points ({g['level']:.0%} bootstrap interval over pairs "
                                f"{g['low'] * 100:+.1f} to {g['high'] * 100:+.1f}, {where})")
    print(f"[{r.task}] {r.n_pairs} pairs in {seconds:.0f} s: accuracy {_pct(c.effect_accuracy[0])} with no head out; "
          f"with {c.ks[i]} heads out {_pct(c.effect_accuracy[i])} for the top heads ({_heads(c.ranking[:3])}, ...), "
          f"{_pct(rnd)} for random ones{gap} -> {args.out}/figure.html")


def print_transfer(args: argparse.Namespace, config: TransferSets, r: TransferResult, seconds: float) -> None:
    from circuits.types import top_heads_label

    ci = r.intervals()
    level = next((v["ci_level"] for v in r.results.values() if "ci_level" in v), 0.95)
    print(f"{top_heads_label(len(r.key_heads), r.config.key_rule)} out ({_heads(r.key_heads)}), {seconds:.0f} s "
          f"(accuracy [{level:.0%} Wilson interval over the set's n items]):")
    for name, v in r.results.items():
        c = ci[name]
        print(f"  {name:>16}: {_pct_ci(v['accuracy_before'], c.get('accuracy_before'))} -> "
              f"{_pct_ci(v['accuracy_after'], c.get('accuracy_after'))} "
              f"(random heads {_pct_ci(v.get('accuracy_random_heads'), c.get('accuracy_random_heads'))}, "
              f"n={v.get('n', '?')})")
    print(f"-> {args.out}/figure.html")
