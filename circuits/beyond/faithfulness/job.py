"""Which ranking gives the most faithful circuit per unit of compute, measured as MIB measures it (issue 24).

For each ranking named in the config, :func:`rank` computes one importance score per node with the library's own
engine (how each is read is in :data:`~circuits.beyond.faithfulness.config.RANKINGS`' comment; every score is
non-negative, larger is more important, and the circuit of size s is the top s percent of the nodes by
:func:`~circuits.patching.core.ranking.order`); :func:`~circuits.patching.circuit_curves.circuit_curve` then keeps each
circuit, ablates everything else (``ablation``: counterfactual as MIB, or mean, or zero) at END or at every position,
and returns f at every size with CPR, CMD and bootstrap intervals. EAP-IG's edge scores (``edges``) are scored at edge
level at END and at every position (``edge_positions``; the same function with ``edges=``). The seconds of each ranking are measured around its engine alone (the model is loaded and the
pairs built before), wall-clock and as this process's CPU time (``cpu_seconds``: what the compute costs on a
machine shared with other work), so the table reads as faithfulness per unit of compute.

The job is resumable: every finished ranking is written to ``<out>/parts/<ranking>.pt`` with the config and pairs
that made it, and a rerun of the same command (or one adding rankings) reuses those and computes the rest."""

from __future__ import annotations

import argparse
import hashlib
import time
import warnings
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from jaxtyping import Float
from torch import Tensor
from tqdm.auto import tqdm

from circuits.beyond.faithfulness.config import RANKING_BOOT_SEED, FaithfulnessConfig
from circuits.beyond.faithfulness.result import PARTS, FaithfulnessResult
from circuits.data.answers import at_answer_position
from circuits.data.pairs import PairSet, PromptPair
from circuits.io import load_torch, save_torch
from circuits.identify.validity import check_job, print_warnings
from circuits.models.backend import Model
from circuits.models.loading import load_model
from circuits.patching.engines.attribution import readout_of
from circuits.patching.circuit_curves import FaithfulnessCurve, check_edge_model, circuit_curve, resampled_cmd
from circuits.patching.core.metrics import get_metric
from circuits.patching.core.scores import Scores
from circuits.patching.core.uncertainty import resample_pairs


SIGNED = "_signed"  # a score's key with this suffix: the signed ranking's (heads_signed, mlps_signed, edges_signed)
INPUT = "input"  # the input node's score (one number), where the ranking scores it and config.input_node
# What a saved part was computed by, beyond its config and pairs: 2 since every exact and attribution ranking scores
# the input node too (issue 43); a part saved before (no input score) is computed again, not reused.
PART_VERSION = 2


def signed_importance(scores: Scores, position_scores: str = "sum") -> dict[str, Tensor]:
    """Each part's signed importance per component (``sign * effect``: larger is more important, a component that
    pushes the metric the other way is negative), float32 on the CPU, NaN as 0. Scores by offset become one per
    component by ``position_scores``: ``"sum"`` adds them over offsets (MIB's, as the EAP-IG library sums its
    per-position attributions; :meth:`~circuits.patching.core.scores.Scores.over_positions` with ``"sum"``), ``"max"``
    reads them at the offset of the largest ``|score|`` (the first such), so ``|signed|`` is what
    ``over_positions("max")`` ranks by. Either way the signed ranking differs from the absolute one by sign alone."""
    out = {}
    for part, v in scores.importance().items():  # type: ignore[union-attr]
        v = v.detach().float().cpu().nan_to_num(0.0)
        if scores.offsets:
            v = v.sum(-1) if position_scores == "sum" else v.gather(-1, v.abs().argmax(-1, keepdim=True)).squeeze(-1)
        out[part] = v
    return out


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
    """The scores ``ranking`` orders nodes by: ``heads`` [layer, head], ``mlps`` [layer] (the absolute ranking:
    non-negative, larger is more important), ``input`` [] (the input node, MIB's node graph, with ``config.input_node``:
    every node engine scores it by its own method, EAP-IG by its estimate, the exact and attribution engines by
    patching or attributing ``blocks.0.hook_resid_pre`` as they do a head, :mod:`circuits.patching.engines.input_node`;
    an engine registered without an ``input`` part leaves the input no node of its circuits, kept in every one, as
    MIB keeps a node it has no score for) and, for an engine that scores edges (EAP-IG) with ``config.edges``,
    ``edges`` [sender, receiver] (in the order of :func:`~circuits.patching.circuit_curves.edge_senders` x
    ``edge_receivers``; 0 where there is no edge); each also signed, ``heads_signed``, ``mlps_signed``,
    ``edges_signed`` (the signed ranking, MIB's for CPR: importance ``sign * effect``, so a node that pushes the
    metric the other way ranks last; ``|signed|`` is the absolute score).

    The registry's engine (:data:`~circuits.patching.engines.registry.ENGINES`) runs at its own positions (END for the exact
    engines; every position for the others) with ``config.metric``; scores by offset are read at the offset of their
    largest |score| (:func:`signed_importance`; the absolute ranking is
    :meth:`~circuits.patching.core.scores.Scores.over_positions`'s with ``config.position_scores``)."""
    from circuits.patching.engines.registry import ENGINES

    if ranking not in ENGINES:
        raise ValueError(f"Unknown ranking {ranking!r}")
    raw = ENGINES[ranking].run(model, pairs, metric=config.metric, progress=progress, memory_mb=config.memory_mb,
                               **engine_options(ranking, config))
    signed = signed_importance(raw, config.position_scores)
    out = {"heads": signed["heads"].abs(), "mlps": signed["mlps"].abs(),
           "heads" + SIGNED: signed["heads"], "mlps" + SIGNED: signed["mlps"]}
    if config.input_node and INPUT in signed:  # MIB's node graph: the embeddings ranked as one more node
        out[INPUT], out[INPUT + SIGNED] = signed[INPUT].reshape(()).abs(), signed[INPUT].reshape(())
    if "edges" in raw.parts:
        out["edges" + SIGNED] = edge_scores(model, signed["edges"], *raw.labels["edges"], absolute=False)
        out["edges"] = out["edges" + SIGNED].abs()
    return out


def edge_scores(model: Model, effects: Float[Tensor, "sender receiver"], senders: Sequence[Any],
                receivers: Sequence[Any], absolute: bool = True) -> Float[Tensor, "sender receiver"]:
    """EAP-IG's edge effects (its senders x receivers order: a layer's q inputs of every head, then k, then v) as the
    edge faithfulness engine reads them (:func:`~circuits.patching.circuit_curves.edge_senders` x ``edge_receivers``:
    each head's q, k, v together), |.| (``absolute=False``: as they are), 0 where there is no edge."""
    from circuits.patching.circuit_curves import edge_receivers, edge_senders

    s_at = {s: i for i, s in enumerate(senders)}
    r_at = {r: i for i, r in enumerate(receivers)}
    try:
        rows = [s_at[s] for s in edge_senders(model)]
        cols = [r_at[r] for r in edge_receivers(model)]
    except KeyError as err:
        raise ValueError(f"EAP-IG's graph has no node {err.args[0]} of the faithfulness engine's graph") from None
    out = effects.float().cpu()[rows][:, cols].nan_to_num(0.0)
    return out.abs() if absolute else out


def measure(model: Model, pairs: Sequence[PromptPair], scores: dict[str, Tensor], setting: str,
            config: FaithfulnessConfig, signed: bool = False) -> FaithfulnessCurve:
    """The faithfulness curve of the circuits ``scores`` yield in ``setting`` (``nodes@end``, ``nodes@all``: the
    batched :func:`~circuits.patching.circuit_curves.circuit_curve` over nodes; ``edges@end``, ``edges@all``: over
    edges, at END or at every position),
    by the absolute ranking or (``signed``) the signed one; m is the END quantity ``config.metric``
    reads (``logit_diff``, ``prob``, or the answer's ``logit`` for ``fraction`` and ``relative_logit``)."""
    m = readout_of(get_metric(config.metric))
    k = SIGNED if signed else ""
    nodes = ({"edges": scores["edges" + k]} if setting.startswith("edges@")
             else {"heads": scores["heads" + k], "mlps": scores["mlps" + k], "input": scores.get(INPUT + k)})
    return circuit_curve(model, pairs, **nodes, sizes=config.sizes, ablation=config.ablation,
                         positions=setting.split("@")[1], metric=m, n_boot=config.n_boot, memory_mb=config.memory_mb,
                         count=config.count)


def ranking_bootstrap(model: Model, pairs: Sequence[PromptPair], scoring: Sequence[PromptPair], ranking: str,
                      config: FaithfulnessConfig) -> dict[str, Tensor]:
    """Per node setting, ``[config.ranking_boot]`` CMDs of ``ranking``'s absolute circuits, each found on a resample
    of the ranking ``pairs`` (drawn with replacement) and scored on a resample of the ``scoring`` pairs: the spread
    of CMD when both the pairs a circuit is found on and the pairs it is scored on are drawn again (the curves'
    own intervals hold the ranking fixed). Each resample runs the ranking's engine once (no edges) and one curve per
    node setting, without its own bootstrap."""
    quick = config.replace(n_boot=0, edges=False)
    n = config.ranking_boot
    rows = resample_pairs(len(pairs), n, RANKING_BOOT_SEED)
    cols = resample_pairs(len(scoring), n, RANKING_BOOT_SEED + 1)
    out = {setting: torch.empty(n, dtype=torch.float64) for setting in config.settings()}
    for b in range(n):
        s = rank(model, [pairs[int(i)] for i in rows[b]], ranking, quick)
        for setting in out:
            out[setting][b] = resampled_cmd(measure(model, scoring, s, setting, quick), cols[b:b + 1])[0]
    return out


def _settings(ranking: str, config: FaithfulnessConfig) -> list[str]:
    return config.settings() + (config.edge_settings() if scores_edges(ranking, config) else [])


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


def _key(config: FaithfulnessConfig, pairs: Sequence[PromptPair], ranking: str, weights: str = "",
         scoring: Sequence[PromptPair] | None = None) -> str:
    """What a saved part must have been made with to be reused: the config less what does not change this ranking
    (the list of rankings; EAP-IG's steps, grid and edges for the others), the ranking's own name (a part copied to
    another ranking's file is not taken for it), the model's weights (:func:`weights_digest`: a folder whose weights
    changed is not the model that made the part) and the pairs (ranking pairs, then scoring pairs where they
    differ)."""
    cfg = config.to_json()
    from circuits.patching.engines.registry import ENGINES

    for field in ("rankings", "ranking_boot", "ranking_boot_rankings"):  # the resamples are kept beside, by count
        cfg.pop(field, None)
    own = set(ENGINES[ranking].job_options.values())
    for field in {f for e in ENGINES.values() for f in e.job_options.values()} - own:
        cfg.pop(field, None)
    if not scores_edges(ranking, config):  # where edges are ablated changes only a ranking that scores edges
        cfg.pop("edge_positions", None)
    h = hashlib.sha256(repr(("ranking", ranking, "weights", weights, "version", PART_VERSION)).encode())
    h.update(repr(sorted(cfg.items())).encode())
    for p in pairs:
        h.update(repr((p.reference_token_ids, p.counterfactual_token_ids, p.answer_token_id)).encode())
    if scoring is not None:
        h.update(b"scoring")
        for p in scoring:
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
                 progress: bool = True, parts: str | Path | None = None, *,
                 scoring_pairs: Sequence[PromptPair] | None = None, stats: dict[str, Any] | None = None,
                 refuse: bool = True, **kwargs: Any) -> FaithfulnessResult:
    """Score each ranking of ``config.rankings`` by the faithfulness of its circuits (``config`` fields may be given
    as keywords: ``cc.faithfulness(model, pairs, rankings=("exact-path", "eap-ig"), positions=("end",))``).
    Each ranking is found on ``pairs`` and its circuits scored on ``scoring_pairs`` (None: on ``pairs`` themselves,
    in-sample; the job passes a disjoint split, :func:`held_out_pairs`). Every curve is measured twice, by the
    absolute ranking (``curves``: CMD) and by the signed one (``signed_curves``: CPR with ``cpr_ranking="signed"``);
    where a ranking has no negative score the two rankings are one and the curve is measured once. Held out, with
    ``config.in_sample``, the absolute ranking's circuits are also scored on ``pairs`` (``in_sample_curves``: the
    in-sample CMD beside the held-out one).
    ``parts``: a folder where each finished ranking is kept, and reused by a later call with the same config and
    pairs.

    First, before any ranking, the ranking pairs' validity checks, as the job runs them
    (:func:`~circuits.identify.validity.check_job`; ``stats``: the pairs' statistics, for the accuracy before
    filtering): past a hard threshold refused in the job's one line (:class:`~circuits.identify.validity.Untrusted`,
    a ``ValueError``) unless ``force=True`` (the config's ``force``, ``--force``); past a soft one, or forced, a
    ``ValidityWarning``, and the lines kept on the result (``result.validity()``, saved in ``summary.json``).
    ``refuse=False``: warn only (for a caller that has checked these pairs itself)."""
    config = (config.replace(**kwargs) if kwargs else config) if config is not None else FaithfulnessConfig(**kwargs)
    if stats is None and isinstance(pairs, PairSet):  # built pairs carry their accuracy before filtering
        stats = pairs.stats()
    pairs = list(pairs)
    scoring = pairs if scoring_pairs is None else list(scoring_pairs)
    if not pairs or not scoring:
        raise ValueError("faithfulness needs at least one prompt pair to rank on and one to score on")
    validity = check_job(model, pairs, stats, config, "faithfulness", refuse)  # before any ranking
    if any(scores_edges(r, config) for r in config.rankings):  # decided before the work, not after the node rankings
        try:
            check_edge_model(model)
        except ValueError as e:
            raise ValueError(f"{e}; pass --no-edges (edges=False) to score its nodes only") from None
    scores: dict[str, dict[str, Tensor]] = {}
    curves: dict[str, dict[str, FaithfulnessCurve]] = {}
    signed_curves: dict[str, dict[str, FaithfulnessCurve]] = {}
    in_sample: dict[str, dict[str, FaithfulnessCurve]] = {}
    seconds: dict[str, float] = {}
    cpu_seconds: dict[str, dict[str, float]] = {}
    ranking_boot: dict[str, dict[str, Tensor]] = {}
    weights = weights_digest(model) if parts is not None else ""
    bar = tqdm(config.rankings, desc="faithfulness", unit="ranking", disable=not progress)
    for ranking in bar:
        bar.set_postfix_str(ranking)
        path = Path(parts) / f"{ranking}.pt" if parts is not None else None
        key = _key(config, pairs, ranking, weights, scoring if scoring_pairs is not None else None)
        part = _load_part(path, key) if path is not None else None
        if part is None:
            start, cpu = time.perf_counter(), time.process_time()
            s = rank(model, pairs, ranking, config, progress=False)
            took, cpus = time.perf_counter() - start, {"ranking": time.process_time() - cpu}
            cs, signed, inside = {}, {}, {}
            for setting in _settings(ranking, config):
                cpu = time.process_time()
                cs[setting] = measure(model, scoring, s, setting, config)
                k = "edges" if setting.startswith("edges@") else None
                same = all(torch.equal(s[p], s[p + SIGNED]) for p in ([k] if k else ["heads", "mlps", INPUT])
                           if p in s)
                signed[setting] = cs[setting] if same else measure(model, scoring, s, setting, config, signed=True)
                if scoring_pairs is not None and config.in_sample:  # the same circuits on the pairs that found them
                    inside[setting] = measure(model, pairs, s, setting, config)
                cpus[setting] = time.process_time() - cpu
            part = {"key": key, "scores": s, "curves": {k: c.to_dict() for k, c in cs.items()},
                    "signed_curves": {k: c.to_dict() for k, c in signed.items()},
                    "in_sample_curves": {k: c.to_dict() for k, c in inside.items()}, "seconds": took,
                    "cpu_seconds": cpus}
            if path is not None:
                path.parent.mkdir(parents=True, exist_ok=True)
                save_torch(part, path)
        if scoring_pairs is not None and config.ranking_boot and ranking in config.ranking_boot_rankings and \
                part.get("ranking_boot", {}).get("n") != config.ranking_boot:
            cpu = time.process_time()
            cmds = ranking_bootstrap(model, pairs, scoring, ranking, config)
            part["ranking_boot"] = {"n": config.ranking_boot, "cmd": cmds, "cpu_seconds": time.process_time() - cpu}
            if path is not None:
                save_torch(part, path)
        if part.get("ranking_boot", {}).get("n") == config.ranking_boot and ranking in config.ranking_boot_rankings:
            ranking_boot[ranking] = dict(part["ranking_boot"]["cmd"])
        scores[ranking] = part["scores"]
        curves[ranking] = {k: FaithfulnessCurve.from_dict(c) for k, c in part["curves"].items()}
        signed_curves[ranking] = {k: FaithfulnessCurve.from_dict(c) for k, c in part["signed_curves"].items()}
        if part["in_sample_curves"]:
            in_sample[ranking] = {k: FaithfulnessCurve.from_dict(c) for k, c in part["in_sample_curves"].items()}
        seconds[ranking] = float(part["seconds"])
        cpu_seconds[ranking] = {k: float(v) for k, v in part.get("cpu_seconds", {}).items()}
        if ranking in ranking_boot:
            cpu_seconds[ranking]["ranking_boot"] = float(part["ranking_boot"]["cpu_seconds"])
    bar.close()
    _warn_flat_pairs(curves, len(scoring))
    return FaithfulnessResult(config, pairs, scores, curves, seconds, cpu_seconds, signed_curves=signed_curves,
                              scoring_pairs=scoring, in_sample_curves=in_sample, ranking_boot=ranking_boot,
                              _validity=validity)


def held_out_pairs(config: FaithfulnessConfig, model: Model, ranking_pairs: Sequence[PromptPair],
                   saved: Sequence[PromptPair] | None = None) -> list[PromptPair]:
    """The scoring pairs of a held-out run: ``config.n_pairs`` pairs built from the same templates with
    ``config.score_seed`` (or, ``saved``: the saved pairs after the ranking ones), none sharing a prompt (reference or
    counterfactual) with ``ranking_pairs``. Fewer than asked: a warning naming how many."""
    from circuits.data.pairs import FewerPairsWarning, build_pairs

    taken = {p.reference for p in ranking_pairs} | {p.counterfactual for p in ranking_pairs}
    n = config.n_pairs
    if saved is None:  # twice as many candidates: the ones sharing a prompt with the ranking pairs are dropped
        built = build_pairs(model, config.pair_config().replace(seed=config.score_seed, n_pairs=2 * n), progress=False)
        candidates = list(built.pairs)
    else:
        candidates = list(saved)[len(ranking_pairs):]
    out = [p for p in candidates if p.reference not in taken and p.counterfactual not in taken][:n]
    if len(out) < n:
        where = (f"{config.pairs_from} after the first {len(ranking_pairs)}" if saved is not None else
                 f"{config.pairs_file}'s lines after the first {len(ranking_pairs)}" if config.pairs_file else
                 f"seed {config.score_seed}")
        warnings.warn(f"{len(out)} of the {n} scoring pairs asked ({where}, none sharing a prompt with the ranking "
                      "pairs)", FewerPairsWarning, stacklevel=2)
    return out


def balance_split(ranking: Sequence[PromptPair], scoring: Sequence[PromptPair]
                  ) -> tuple[list[PromptPair], list[PromptPair]]:
    """When there are fewer scoring pairs than ranking pairs (a task the model answers on few problems: SmolLM2's
    subtraction: 66 of 421 candidates answered, and 64 ranking pairs left none to score on), ranking pairs move to the
    scoring side, from the last, until the two sides differ by at most one: a pair moves only if neither of its
    prompts is a prompt of a ranking pair that stays, so the two sides still share no prompt. Balanced already:
    both as given."""
    ranking, scoring = list(ranking), list(scoring)
    uses = Counter(x for p in ranking for x in (p.reference, p.counterfactual))  # prompts of the pairs that stay
    moved: list[int] = []
    for i in range(len(ranking) - 1, -1, -1):
        if len(scoring) + len(moved) >= len(ranking) - len(moved) - 1:
            break
        own = Counter((ranking[i].reference, ranking[i].counterfactual))
        if all(uses[x] == n for x, n in own.items()):  # no other staying pair has either prompt
            uses.subtract(own)
            moved.append(i)
    gone = set(moved)
    return [p for i, p in enumerate(ranking) if i not in gone], scoring + [ranking[i] for i in reversed(moved)]


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


def split_pairs(config: FaithfulnessConfig, model: Model
                ) -> tuple[list[PromptPair], list[PromptPair] | None, dict[str, Any]]:
    """The pairs each ranking is found on, with ``config.held_out`` the disjoint pairs its circuits are scored on
    (:func:`held_out_pairs`; None: scored on the ranking pairs), and the ranking pairs' statistics (the validity
    checks' accuracy before filtering)."""
    if config.held_out and config.pairs_from:
        from circuits.data.source import read_saved_pairs, with_second_logit

        saved, stats = read_saved_pairs(config.pairs_from, config.model)
        saved = with_second_logit(saved, config.second_logit, config.pairs_from)
        pairs = saved[: config.n_pairs]
        return (*_balanced(pairs, held_out_pairs(config, model, pairs, saved)), stats)
    pairs, stats = config.load_pairs(model)
    if not config.held_out:
        return pairs, None, stats
    return (*_balanced(pairs, held_out_pairs(config, model, pairs)), stats)


def _balanced(ranking: list[PromptPair], scoring: list[PromptPair]) -> tuple[list[PromptPair], list[PromptPair]]:
    """:func:`balance_split`, said in one warning when pairs moved; one line when no scoring pair is left."""
    from circuits.data.pairs import FewerPairsWarning

    split = balance_split(ranking, scoring)
    if len(split[1]) > len(scoring):
        warnings.warn(f"{len(ranking) + len(scoring)} pairs in all for both sides: ranking on {len(split[0])} and "
                      f"scoring on {len(split[1])} (the last {len(split[1]) - len(scoring)} ranking pairs moved to the "
                      "scoring side, none sharing a prompt with a ranking pair); going on with them",
                      FewerPairsWarning, stacklevel=3)
    if not split[1]:
        raise ValueError(f"No scoring pair disjoint from the {len(ranking)} ranking pairs, and none of them can move "
                         "to the scoring side; pass --no-held-out to score on the ranking pairs, or more pairs")
    return split


def run(config: FaithfulnessConfig, out: str | Path, *, model: Model | None = None,
        progress: bool = True) -> FaithfulnessResult:
    """The ``circuits faithfulness`` job: pairs (built or ``--pairs-from``), every ranking scored, saved to ``out``;
    a stopped run resumes from ``<out>/parts``."""
    model = model or load_model(config.model, dtype=config.dtype)
    pairs, scoring, stats = split_pairs(config, model)
    # Answer token k (issue 42): the ranking and the scoring pairs both teacher-forced with the answer's first k tokens
    # (circuits.data.answers), so rankings and circuits are found and scored at END + k.
    pairs = at_answer_position(pairs, config.answer_position, model.tokenizer)
    scoring = None if scoring is None else at_answer_position(scoring, config.answer_position, model.tokenizer)
    # The ranking pairs' validity checks (docs/identify.md), inside faithfulness(): past a hard threshold one line,
    # before any ranking
    result = faithfulness(model, pairs, config, progress=progress, parts=Path(out) / PARTS, scoring_pairs=scoring,
                          stats=stats)
    result.save(out)
    return result


def printout(args: argparse.Namespace, config: FaithfulnessConfig, r: FaithfulnessResult, seconds: float) -> None:
    print(f"[{config.task}] {len(r.pairs)} pairs, {len(r.curves)} rankings in {seconds:.0f} s -> {args.out}/figure.html")
    split = (f"ranked on {len(r.pairs)} pairs, scored on {len(r.scoring_pairs)} held-out pairs" if r.held_out
             else "ranked and scored on the same pairs")
    print(f"  {split}; CPR from the {config.cpr_ranking} ranking's curve, CMD from the absolute one's")
    mib = config.mib()
    print("  as MIB measures: " + ("every config choice" if not mib["departs"] else "except " + "; ".join(
        f"{k} {v['here']} (MIB: {v['mib']})" for k, v in mib["departs"].items())) + "; not as MIB whatever the "
          "config: " + ", ".join(mib["fixed"]) + " (summary.json's mib, docs/mib.md)")
    print(f"  {'ranking':<17} {'circuit':<10} {'CPR':>7} {'CMD':>7} {'CMD gap':>8} {'ranking s':>10} {'curve s':>8}")
    for row in r.table():
        gap = f"{row['cmd_gap']:+8.3f}" if row["cmd_gap"] is not None else f"{'-':>8}"
        print(f"  {row['ranking']:<17} {row['setting']:<10} {row['cpr']:7.3f} {row['cmd']:7.3f} {gap} "
              f"{row['ranking_seconds']:10.1f} {row['curve_seconds']:8.1f}")
    if any(row["cmd_gap"] is not None for row in r.table()):
        print("  CMD gap: in-sample minus held-out CMD (negative: the circuit fits the pairs it was found on better)")
    for setting in r.settings:
        best = r.best(setting)
        if best is not None:
            print(f"  lowest CMD, {setting}: {best[0]} ({best[1]:.3f})")
    print_warnings(r.validity(), f"[{config.task}]")
