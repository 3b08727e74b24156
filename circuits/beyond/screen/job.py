"""The attribution screen audited by the exact engines: rank every node by its first-order estimate, re-measure
the top ones exactly, and say what the estimate missed.

:func:`screen` runs :func:`~circuits.patching.engines.attribution.attribute` (every head, MLP and neuron at every position),
then ``verify``: the top-N heads/MLPs and the top-N neurons of the screen are re-measured exactly -- at END by the
END engine (:func:`~circuits.patching.engines.end_sweep.sweep`, :func:`~circuits.patching.engines.neuron_sweep.sweep_neurons`), elsewhere
by the per-position engine (:func:`~circuits.patching.engines.position_sweep.sweep_positions`) -- and both numbers are kept.
With ``audit`` the END engine also measures every head and MLP exactly, which gives the table no peer publishes:
the rank correlation of screen and exact effects at END, how many of the exact top-10 and top-5% the screen's
top-N misses (N = 10, 20, 50), and the largest misses with why -- the error of the estimate split into the part
already there when every later head is frozen (MLPs and norms: path mode) and the rest (later attention)."""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from torch import Tensor

from circuits.models.backend import Model
from circuits.data.answers import at_answer_position
from circuits.data.pairs import PairSet, PromptPair
from circuits.identify.validity import check_job, print_warnings
from circuits.models.loading import load_model
from circuits.patching.engines.attribution import Attribution, attribute
from circuits.patching.engines.end_sweep import sweep
from circuits.patching.engines.neuron_sweep import sweep_neurons
from circuits.patching.engines.position_sweep import sweep_positions
from circuits.patching.core.scores import Scores
from circuits.types import Component, Head, Neuron
from circuits.beyond.screen.config import ScreenConfig
from circuits.beyond.screen.result import audit_table, ScreenResult


def node_name(sender: Component | Neuron, offset: int) -> str:
    """``"20.8@0"``: a sender at ``offset`` positions before END."""
    return f"{sender}@{offset}"


def ranked_nodes(heads: Tensor, mlps: Tensor, sign: int) -> list[tuple[Component, int, float]]:
    """Every (head or MLP, offset) by the metric's important direction, NaN dropped: heads ``[layer, head, offset]``
    and MLPs ``[layer, offset]`` ranked together (:meth:`~circuits.patching.core.scores.Scores.ranked`)."""
    s = Scores({"heads": heads, "mlps": mlps}, "screen", sign, offsets=True)
    return [(Component("head", *c) if isinstance(c, Head) else c, k, v) for (c, k), v in s.ranked(part=("heads", "mlps"))]


def ranked_neurons(neurons: Tensor, sign: int, n: int) -> list[tuple[Neuron, int, float]]:
    """The ``n`` most important (neuron, offset) of ``neurons`` ``[layer, d_mlp, offset]``."""
    L, D, K = neurons.shape
    s = Scores({"neurons": neurons.reshape(L * D, K)}, "screen", sign, offsets=True,
               labels={"neurons": [Neuron(l, d) for l in range(L) for d in range(D)]})
    return [(c, k, v) for (c, k), v in s.ranked(n, "neurons")]


def verify(model: Model, pairs: Sequence[PromptPair], att: Attribution, n: int,
           neuron_effects: Tensor | None, head_effects: Tensor, mlp_effects: Tensor, memory_mb: float = 1024,
           progress: bool = False) -> list[dict[str, Any]]:
    """The screen's top-``n`` heads/MLPs and top-``n`` neurons, each with its screen estimate and its exact value."""
    m = att.metric
    nodes: list[tuple[Component | Neuron, int, float]] = list(ranked_nodes(head_effects, mlp_effects, m.sign)[:n])
    if neuron_effects is not None:
        nodes += ranked_neurons(neuron_effects, m.sign, n)
    exact: dict[tuple, float] = {}
    end_comps = [s for s, k, _ in nodes if k == 0 and isinstance(s, Component)]
    if end_comps:
        end = sweep(model, pairs, att.mode, components=end_comps, memory_mb=memory_mb, progress=progress).scores(m)
        exact.update({(c, 0): end.value(c) for c in end_comps})
    end_neurons = [s for s, k, _ in nodes if k == 0 and isinstance(s, Neuron)]
    if end_neurons:
        ns = sweep_neurons(model, pairs, att.mode, neurons=end_neurons, prob=m.name == "prob", memory_mb=memory_mb,
                           progress=progress)
        by_neuron = ns.scores(m)
        exact.update({(s, 0): by_neuron.value(s) for s in end_neurons})
    elsewhere = [(s, k) for s, k, _ in nodes if k != 0]
    if elsewhere:
        ps = sweep_positions(model, pairs, nodes=elsewhere, memory_mb=memory_mb, progress=progress)
        at = ps.scores(m)
        exact.update({(s, k): at.value(s, k) for s, k in elsewhere})
    return [{"node": node_name(s, k), "sender": str(s), "offset": k, "kind": "neuron" if isinstance(s, Neuron) else s.kind,
             "screen": v, "exact": exact[(s, k)]} for s, k, v in nodes]


def screen(model: Model, pairs: Sequence[PromptPair], config: ScreenConfig | None = None,
           progress: bool = True, *, stats: dict[str, Any] | None = None, refuse: bool = True,
           **kwargs: Any) -> ScreenResult:
    """Screen, verify and (``config.audit``) audit ``pairs`` read at ``config.answer_position``; ``config`` fields may
    be given as keywords. First the pairs' validity checks (:func:`~circuits.identify.validity.check_job`; ``stats``:
    the pairs' statistics, for the accuracy before filtering): a :class:`ValidityWarning` when past a threshold,
    refused past a hard one, as the job refuses, unless ``force=True`` (``config.force``; ``refuse=False``: warn
    only, for a caller that has checked these pairs itself)."""
    config = (config.replace(**kwargs) if kwargs else config) if config is not None else ScreenConfig(**kwargs)
    if stats is None and isinstance(pairs, PairSet):  # built pairs carry their accuracy before filtering
        stats = pairs.stats()
    # Answer token k (issue 42): both prompts teacher-forced with its first k tokens, so END is END + k for every
    # engine below; a pair whose answer is too short is one line before the screen.
    pairs = at_answer_position(list(pairs), config.answer_position, model.tokenizer)
    validity = check_job(model, pairs, stats, config, "screen", refuse)
    seconds: dict[str, float] = {}
    att = attribute(model, pairs, config.metric, mode=config.mode, neurons=config.neurons,  # type: ignore[arg-type]
                    qk_fix=config.qk_fix, grad_drop=config.grad_drop, progress=progress)
    seconds["screen"] = att.seconds
    heads, mlps = att.effect(att.head), att.effect(att.mlp)
    neurons = att.effect(att.neuron) if att.neuron is not None else None
    q = att.effect(att.head_q) if att.head_q is not None else None
    k = att.effect(att.head_k) if att.head_k is not None else None
    t0 = time.perf_counter()
    verified = verify(model, pairs, att, config.verify, neurons, heads, mlps, config.memory_mb, progress) if config.verify else []
    seconds["verify"] = time.perf_counter() - t0
    audit, exact_end = None, {}
    if config.audit:
        t0 = time.perf_counter()
        act = sweep(model, pairs, config.mode, memory_mb=config.memory_mb, progress=progress)  # type: ignore[arg-type]
        exact_end.update(act.scores(att.metric).parts)
        path = None
        if config.mode == "activation":
            p_exact = tuple(sweep(model, pairs, "path", memory_mb=config.memory_mb, progress=progress).scores(att.metric).parts.values())
            p_att = attribute(model, pairs, att.metric, mode="path", neurons=False, qk_fix=False, progress=progress)
            p_screen = (p_att.effect(p_att.head)[..., 0], p_att.effect(p_att.mlp)[..., 0])
            exact_end["path_heads"], exact_end["path_mlps"] = p_exact
            exact_end["path_screen_heads"], exact_end["path_screen_mlps"] = p_screen
            path = (p_screen, p_exact)
        audit = audit_table((heads[..., 0], mlps[..., 0]), (exact_end["heads"], exact_end["mlps"]), att.metric.sign, path)
        if config.grad_drop and att.graddrop:
            gd = audit_table((att.graddrop["head"][..., 0], att.graddrop["mlp"][..., 0]),
                             (exact_end["heads"].abs(), exact_end["mlps"].abs()), 1)
            audit.update({f"graddrop_{k}": v for k, v in gd.items() if k.startswith(("exact_top", "spearman_end"))})
        seconds["audit"] = time.perf_counter() - t0
    return ScreenResult(config, pairs, att.metric.name, config.mode, heads, mlps, q, k, neurons, att.graddrop, verified,
                        audit, exact_end, seconds, _validity=validity)


def run(config: ScreenConfig, out: str | Path, *, model: Model | None = None,
               progress: bool = True) -> ScreenResult:
    """The ``circuits screen`` job: pairs (built or ``--pairs-from``), screen, verify, audit, saved to ``out``."""
    model = model or load_model(config.model, dtype=config.dtype)
    pairs, stats = config.load_pairs(model)
    result = screen(model, pairs, config, progress=progress, stats=stats, refuse=True)
    result.save(out)
    return result


def printout(args: argparse.Namespace, config: ScreenConfig, r: ScreenResult, seconds: float) -> None:
    s = r.summary()
    parts = ", ".join(f"{k} {v:.1f} s" for k, v in r.seconds.items())
    print(f"[{config.task}] screen of {len(r.pairs)} pairs in {seconds:.1f} s ({parts}; the rest: "
          "loading the model and building the pairs)"
          + (f"; Spearman with the exact END engine {s['spearman_end']:.3f}; exact top-10 missed by the screen's "
             f"top-20: {s['exact_top10_missed_at_20']}" if "spearman_end" in s else "") + f" -> {args.out}")
    for v in r.verified[:10]:
        print(f"  {v['node']:>16}  screen {v['screen']:+.4f}  exact {v['exact']:+.4f}")
    if len(r.verified) > 10:
        print(f"  ... and {len(r.verified) - 10} more verified nodes in {args.out}")
    print_warnings(r.validity(), f"[{config.task}]")
