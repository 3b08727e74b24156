"""The per-position sweep as a job and a saved result: ``circuits positions`` (Stolfo et al. 2023's information flow).

A saved folder holds ``summary.json`` (effects by layer, head and offset from END in every metric, each pair's END
and first differing position), ``positions.pt`` (the per-pair patched values), ``pairs.jsonl``, ``flow.html`` (the
figure), ``config.json`` and ``circuits.json``."""

from __future__ import annotations

import time
from pathlib import Path
from transformer_lens import HookedTransformer
from circuits.models.loading import load_model
from circuits.patching.positions import sweep_positions
from circuits.beyond.positions.config import PositionConfig
from circuits.beyond.positions.result import PositionResult, token_strings


def run(config: PositionConfig, out: str | Path, model: HookedTransformer | None = None,
                  progress: bool = True) -> PositionResult:
    """The ``circuits positions`` job."""
    model = model or load_model(config.model, dtype=config.dtype)
    pairs, _ = config.load_pairs(model)
    if config.template:
        pairs = [p for p in pairs if p.template_id == config.template]
        if not pairs:
            raise ValueError(f"No pairs of template {config.template!r}; templates here: "
                             f"{', '.join(sorted({p.template_id for p in config.load_pairs(model)[0]}))}")
    start = time.perf_counter()
    sweep = sweep_positions(model, pairs, offsets=config.offsets or None, memory_mb=config.memory_mb, progress=progress)
    result = PositionResult(config, pairs, sweep, time.perf_counter() - start)
    result.tokens = token_strings(model, result.representative())
    result.save(out)
    return result
