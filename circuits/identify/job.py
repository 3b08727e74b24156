"""The identify job: build prompt pairs, sweep every head and MLP, pick the key components (Section 4.1).

:func:`identify` returns an :class:`~circuits.identify.result.IdentifyResult` for one task;
:func:`run` (``run(config, out)``, the job's one entry point) writes one folder per task
(:func:`task_folders` names them), and for ``--task all`` the four operations one by one
(each in its own sub-folder, skipped when already finished with the same config, so an interrupted run
resumes) and then, in ``all/``, the four pooled: pairs drawn evenly from the four with the per-pair values their
sweeps already computed (:meth:`~circuits.patching.engines.end_sweep.SweepResult.pool`; no model runs).

Under ``torchrun`` every rank runs the job: rank 0 builds the prompt pairs and hands them to the others (the filter
on the model's own answers must agree exactly), the sweep splits its work items across ranks and gathers them
(:func:`circuits.patching.engines.end_sweep.sweep`), and rank 0 alone writes.
"""

from __future__ import annotations

import random
import sys
import time
import warnings
from pathlib import Path
from collections.abc import Callable
from typing import Any

import torch
from circuits.models.backend import Model

from circuits import distributed as D
from circuits.config import same_config
from circuits.data.answers import at_answer_position, check_answer_position
from circuits.data.pair_config import WHOLE_ANSWER, answer_position
from circuits.data.pairs import PairSet, Pairs, PromptPair, build_pairs, counterfactual_stats
from circuits.data.templates import OPERATIONS
from circuits.identify.config import IdentifyConfig
from circuits.identify.circuit_graph import resolve_receivers
from circuits.patching.engines.edge_sweep import check_edges, sweep_edges
from circuits.models.forward import EndRecord
from circuits.patching.core.end_layers import reference_end_names
from circuits.patching.core.metrics import PROB_METRICS
from circuits.patching.engines.end_sweep import SweepResult, all_components, sweep
from circuits.patching.engines.end_sweep_answers import sweep_answer
from circuits.identify.result import IdentifyResult
from circuits.identify.validity import ValidityWarning, refuse_untrusted
from circuits.patching.core.ranking import KeyRule
from circuits.io import read_json
from circuits.models.backend import check_dtype
from circuits.models.fingerprint import weights_fingerprint
from circuits.models.loading import load_model
from circuits.results import MARKER
from circuits.types import Component, Receiver


def identify(
    model: Model, pairs: Pairs | None = None, config: IdentifyConfig | None = None, *,
    progress: bool = True, warn: bool = True, refuse: bool = True, **kwargs: Any,
) -> IdentifyResult:
    """Sweep ``pairs`` (built from ``config`` when not given) and keep what picks the key components.

    ``config`` fields may be given as keywords instead: ``identify(model, task="addition", n_pairs=32)``. A result
    past a hard validity threshold (:mod:`circuits.identify.validity`) is refused in the job's one line
    (:class:`~circuits.identify.validity.Untrusted`, a ``ValueError``), as the command line refuses it, unless
    ``force=True`` (``config.force``, ``--force``); past a soft one (or forced) it comes back with a
    :class:`ValidityWarning` (``warn``) and its lines in ``result.validity()``. ``refuse=False``: never refused (for a
    caller that checks the result itself, as the job does with the task in its line).
    """
    config = (config.replace(**kwargs) if kwargs else config) if config is not None else IdentifyConfig(**kwargs)
    start = time.perf_counter()
    stats: dict[str, Any] = {}
    if config.receivers and not config.receivers.strip().lower().startswith("top"):
        receivers = Receiver.parse_many(config.receivers)  # checked before the sweep, not after it
        check_edges(model, [c for c in all_components(model) if c.layer < max(r.layer for r in receivers) + 1], receivers)
    built = pairs is None
    position = answer_position(config.answer_position)
    # Filtering runs each candidate's reference prompt; the sweep reads the kept ones' END activations from that pass
    # instead of running them again (one process, path patching at the answer's first token).
    record = (EndRecord(reference_end_names(model), int(config.memory_mb * 2**20))
              if built and config.mode == "path" and position == 0 and not D.is_distributed() else None)
    if built:  # the sweep runs the counterfactual prompts itself: their statistics come from it (below)
        check_answer_source(config)
        pairs = D.on_main(lambda: build_pairs(model, config.pair_config(), check_counterfactual=False,
                                              progress=progress, record=record))
    if isinstance(pairs, PairSet):
        stats = pairs.stats()
        pairs = pairs.pairs
    pairs = list(pairs)
    check_answer_position(pairs, position)  # one line, before the sweep
    rule = KeyRule.parse(config.key_rule)
    prob = True if config.prob == "all" or rule.metric in PROB_METRICS or position == WHOLE_ANSWER else (
        lambda swept: key_components(swept, rule))
    if position == WHOLE_ANSWER:  # one sweep per answer position, joined (end_sweep_answers); the pairs as given
        result = sweep_answer(model, pairs, config.mode, WHOLE_ANSWER, memory_mb=config.memory_mb,  # type: ignore[arg-type]
                              progress=progress, prob=True)
    else:  # position k: the pairs read at END + k, saved so (a later job on them reads the same token)
        pairs = at_answer_position(pairs, position, model.tokenizer)
        result = sweep(model, pairs, config.mode, memory_mb=config.memory_mb, progress=progress,  # type: ignore[arg-type]
                       prob=prob, record=record)
    record = None  # its rows freed before the edges below
    if built and stats.get("per_template"):
        b = result.baseline
        counterfactual_stats(pairs, b.cf_answer == b.answer, b.cf_prob, stats["per_template"])
        stats.update(counterfactual_accuracy=float((b.cf_answer == b.answer).float().mean()),
                     counterfactual_answer_prob=float(b.cf_prob.mean()))
    out = IdentifyResult(config, pairs, result, stats, time.perf_counter() - start, weights=weights_fingerprint(model))
    if config.receivers:  # edges into the chosen receivers (path patching to a receiver, identify.circuit_graph)
        out.edges = sweep_edges(model, pairs, resolve_receivers(config.receivers, out), memory_mb=config.memory_mb,
                                progress=progress)
        out.seconds = time.perf_counter() - start
    if refuse:
        refuse_untrusted(out.validity(), config.force, "identify")
    if warn and out.validity().lines():
        warnings.warn(f"identify on {len(pairs)} pairs: " + "; ".join(out.validity().lines()), ValidityWarning,
                      stacklevel=2)
    return out


def check_answer_source(config: IdentifyConfig) -> None:
    """A later answer position needs answers of several tokens, which only a pairs file gives (the templates keep
    one-token answers): one line, before the model loads."""
    position = answer_position(config.answer_position)
    if position != 0 and not config.pairs_file:
        raise ValueError(f"--answer-position {position}: the task's templates give one-token answers only; give "
                         '--pairs-file with answers of several tokens (a line such as {"prompt": "7 + 5 = ", '
                         '"counterfactual": "7 @ 5 = ", "answer": "12"})')


def key_components(swept: SweepResult, rule: KeyRule) -> list[Component]:
    """The heads and MLPs ``rule`` selects in ``swept``."""
    s = swept.scores(rule.metric)
    return [Component.of(h) for h, _ in s.key(rule)] + [c for c, _ in s.key(rule, "mlps")]


def finished(folder: Path, config: IdentifyConfig) -> bool:
    """True when ``folder`` holds a finished identify result made by the same config (for resuming)."""
    if not (folder / "config.json").is_file() or not (folder / MARKER).is_file():
        return False
    try:
        return same_config(read_json(folder / "config.json"), config)
    except ValueError:
        return False


def task_folders(config: IdentifyConfig, out: str | Path) -> dict[str, Path]:
    """The folder :func:`run` writes for each task: ``out`` itself, or for ``--task all`` one sub-folder per operation
    and ``all/`` for the pooled result."""
    out = Path(out)
    if config.task != "all":
        return {config.task: out}
    return {**{t: out / t for t in OPERATIONS}, "all": out / "all"}


def run(config: IdentifyConfig, out: str | Path, *, model: Model | None = None,
        progress: bool = True, n_devices: int = 1) -> IdentifyResult:
    """The ``circuits identify`` job: the result of ``config.task`` saved in ``out`` (for ``--task all`` each
    operation's in ``out/<operation>`` and the pooled one, returned, in ``out/all``; see :func:`task_folders`).
    Finished folders with the same config are reused (resume). ``n_devices``: spread a model too big for one GPU over
    that many (each rank's own GPUs under torchrun)."""
    out = Path(out)
    check_answer_source(config)
    if model is None:  # before any work: a dtype this machine cannot run is one line
        check_dtype(config.dtype, "cuda" if torch.cuda.is_available() else "cpu")
    load = lambda: load_model(config.model, dtype=config.dtype, n_devices=n_devices,  # noqa: E731
                              **({"device": D.use_devices(n_devices)} if D.is_distributed() else {}))
    tasks = list(OPERATIONS) if config.task == "all" else [config.task]
    folders = task_folders(config, out)
    from circuits.viz.page import asset_home, shared_asset

    if config.task == "all" and D.is_main():  # one plotly.js in --out that every task's heads.html loads
        out.mkdir(parents=True, exist_ok=True)
        shared_asset("plotly", out / "index.html", default=out)
    with asset_home(out):
        return _run_tasks(config, out, tasks, folders, model, load, progress)


def _run_tasks(config: IdentifyConfig, out: Path, tasks: list[str], folders: dict[str, Path], model: Model | None,
               load: Callable[[], Model], progress: bool) -> IdentifyResult:
    results: dict[str, IdentifyResult] = {}
    for task in tasks:
        cfg = config.for_task(task)
        folder = folders[task]
        if D.on_main(lambda: finished(folder, cfg)):
            _say(f"[{task}] already done with this config: {folder} (resumed)")
            results[task] = D.on_main(lambda: IdentifyResult.load(folder))
            continue
        model = model or load()
        results[task] = identify(model, config=cfg, progress=progress, warn=False, refuse=False)
        refuse_untrusted(results[task].validity(), cfg.force, f"[{task}] identify")  # every rank: the same verdict
        if D.is_main():
            results[task].save(folder)
            _print_summary(task, results[task], folder)
    if config.task == "all":
        # Figure 2 pools the four operations: an even draw of pairs from each.
        folder = out / "all"
        if D.on_main(lambda: finished(folder, config)):
            _say(f"[all] already done with this config: {folder} (resumed)")
            result = D.on_main(lambda: IdentifyResult.load(folder))
        else:
            start = time.perf_counter()
            rng = random.Random(config.seed)
            per = max(1, config.n_pairs // len(tasks))
            picks = {t: rng.sample(range(len(results[t].pairs)), min(per, len(results[t].pairs))) for t in tasks}
            pooled: list[PromptPair] = [results[t].pairs[i] for t in tasks for i in picks[t]]
            subs = [results[t] for t in tasks]
            if all(r.sweep is not None for r in subs):
                # Each pair's patched values depend on that pair alone: pool the operations' sweeps, run nothing.
                swept = SweepResult.pool([results[t].sweep.select(picks[t]) for t in tasks])  # type: ignore[union-attr]
                result = IdentifyResult(config, pooled, swept, {}, time.perf_counter() - start)
                result.pooled_from = {folders[t].name: picks[t] for t in tasks}  # saved as pooled.json, no copies
            else:  # an operation's result saved without per-pair values (an older version): sweep the pooled pairs
                model = model or load()
                result = identify(model, pooled, config, progress=progress, warn=False, refuse=False)
            result.pair_stats = {
                "accuracy": sum(r.pair_stats.get("accuracy") or 0 for r in subs) / len(subs),
                "mean_answer_prob": sum(r.pair_stats.get("mean_answer_prob") or 0 for r in subs) / len(subs),
            }
            result.per_task = {t: {k: r.summary()[k] for k in ("accuracy", "mean_answer_prob", "counterfactual_accuracy",
                                                               "counterfactual_answer_prob", "n_pairs")}
                               for t, r in results.items()}
            if D.is_main():
                result.save(folder)
                _print_summary("all", result, folder)
    D.barrier()  # every rank returns once rank 0 has written
    return results[config.task] if config.task != "all" else result


def _say(text: str) -> None:
    if D.is_main():
        print(text)


def _print_summary(task: str, result: IdentifyResult, folder: Path) -> None:
    s = result.summary()
    key = result.key_heads()
    unsure = [getattr(k, "uncertain", False) for k in key]  # KeyHead: its interval reaches the rule's threshold
    heads = ", ".join(f"{h} ({e:+.3f}{', uncertain' if u else ''})" for (h, e), u in zip(key[:8], unsure))
    if len(key) > 8:
        heads += f", and {len(key) - 8} more ({sum(unsure[8:])} of them uncertain)"
    acc = s["accuracy"]
    at = result.config.answer_position
    at = "" if at == "0" else " (the whole answer)" if at == "whole" else f" (answer token {at}, at END + {at})"
    print(f"[{task}] {s['n_pairs']} pairs{at}, accuracy before filtering {acc:.0%}, " if acc is not None
          else f"[{task}]{at} ",
          f"counterfactual keeps the answer {s['counterfactual_accuracy']:.0%}; {len(key)} key heads by "
          f"{result.key_rule}: {heads or 'none'}; pairs and sweep {result.seconds:.0f} s -> {folder / 'heads.html'}",
          sep="")
    if "key_rule_sensitivity" in s:
        from circuits.identify.sensitivity import describe

        print(f"[{task}] {describe(s['key_rule_sensitivity'])}")
    for line in result.validity().lines():  # the same lines as summary.json's "warnings" and the report's
        print(f"[{task}] warning: {line}", file=sys.stderr)
