"""How stable the key-head set is: across seeds (new operands, templates and words) and across template forms
(equation, statement, question), as Jaccard overlaps |A & B| / |A | B|, per operation.

Seeds: one identify result per seed, made exactly as ``circuits identify`` makes it (and reused when already saved
with the same config). Forms: the seed-0 sweep restricted to the pairs of each form -- its per-pair values are kept,
so no model runs -- and the key rule applied to each subset."""

from __future__ import annotations

import argparse

from pathlib import Path
from typing import Any
from circuits.data.templates import OPERATIONS, templates_for
import circuits.identify.job as identify_job
from circuits.io import output_lock
from circuits.results import check_output
from circuits.identify.result import IdentifyResult
from circuits.models.loading import load_model
from circuits.patching.core.ranking import KeyRule
from circuits.types import Head
from circuits.beyond.stability.config import StabilityConfig
from circuits.beyond.stability.result import StabilityResult


def form_key_heads(result: IdentifyResult, rule: str | KeyRule | None = None) -> dict[str, list[Head]]:
    """Key heads found on the pairs of each template form alone (from the saved per-pair values)."""
    if result.sweep is None:
        raise ValueError("This identify result keeps no per-pair values (no sweep.pt); rerun circuits identify")
    forms = {t.id: t.form for op in OPERATIONS for t in templates_for(op)}
    by_form: dict[str, list[int]] = {}
    for i, p in enumerate(result.pairs):
        by_form.setdefault(forms.get(p.template_id, "custom"), []).append(i)
    rule = result.key_rule if rule is None else KeyRule.parse(rule)
    return {f: [h for h, _ in result.sweep.select(idx).scores(rule.metric).key(rule)] for f, idx in sorted(by_form.items())}


def stability(results: dict[str, dict[int, IdentifyResult]], config: StabilityConfig | None = None) -> StabilityResult:
    """From identify results per operation and seed: key heads per seed, and per form of the first seed's pairs."""
    by_seed = {op: {s: [h for h, _ in r.key_heads()] for s, r in seeds.items()} for op, seeds in results.items()}
    by_form = {op: form_key_heads(seeds[min(seeds)]) for op, seeds in results.items()}
    return StabilityResult(config if config is not None else StabilityConfig(), by_seed, by_form)


def run(config: StabilityConfig, out: str | Path, *, model: Any = None, progress: bool = False) -> StabilityResult:
    """Identify results for every operation and seed (made when missing, under ``config.identify_dir`` or else
    ``<out>/identify``), then :func:`stability`, saved in ``out`` beside them.

    Every identify folder to be made is checked before any work (:func:`~circuits.results.check_output`: it may
    hold only an identify result's own files) and locked while it is written. ``progress``: the identify runs'
    progress bars."""
    jobs = {(op, seed): (config.identify_config(op, seed), config.folder(op, seed, out))
            for op in config.operations for seed in config.seeds}
    todo = {key: job for key, job in jobs.items() if not identify_job.finished(job[1], job[0])}
    for _, folder in todo.values():
        check_output(folder, "identify")
    results: dict[str, dict[int, IdentifyResult]] = {op: {} for op in config.operations}
    for (op, seed), (icfg, folder) in jobs.items():
        if (op, seed) in todo:
            model = model or load_model(icfg.model, dtype=icfg.dtype)
            with output_lock(folder):
                identify_job.run(icfg, folder, model=model, progress=progress)
        results[op][seed] = IdentifyResult.load(folder)
    result = stability(results, config)
    result.save(out)
    return result


def printout(args: argparse.Namespace, config: StabilityConfig, r: StabilityResult, seconds: float) -> None:
    for op, s in r.summary()["per_operation"].items():
        print(f"  {op}: mean Jaccard across seeds {s['mean_jaccard_seeds']:.2f}, across forms {s['mean_jaccard_forms']:.2f}")
    print(f"-> {args.out}/figure.html")
