"""The per-position sweep as a job and a saved result: ``circuits positions`` (Stolfo et al. 2023's information flow).

A saved folder holds ``summary.json`` (effects by layer, head and offset from END in every metric, each pair's END
and first differing position; ``aligned``: the figure's columns by token role, each pair's offset in each and the
effects per column, :mod:`circuits.beyond.positions.align`), ``positions.pt`` (the per-pair patched values),
``pairs.jsonl`` (with each pair's token roles), ``flow.html`` (the figure), ``config.json`` and ``circuits.json``. Pairs
that mark no token role are refused before the sweep (their positions cannot be aligned)."""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from dataclasses import replace
from pathlib import Path
from circuits.models.backend import Model
from circuits.models.loading import load_model
from circuits.data.answers import at_answer_position
from circuits.data.pairs import FewerPairsWarning, build_pairs
from circuits.data.templates import templates_for
from circuits.patching.engines.position_sweep import sweep_positions
from circuits.beyond.positions.align import check_alignable
from circuits.beyond.positions.config import PositionConfig
from circuits.beyond.positions.result import PositionResult, token_strings
from circuits.identify.validity import check_job


def run(config: PositionConfig, out: str | Path, *, model: Model | None = None,
                  progress: bool = True) -> PositionResult:
    """The ``circuits positions`` job."""
    model = model or load_model(config.model, dtype=config.dtype)
    if config.template and not config.pairs_from:
        # Pairs of that template only, so --pairs of them are swept (not --pairs drawn over every template, filtered).
        templates_for(config.template)  # an unknown template id is one ValueError naming the accepted forms
        if config.task != "all" and not config.template.startswith(f"{config.task}/"):
            raise ValueError(f"--template {config.template} is not a template of --task {config.task}; accepted: "
                             f"{', '.join(t.id for t in templates_for(config.task))}")
        built = build_pairs(model, replace(config.pair_config(), task=config.template), progress=progress)
        pairs, stats = built.pairs, built.stats()
    else:
        pairs, stats = config.load_pairs(model)
    if config.template and config.pairs_from:
        every = pairs
        pairs = [p for p in every if p.template_id == config.template]
        if not pairs:
            raise ValueError(f"No pairs of template {config.template!r} in {config.pairs_from}; templates there: "
                             f"{', '.join(sorted({p.template_id for p in every}))}")
        if len(pairs) < len(every):
            warnings.warn(f"{len(pairs)} of the {len(every)} pairs from {config.pairs_from} are of template "
                          f"{config.template} (only those align token for token); sweeping {len(pairs)}",
                          FewerPairsWarning, stacklevel=2)
    # Answer token k (issue 42): both prompts teacher-forced with its first k tokens, END moved to END + k, and the
    # offsets counted back from there; a pair whose answer is too short is one line before the sweep.
    pairs = at_answer_position(pairs, config.answer_position, model.tokenizer)
    # Columns by token role (issue 40): a pair that marks no role cannot be aligned with the others; one line now
    check_alignable(pairs, str(config.pairs_file or config.pairs_from or config.task))
    # Identify's checks on these pairs before the sweep (issue 40): past a hard threshold refused without --force
    check_job(model, pairs, stats, config, "positions")
    start = time.perf_counter()
    sweep = sweep_positions(model, pairs, offsets=config.offsets or None, memory_mb=config.memory_mb, progress=progress)
    result = PositionResult(config, pairs, sweep, time.perf_counter() - start)
    result.tokens = token_strings(model, result.representative())
    result.save(out)
    return result


def printout(args: argparse.Namespace, config: PositionConfig, r: PositionResult, seconds: float) -> None:
    print(f"[{config.template or config.task}] {len(r.pairs)} pairs, every head and MLP at every position in "
          f"{seconds:.0f} s (the sweep {r.seconds:.0f} s) -> {args.out}/flow.html")
    for line in r.validity().lines():  # identify's checks on these pairs (summary.json's "warnings")
        print(f"[{config.template or config.task}] warning: {line}", file=sys.stderr)
