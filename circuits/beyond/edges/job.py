"""The edges job (``circuits edges``): path patching from every earlier head and MLP into chosen receivers at END,
on a saved identify result's pairs, as a circuit graph: senders -> key heads -> MLPs -> logits.

:func:`run` saves an :class:`~circuits.beyond.edges.result.EdgeResult` (every sender into every receiver, each
receiver's own effect on the logits from the identify sweep). ``circuits identify --receivers`` measures the same
edges inside the identify run and keeps them in the identify result (``edges.pt``, ``circuit.html``);
:func:`~circuits.identify.circuit_graph.resolve_receivers` turns ``topK`` into components for both."""

from __future__ import annotations

import argparse

from pathlib import Path
from typing import Any

from circuits.beyond.edges.config import EdgesConfig
from circuits.beyond.edges.result import EdgeResult
from circuits.identify.circuit_graph import receiver_effects_of, resolve_receivers



def run(config: EdgesConfig, out: str | Path, *, model: Any = None, progress: bool = True) -> EdgeResult:
    """The ``circuits edges`` job: the edges into ``config.receivers`` on the pairs of the identify result in
    ``config.heads_from`` (whose config replaces the identify fields), saved in ``out`` (``summary.json``,
    ``pairs.jsonl``, ``edges.pt``, ``circuit.html``). Each receiver's own effect, and ``topK``'s ranking, use the
    identify result's key-rule metric, as ``experiments/fig_circuit.py`` does."""
    from circuits.identify.result import load_identify
    from circuits.identify.source import pairs_of
    from circuits.models.loading import load_model

    if not config.heads_from:
        raise ValueError("circuits edges measures edges on a saved identify result: pass --heads-from DIR (or run "
                         "circuits identify --receivers ..., which measures them in the identify run)")
    made = load_identify(config.heads_from)
    config = config.with_identify(made.config)
    model = model if model is not None else load_model(config.model, dtype=config.dtype)
    result = edges_result(model, made, config, progress=progress, pairs=pairs_of(config, config.task, model, made))
    result.save(out)
    return result


def edges_result(model: Any, made: Any, config: EdgesConfig, *, progress: bool = True,
                 pairs: list[Any] | None = None) -> EdgeResult:
    """The edges into ``config.receivers`` on ``pairs`` (default ``made``'s; ``made``: an identify result), each
    receiver's own effect by ``made``'s key-rule metric, from ``made``'s sweep (on its pairs), as is ``topK``'s
    ranking (``experiments/fig_circuit.py`` calls it on its shared identify result)."""
    from circuits.patching.engines.edge_sweep import sweep_edges

    pairs = list(made.pairs if pairs is None else pairs)
    receivers = resolve_receivers(config.receivers, made)
    edges = sweep_edges(model, pairs, receivers, memory_mb=config.memory_mb, progress=progress)
    metric = made.key_rule.metric
    return EdgeResult(config, pairs, edges, receiver_effects_of(made, receivers, metric), metric)


def printout(args: argparse.Namespace, config: EdgesConfig, r: EdgeResult, seconds: float) -> None:
    print(f"[{config.task}] edges into {', '.join(r.receiver_effects)} on {len(r.pairs)} pairs, {seconds:.0f} s "
          f"-> {args.out}/circuit.html")
