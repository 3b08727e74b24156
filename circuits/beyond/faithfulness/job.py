"""Which ranking gives the most faithful circuit per unit of compute, measured as MIB measures it (issue 24).

For each ranking named in the config, :func:`rank` computes one importance score per node with the library's own
engine (how each is read is in :data:`~circuits.beyond.faithfulness.config.RANKINGS`' comment; every score is
non-negative, larger is more important, and the circuit of size s is the top s percent of the nodes by
:func:`~circuits.patching.core.ranking.order`); :func:`~circuits.patching.circuit_curves.circuit_curve` then keeps each
circuit, ablates everything else (``ablation``: counterfactual as MIB, or mean, or zero) at END or at every position,
and returns f at every size with CPR, CMD and bootstrap intervals. EAP-IG's edge scores (``edges``) are scored at edge
level at END (the same function with ``edges=``). The seconds of each ranking are measured around its engine alone (the model is loaded and the
pairs built before), wall-clock and as this process's CPU time (``cpu_seconds``: what the compute costs on a
machine shared with other work), so the table reads as faithfulness per unit of compute.

The job is resumable: every finished ranking is written to ``<out>/parts/<ranking>.pt`` with the config and pairs
that made it, and a rerun of the same command (or one adding rankings) reuses those and computes the rest."""

from __future__ import annotations

import argparse
import hashlib
import time
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from jaxtyping import Float
from torch import Tensor
from tqdm.auto import tqdm

from circuits.beyond.faithfulness.config import FaithfulnessConfig
from circuits.beyond.faithfulness.result import PARTS, FaithfulnessResult
from circuits.data.pairs import PromptPair
from circuits.io import load_torch, save_torch
from circuits.models.backend import Model
from circuits.models.loading import load_model
from circuits.patching.engines.attribution import readout_of
from circuits.patching.circuit_curves import FaithfulnessCurve, check_edge_model, circuit_curve
from circuits.patching.core.metrics import get_metric


def _per_node(heads: Tensor, mlps: Tensor) -> dict[str, Tensor]:
    """|scores| as float32 on the CPU; a NaN (a node no pair measured) counts as 0."""
    return {"heads": heads.detach().float().cpu().abs().nan_to_num(0.0),
            "mlps": mlps.detach().float().cpu().abs().nan_to_num(0.0)}


def engine_options(ranking: str, config: FaithfulnessConfig) -> dict[str, Any]:
    """What the config sets of an engine's own options: the fields its registry entry names in ``job_options``
    (EAP-IG's steps, grid and edges)."""
    from circuits.patching.engines.registry import ENGINES

    return {option: getattr(config, name) for option, name in ENGINES[ranking].job_options.items()}


def scores_edges(ranking: str, config: FaithfulnessConfig) -> bool:
    """Whether ``ranking``'s engine scores edges in this run (it supports them and ``config.edges``)."""
    from circuits.patching.engines.registry import ENGINES

    return config.edges and "edges" in ENGINES[ranking].supports


def rank(model: Model, pairs: Sequence[PromptPair], ranking: str, config: FaithfulnessConfig,
         progress: bool = False) -> dict[str, Tensor]:
    """The scores ``ranking`` orders nodes by: ``heads`` [layer, head], ``mlps`` [layer] (non-negative, larger is
    more important) and, for an engine that scores edges (EAP-IG) with ``config.edges``, ``edges`` [sender, receiver] (EAP-IG's graph, in the
    order of :func:`~circuits.patching.engines.eap_ig.eap_senders` / ``eap_receivers``; 0 where there is no edge).

    The registry's engine (:data:`~circuits.patching.engines.registry.ENGINES`) runs at its own positions (END for the exact
    engines; every position for the others) with ``config.metric``; scores by offset are reduced to their largest
    |score| (:meth:`~circuits.patching.core.scores.Scores.over_positions`), and every score is taken as |score|."""
    from circuits.patching.engines.registry import ENGINES

    if ranking not in ENGINES:
        raise ValueError(f"Unknown ranking {ranking!r}")
    scores = ENGINES[ranking].run(model, pairs, metric=config.metric, progress=progress, memory_mb=config.memory_mb,
                                  **engine_options(ranking, config)).over_positions()
    out = _per_node(scores.heads, scores.mlps)
    if "edges" in scores.parts:
        out["edges"] = edge_scores(model, scores["edges"], *scores.labels["edges"])
    return out


def edge_scores(model: Model, effects: Float[Tensor, "sender receiver"], senders: Sequence[Any],
                receivers: Sequence[Any]) -> Float[Tensor, "sender receiver"]:
    """EAP-IG's edge effects (its senders x receivers order: a layer's q inputs of every head, then k, then v) as the
    edge faithfulness engine reads them (:func:`~circuits.patching.circuit_curves.edge_senders` x ``edge_receivers``:
    each head's q, k, v together), |.|, 0 where there is no edge."""
    from circuits.patching.circuit_curves import edge_receivers, edge_senders

    s_at = {s: i for i, s in enumerate(senders)}
    r_at = {r: i for i, r in enumerate(receivers)}
    try:
        rows = [s_at[s] for s in edge_senders(model)]
        cols = [r_at[r] for r in edge_receivers(model)]
    except KeyError as err:
        raise ValueError(f"EAP-IG's graph has no node {err.args[0]} of the faithfulness engine's graph") from None
    return effects.float().cpu()[rows][:, cols].abs().nan_to_num(0.0)


def measure(model: Model, pairs: Sequence[PromptPair], scores: dict[str, Tensor], setting: str,
            config: FaithfulnessConfig) -> FaithfulnessCurve:
    """The faithfulness curve of the circuits ``scores`` yield in ``setting`` (``nodes@end``, ``nodes@all``: the
    batched :func:`~circuits.patching.circuit_curves.circuit_curve` over nodes; ``edges@end``: over edges, at END);
    m is the END quantity ``config.metric``
    reads (``logit_diff``, ``prob``, or the answer's ``logit`` for ``fraction`` and ``relative_logit``)."""
    m = readout_of(get_metric(config.metric))
    nodes = {"edges": scores["edges"]} if setting == "edges@end" else {"heads": scores["heads"], "mlps": scores["mlps"]}
    return circuit_curve(model, pairs, **nodes, sizes=config.sizes, ablation=config.ablation,
                         positions=setting.split("@")[1], metric=m, n_boot=config.n_boot, memory_mb=config.memory_mb,
                         count=config.count)


def _settings(ranking: str, config: FaithfulnessConfig) -> list[str]:
    return config.settings() + (["edges@end"] if scores_edges(ranking, config) else [])


def weights_digest(model: Any) -> str:
    """A hash of every parameter's values (their names, shapes, dtypes and bytes): a model folder whose weights
    changed under the same name gives another digest."""
    import torch

    h = hashlib.sha256()
    with torch.no_grad():
        for name, p in sorted(model.named_parameters(), key=lambda kv: kv[0]):
            t = p.detach().cpu().contiguous()
            h.update(repr((name, tuple(t.shape), str(t.dtype))).encode())
            h.update(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return h.hexdigest()


def _key(config: FaithfulnessConfig, pairs: Sequence[PromptPair], ranking: str, weights: str = "") -> str:
    """What a saved part must have been made with to be reused: the config less what does not change this ranking
    (the list of rankings; EAP-IG's steps, grid and edges for the others), the ranking's own name (a part copied to
    another ranking's file is not taken for it), the model's weights (:func:`weights_digest`: a folder whose weights
    changed is not the model that made the part) and the pairs."""
    cfg = config.to_json()
    from circuits.patching.engines.registry import ENGINES

    cfg.pop("rankings", None)
    own = set(ENGINES[ranking].job_options.values())
    for field in {f for e in ENGINES.values() for f in e.job_options.values()} - own:
        cfg.pop(field, None)
    h = hashlib.sha256(repr(("ranking", ranking, "weights", weights)).encode())
    h.update(repr(sorted(cfg.items())).encode())
    for p in pairs:
        h.update(repr((p.reference_token_ids, p.counterfactual_token_ids, p.answer_token_id)).encode())
    return h.hexdigest()


def _load_part(path: Path, key: str) -> dict[str, Any] | None:
    if not path.is_file():
        return None
    try:
        part = load_torch(path, "faithfulness part")
    except ValueError:  # a part cut short by a kill: computed again
        return None
    return part if isinstance(part, dict) and part.get("key") == key else None


def faithfulness(model: Model, pairs: Sequence[PromptPair], config: FaithfulnessConfig | None = None,
                 progress: bool = True, parts: str | Path | None = None, **kwargs: Any) -> FaithfulnessResult:
    """Score each ranking of ``config.rankings`` by the faithfulness of its circuits (``config`` fields may be given
    as keywords: ``cc.faithfulness(model, pairs, rankings=("exact-path", "eap-ig"), positions=("end",))``).
    ``parts``: a folder where each finished ranking is kept, and reused by a later call with the same config and
    pairs."""
    config = (config.replace(**kwargs) if kwargs else config) if config is not None else FaithfulnessConfig(**kwargs)
    pairs = list(pairs)
    if not pairs:
        raise ValueError("faithfulness needs at least one prompt pair")
    if any(scores_edges(r, config) for r in config.rankings):  # decided before the work, not after the node rankings
        try:
            check_edge_model(model)
        except ValueError as e:
            raise ValueError(f"{e}; pass --no-edges (edges=False) to score its nodes only") from None
    scores: dict[str, dict[str, Tensor]] = {}
    curves: dict[str, dict[str, FaithfulnessCurve]] = {}
    seconds: dict[str, float] = {}
    cpu_seconds: dict[str, dict[str, float]] = {}
    weights = weights_digest(model) if parts is not None else ""
    bar = tqdm(config.rankings, desc="faithfulness", unit="ranking", disable=not progress)
    for ranking in bar:
        bar.set_postfix_str(ranking)
        path = Path(parts) / f"{ranking}.pt" if parts is not None else None
        key = _key(config, pairs, ranking, weights)
        part = _load_part(path, key) if path is not None else None
        if part is None:
            start, cpu = time.perf_counter(), time.process_time()
            s = rank(model, pairs, ranking, config, progress=False)
            took, cpus = time.perf_counter() - start, {"ranking": time.process_time() - cpu}
            cs = {}
            for setting in _settings(ranking, config):
                cpu = time.process_time()
                cs[setting] = measure(model, pairs, s, setting, config)
                cpus[setting] = time.process_time() - cpu
            part = {"key": key, "scores": s, "curves": {k: c.to_dict() for k, c in cs.items()}, "seconds": took,
                    "cpu_seconds": cpus}
            if path is not None:
                path.parent.mkdir(parents=True, exist_ok=True)
                save_torch(part, path)
        scores[ranking] = part["scores"]
        curves[ranking] = {k: FaithfulnessCurve.from_dict(c) for k, c in part["curves"].items()}
        seconds[ranking] = float(part["seconds"])
        cpu_seconds[ranking] = {k: float(v) for k, v in part.get("cpu_seconds", {}).items()}
    bar.close()
    _warn_flat_pairs(curves, len(pairs))
    return FaithfulnessResult(config, pairs, scores, curves, seconds, cpu_seconds)


def _warn_flat_pairs(curves: dict[str, dict[str, FaithfulnessCurve]], n: int) -> None:
    """Say when pairs have m(N) = m(empty) (with ``logit_diff``: the counterfactual run's top answer is the answer
    itself): they add nothing to f, and when every pair is such a pair f is undefined."""
    c = next((c for by in curves.values() for c in by.values()), None)
    if c is None:
        return
    flat = int((c.m_full == c.m_empty).sum())
    if flat:
        warnings.warn(f"{flat} of {n} pairs have m(N) = m(empty) ({c.metric} {float(c.m_full[c.m_full == c.m_empty][0]):g} "
                      "with nothing and with everything ablated: with logit_diff, the counterfactual prompt's top answer "
                      "is the answer itself); they add nothing to f" + ("; f is undefined (NaN)" if flat == n else ""),
                      stacklevel=3)


def run(config: FaithfulnessConfig, out: str | Path, *, model: Model | None = None,
        progress: bool = True) -> FaithfulnessResult:
    """The ``circuits faithfulness`` job: pairs (built or ``--pairs-from``), every ranking scored, saved to ``out``;
    a stopped run resumes from ``<out>/parts``."""
    model = model or load_model(config.model, dtype=config.dtype)
    pairs, _ = config.load_pairs(model)
    result = faithfulness(model, pairs, config, progress=progress, parts=Path(out) / PARTS)
    result.save(out)
    return result


def printout(args: argparse.Namespace, config: FaithfulnessConfig, r: FaithfulnessResult, seconds: float) -> None:
    print(f"[{config.task}] {len(r.pairs)} pairs, {len(r.curves)} rankings in {seconds:.0f} s -> {args.out}/figure.html")
    print(f"  {'ranking':<17} {'circuit':<10} {'CPR':>7} {'CMD':>7} {'ranking s':>10} {'curve s':>8}")
    for row in r.table():
        print(f"  {row['ranking']:<17} {row['setting']:<10} {row['cpr']:7.3f} {row['cmd']:7.3f} "
              f"{row['ranking_seconds']:10.1f} {row['curve_seconds']:8.1f}")
    for setting in r.settings:
        best = r.best(setting)
        if best is not None:
            print(f"  lowest CMD, {setting}: {best[0]} ({best[1]:.3f})")
