"""Knockout of heads and MLPs (Section 4.1 "Validation", Figure 3; Wang et al., 2023a): the job-level parts --
the ablation sets, the scores (accuracy, answer probability), Figure 3's curves, the config and the result.

What a knocked-out component's output becomes (mean over the template group, zero, resample) is
:mod:`circuits.patching.ablation.values`; the masked forward that writes it, many ablation sets per pass with the
shared few-shot prefix run once, is :mod:`circuits.patching.ablation.executor`. The names knockout has always exported
(:func:`compute_means`, :func:`replacement_values`, :class:`AblationValues`, ...) are importable from here too.
:func:`knockout_many` runs many ablation sets in the same forward passes: Figure 3's curves, every k of every order,
are a few batched passes. Tests assert the result equals the plain full-prompt run.
"""

from __future__ import annotations

import operator
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from jaxtyping import Float
from torch import Tensor

from circuits import distributed as D
from circuits.data.pairs import PromptPair
from circuits.validate.config import KnockoutConfig
from circuits.io import read_json, write_json
from circuits.models.backend import Model
from circuits.models.forward import unembed_end
from circuits.patching.ablation.executor import AblationMasks, AblationSpec, run_ablation
from circuits.patching.ablation.values import (  # noqa: F401  (the names knockout has always exported)
    AblationValues,
    GroupKey,
    compute_means,
    group_key,
    replacement_values,
    resample_values,
    zero_values,
)
from circuits.results import Result, ResultError, brief, check_fields, check_rate
from circuits.types import Ablation, Component, Head, all_heads
from circuits.viz.notebook import ShowsFigure


def checked_set(model: Model, heads: Sequence[Any], mlps: Sequence[Any]) -> tuple[list[Head], list[int]]:
    """An ablation set as :class:`Head` s and MLP layers, each inside the model (a ValueError saying which is not).

    ``heads``: anything :meth:`Head.parse` reads, the ``(Head, effect)`` pairs ``Scores.key()``/``Scores.ranked()`` return
    included; ``mlps``: layer indices, ``"MLP19"``, MLP :class:`Component` s or the ``(layer, effect)`` pairs
    ``Scores.key(rule, "mlps")`` returns."""
    cfg = model.cfg
    hs = [Head.parse(h).check(cfg.n_layers, cfg.n_heads) for h in heads]
    ms = []
    for layer in mlps:
        if isinstance(layer, tuple) and len(layer) == 2 and isinstance(layer[1], float):
            layer = layer[0]  # (MLP, effect) from Scores.key(rule, "mlps")
        if isinstance(layer, (str, Component)):
            try:
                c = Component.parse(layer)
            except ValueError:
                c = None
            layer = c.layer if c is not None and c.kind == "mlp" else layer
        try:
            index = operator.index(layer)  # int, numpy or 0-d tensor integers
        except TypeError:
            index = -1
        if isinstance(layer, bool) or not 0 <= index < cfg.n_layers:
            raise ValueError(f"MLP {layer!r} is outside this model: MLP layers are integers 0..{cfg.n_layers - 1}")
        ms.append(index)
    return hs, ms


@torch.no_grad()
def knockout_logits(
    model: Model,
    pairs: Sequence[PromptPair],
    means: AblationValues,
    heads: Sequence[Head] = (),
    mlps: Sequence[int] = (),
    *,
    batch_size: int = 64,
    share_prefix: bool = True,
) -> Float[Tensor, "pair d_vocab"]:
    """END logits of each pair's reference prompt with ``heads`` and ``mlps`` ablated (``means``: any
    :class:`AblationValues`, e.g. resample's): one set of :func:`knockout_residuals`.

    With ``share_prefix`` a group's common few-shot prefix runs once into a key/value cache; the result is the same
    as running every full prompt (asserted in tests) but costs a fraction of it."""
    heads, mlps = checked_set(model, heads, mlps)
    resid = knockout_residuals(model, pairs, [(heads, mlps)], means, rows_per_batch=batch_size,
                               share_prefix=share_prefix)
    return unembed_end(model, resid[0]).cpu()


AblationSet = tuple[Sequence[Head], Sequence[int]]


@torch.no_grad()
def knockout_residuals(
    model: Model,
    pairs: Sequence[PromptPair],
    sets: Sequence[AblationSet],
    means: AblationValues,
    *,
    rows_per_batch: int = 256,
    share_prefix: bool = True,
) -> Float[Tensor, "set pair d_model"]:
    """Final END residuals of every pair under each ablation set ``(heads, mlps)`` of ``sets``, many sets per
    forward pass (the mechanism's one executor, :func:`circuits.patching.ablation.executor.run_ablation`): a row is one
    (set, pair), and its hooks replace only the heads and MLPs of its own set. Figure 3's curve (every k of the
    effect order and of each random order) is then a handful of forward passes instead of one run per (k, order).

    A prefix group (pairs whose few-shot prefixes are equal) runs its prefix once per set -- knocked-out heads change
    the prefix's keys and values too -- and the question bodies of all its pairs under all those sets together.
    Resample ablation runs full prompts (a donor's prefix may differ)."""
    masks = AblationMasks.of_sets(model, [checked_set(model, h, m) for h, m in sets])
    return run_ablation(model, pairs, AblationSpec(means, masks), rows_per_batch=rows_per_batch,
                        share_prefix=share_prefix).resid


@torch.no_grad()
def knockout_many(
    model: Model,
    pairs: Sequence[PromptPair],
    sets: Sequence[AblationSet],
    *,
    means: AblationValues | None = None,
    ablation: Ablation | str = Ablation.MEAN,
    rows_per_batch: int = 256,
) -> list[KnockoutScore]:
    """:func:`knockout` of every ablation set ``(heads, mlps)`` in ``sets``, batched across sets
    (:func:`knockout_residuals`)."""
    sets = [checked_set(model, h, m) for h, m in sets]
    pairs = list(pairs)
    means = replacement_values(model, pairs, ablation) if means is None else means
    resid = knockout_residuals(model, pairs, sets, means, rows_per_batch=rows_per_batch)
    answers = [p.answer_token_id for p in pairs]
    return [score_residuals(model, resid[s], answers) for s in range(len(sets))]


@dataclass
class KnockoutScore:
    """Accuracy (argmax is the answer) and mean answer probability over pairs."""

    accuracy: float
    answer_prob: float
    correct: list[bool] = field(default_factory=list)
    probs: list[float] = field(default_factory=list)  # each pair's answer probability

    def to_json(self) -> dict[str, Any]:
        return {"accuracy": self.accuracy, "answer_prob": self.answer_prob}


def score(logits: Float[Tensor, "pair d_vocab"], answers: Sequence[int]) -> KnockoutScore:
    ans = torch.tensor(list(answers))
    probs = logits.softmax(-1)
    hit = probs.argmax(-1) == ans
    p = probs[torch.arange(len(ans)), ans]
    return KnockoutScore(float(hit.float().mean()), float(p.mean()), [bool(x) for x in hit], [float(x) for x in p])


def score_residuals(model: Model, resid: Float[Tensor, "pair d_model"], answers: Sequence[int],
                    batch_size: int = 64) -> KnockoutScore:
    """:func:`score` of the logits of final END residuals, unembedded ``batch_size`` rows at a time: memory is one
    batch's logits, never every pair's (``pairs x d_vocab``)."""
    ans = torch.tensor(list(answers))
    hit = torch.zeros(len(ans), dtype=torch.bool)
    p = torch.zeros(len(ans))
    for s in range(0, len(ans), batch_size):
        probs = unembed_end(model, resid[s : s + batch_size]).cpu().softmax(-1)
        hit[s : s + batch_size] = probs.argmax(-1) == ans[s : s + batch_size]
        p[s : s + batch_size] = probs[torch.arange(len(probs)), ans[s : s + batch_size]]
    return KnockoutScore(float(hit.float().mean()), float(p.mean()), [bool(x) for x in hit], [float(x) for x in p])


def knockout(
    model: Model,
    pairs: Sequence[PromptPair],
    heads: Sequence[Head] = (),
    mlps: Sequence[int] = (),
    *,
    means: AblationValues | None = None,
    ablation: Ablation | str = Ablation.MEAN,
    batch_size: int = 64,
    share_prefix: bool = True,
) -> KnockoutScore:
    """Accuracy and answer probability on ``pairs`` with ``heads``/``mlps`` knocked out.

    ``heads``: :class:`Head` s, ``"20.8"`` or the ``(Head, effect)`` pairs ``key_heads()`` returns (so
    ``knockout(model, pairs, result.key_heads())`` works); ``mlps``: layers or ``Scores.key(rule, "mlps")``'s pairs. Checked before
    any work. ``means``: the replacement values (default: :func:`replacement_values` of ``pairs`` for ``ablation``);
    compute them once with :func:`replacement_values` and pass them to reuse them across calls. ``batch_size`` and
    ``share_prefix`` as :func:`knockout_logits`'s; the logits are read a batch at a time (:func:`score_residuals`)."""
    heads, mlps = checked_set(model, heads, mlps)
    pairs = list(pairs)
    means = replacement_values(model, pairs, ablation) if means is None else means
    resid = knockout_residuals(model, pairs, [(heads, mlps)], means, rows_per_batch=batch_size,
                               share_prefix=share_prefix)  # knockout_logits's residuals, unembedded a batch at a time
    return score_residuals(model, resid[0], [p.answer_token_id for p in pairs], batch_size)


def random_order(n_layers: int, n_heads: int, seed: int) -> list[Head]:
    """Every head in a seeded random order (the "random-rank" of Figure 3)."""
    heads = all_heads(n_layers, n_heads)
    random.Random(seed).shuffle(heads)
    return heads


@dataclass
class KnockoutCurve(ShowsFigure):  # in a notebook: the figure (circuits.viz.notebook)
    """Figure 3: scores after knocking out the first k heads of the effect ranking and of random rankings.

    Besides the means over pairs (``effect_accuracy[k]``, ``random_accuracy[seed][k]``, ...), each pair's outcome is
    kept (``effect_correct[k][pair]``, ``random_correct[seed][k][pair]``, and the answer probabilities alike), so the
    curves carry bootstrap intervals over pairs (:meth:`interval`, :meth:`gap`). A curve saved before these were kept
    has them empty, and its intervals are None."""

    ks: list[int]
    ranking: list[Head]
    effect_accuracy: list[float]
    effect_prob: list[float]
    random_orders: list[list[Head]]
    random_accuracy: list[list[float]]  # [seed][k]
    random_prob: list[list[float]]
    effect_correct: list[list[bool]] = field(default_factory=list)  # [k][pair]
    effect_pair_prob: list[list[float]] = field(default_factory=list)  # [k][pair]
    random_correct: list[list[list[bool]]] = field(default_factory=list)  # [seed][k][pair]
    random_pair_prob: list[list[list[float]]] = field(default_factory=list)  # [seed][k][pair]

    @property
    def n_pairs(self) -> int:
        """The pairs each point is a mean over (0 when the per-pair outcomes were not kept)."""
        return len(self.effect_correct[0]) if self.effect_correct else 0

    def per_pair(self, what: str = "accuracy") -> tuple[np.ndarray, np.ndarray] | None:
        """Each pair's outcome, ``(key [k, pair], random [seed, k, pair])``: 0/1 for ``accuracy``, the answer
        probability for ``answer_prob``; None without per-pair outcomes."""
        if what not in ("accuracy", "answer_prob"):
            raise ValueError(f"Unknown knockout score {what!r}; accepted: accuracy, answer_prob")
        key, rnd = ((self.effect_correct, self.random_correct) if what == "accuracy"
                    else (self.effect_pair_prob, self.random_pair_prob))
        if not key or not self.n_pairs:
            return None
        return np.asarray(key, dtype=np.float64), np.asarray(rnd, dtype=np.float64).reshape(-1, len(self.ks),
                                                                                             self.n_pairs)

    def _draws(self, n_boot: int, seed: int) -> np.ndarray:
        """Bootstrap resamples of the pairs, ``[n_boot, pair]`` (one set for every curve, so they are paired)."""
        return np.random.default_rng(seed).integers(0, self.n_pairs, size=(n_boot, self.n_pairs))

    def interval(self, what: str = "accuracy", n_boot: int = 1000, level: float = 0.95, seed: int = 0
                 ) -> dict[str, list[list[float]]] | None:
        """Percentile bootstrap intervals over pairs of the key heads' curve and of the random heads' mean curve (the
        mean over seeds of each resampled pair set): ``{"key": [[low, high] per k], "random": [...]}``."""
        pp = self.per_pair(what)
        if pp is None:
            return None
        key, rnd = pp
        idx = self._draws(n_boot, seed)
        q = [(1 - level) / 2 * 100, (1 + level) / 2 * 100]
        key_b = key[:, idx].mean(-1)  # [k, boot]
        rnd_b = rnd.mean(0)[:, idx].mean(-1)
        return {"key": np.percentile(key_b, q, axis=1).T.tolist(), "random": np.percentile(rnd_b, q, axis=1).T.tolist()}

    def gap(self, k: int | None = None, what: str = "accuracy", n_boot: int = 1000, level: float = 0.95,
            seed: int = 0) -> dict[str, float] | None:
        """How much more knocking out the first ``k`` key heads (default: the largest k) lowers ``what`` than ``k``
        random heads (the random seeds' mean minus the key heads', on the same pairs), with its paired bootstrap
        interval over pairs: ``{"k", "gap", "low", "high"}``. ``low > 0``: the key heads knock out more than random
        ones beyond the pairs' chance; an interval holding 0 means the pairs cannot tell them apart."""
        pp = self.per_pair(what)
        if pp is None:
            return None
        k = max(self.ks) if k is None else int(k)
        if k not in self.ks:
            raise ValueError(f"k={k} is not one of this curve's ks {self.ks}")
        i = self.ks.index(k)
        key, rnd = pp
        diff = rnd[:, i].mean(0) - key[i]  # [pair]
        boot = diff[self._draws(n_boot, seed)].mean(-1)
        low, high = np.percentile(boot, [(1 - level) / 2 * 100, (1 + level) / 2 * 100])
        return {"k": k, "gap": float(diff.mean()), "low": float(low), "high": float(high), "level": level}

    def to_json(self) -> dict[str, Any]:
        d = self.__dict__.copy()
        d["ranking"] = [list(h) for h in self.ranking[: max(self.ks)]]
        d["random_orders"] = [[list(h) for h in o[: max(self.ks)]] for o in self.random_orders]
        return d

    def intervals(self, n_boot: int = 1000, level: float = 0.95) -> dict[str, dict] | None:
        """:meth:`interval` of accuracy and answer probability, as the figure draws them (None without per-pair
        outcomes)."""
        out = {w: self.interval(w, n_boot, level) for w in ("accuracy", "answer_prob")}
        return None if out["accuracy"] is None else {w: {**b, "level": level} for w, b in out.items()}

    def figure(self, title: str | None = None):
        """Figure 3: accuracy and answer probability, effect-rank against random-rank heads, with bootstrap
        intervals over pairs where the per-pair outcomes are kept."""
        from circuits.viz.figures import knockout_panels

        return knockout_panels(self.to_json(), *([title] if title else []), intervals=self.intervals())

    @classmethod
    def from_json(cls, d: dict[str, Any], path: Path | str = "knockout curve") -> KnockoutCurve:
        """The curve :meth:`to_json` wrote; a field of another type is one :class:`ResultError` naming ``path`` and
        the field, and so are per-pair outcomes whose shape does not fit the curve's."""
        d = check_fields(cls, d, Path(path))
        missing = [f for f in ("ks", "ranking", "effect_accuracy", "effect_prob", "random_orders", "random_accuracy",
                               "random_prob") if f not in d]
        if missing:
            raise ResultError(f"{path}: the knockout curve lacks {', '.join(missing)}")
        try:
            d["ranking"] = [Head(*h) for h in d["ranking"]]
            d["random_orders"] = [[Head(*h) for h in o] for o in d["random_orders"]]
        except TypeError:
            raise ResultError(f"{path}: 'ranking' and 'random_orders' hold [layer, head] pairs of integers") from None
        curve = cls(**d)
        n_k, n_s, n = len(curve.ks), len(curve.random_accuracy), curve.n_pairs
        shapes = {"effect_accuracy": (np.shape(curve.effect_accuracy), (n_k,)),
                  "random_accuracy": (np.shape(curve.random_accuracy), (n_s, n_k)),
                  "random_prob": (np.shape(curve.random_prob), (n_s, n_k))}
        if curve.effect_correct:
            shapes.update({f: (np.shape(getattr(curve, f)), want) for f, want in (
                ("effect_correct", (n_k, n)), ("effect_pair_prob", (n_k, n)), ("random_correct", (n_s, n_k, n)),
                ("random_pair_prob", (n_s, n_k, n)))})
        for f, (got, want) in shapes.items():
            if n_s == 0 and f.startswith("random") and got == (0,):
                continue
            if tuple(got) != want:
                raise ResultError(f"{path}: field {f!r} has shape {tuple(got)}, not {want} ({n_k} ks, {n_s} seeds"
                                  f"{f', {n} pairs' if n else ''})")
        for f in ("effect_accuracy", "effect_prob", "random_accuracy", "random_prob", "effect_pair_prob",
                  "random_pair_prob"):  # shares of pairs and probabilities: a 7.5 was drawn as "750%"
            check_rate(getattr(curve, f), f, path)
        if any(k < 0 for k in curve.ks):
            raise ResultError(f"{path}: field 'ks' holds {min(curve.ks)}; a count of heads knocked out is >= 0")
        return curve


def knockout_curve(
    model: Model,
    pairs: Sequence[PromptPair],
    ranking: Sequence[Head],
    ks: Sequence[int],
    seeds: Sequence[int] = (0, 1, 2, 3, 4),
    *,
    means: AblationValues | None = None,
    ablation: Ablation | str = Ablation.MEAN,
    **kwargs: Any,
) -> KnockoutCurve:
    """Knock out the top-k heads of ``ranking`` and of ``len(seeds)`` random orders for each k in ``ks``.

    ``ranking``: heads, most important first: :class:`Head` s or what ``Scores.ranked()``/``key_heads()`` return."""
    ranking, _ = checked_set(model, ranking, ())
    ks = sorted(set(int(k) for k in ks))
    if not ks or ks[0] < 0 or ks[-1] > len(ranking):
        raise ValueError(f"k must lie in 0..{len(ranking)}, got {ks}")
    pairs = list(pairs)
    means = replacement_values(model, pairs, ablation) if means is None else means
    kwargs["means"] = means
    orders = [random_order(model.cfg.n_layers, model.cfg.n_heads, s) for s in seeds]
    # Every (k, order) run is one item; under torchrun the items are split across ranks and gathered
    # (circuits.distributed.map_items), each computed exactly as in one process.
    runs = [(-1, 0)] + [(j, k) for k in ks if k for j in range(-1, len(orders))]
    heads_of = lambda j, k: list(ranking[:k]) if j < 0 else orders[j][:k]  # noqa: E731
    # The runs are batched across ablation sets (knockout_many); under torchrun each rank takes one share of them.
    n_parts = min(len(runs), D.world_size()) if D.is_distributed() else 1
    parts = [runs[i::n_parts] for i in range(n_parts)]
    done = D.map_items(lambda part: knockout_many(model, pairs, [(heads_of(*r), ()) for r in part], **kwargs), parts,
                       costs=[len(p) for p in parts], what="shares of the knockout runs (k, order)")
    scores = {r: sc for part, part_scores in zip(parts, done) for r, sc in zip(part, part_scores)}
    pick = lambda j, k: scores[(j, k) if k else (-1, 0)]  # noqa: E731
    eff_acc = [pick(-1, k).accuracy for k in ks]
    eff_p = [pick(-1, k).answer_prob for k in ks]
    rnd_acc = [[pick(j, k).accuracy for k in ks] for j in range(len(orders))]
    rnd_p = [[pick(j, k).answer_prob for k in ks] for j in range(len(orders))]
    top = max(ks)  # the heads any k knocks out: what the curve keeps (and saves)
    return KnockoutCurve(list(ks), [Head(*h) for h in ranking[:top]], eff_acc, eff_p, [o[:top] for o in orders], rnd_acc,
                         rnd_p, [pick(-1, k).correct for k in ks], [pick(-1, k).probs for k in ks],
                         [[pick(j, k).correct for k in ks] for j in range(len(orders))],
                         [[pick(j, k).probs for k in ks] for j in range(len(orders))])


@dataclass(eq=False, repr=False)
class KnockoutResult(ShowsFigure, Result[KnockoutConfig]):  # in a notebook: the figure
    """Figure 3: the knockout curves of one task, with the config that made them."""

    kind = "knockout"

    curve: KnockoutCurve
    task: str = ""
    n_pairs: int = 0

    def figure(self):
        """Figure 3 titled with what was knocked out: the operation and the number of pairs."""
        seeds = len(self.curve.random_accuracy)
        bands = " with 95% bootstrap intervals over pairs" if self.curve.n_pairs else ""
        from circuits.types import top_heads_label

        ranked = top_heads_label(max(self.curve.ks), self.config.key_rule).replace(f"top {max(self.curve.ks)}", "top-k")
        return self.curve.figure(f"Mean-ablation knockout on {self.task or 'the task'}: the {ranked} vs "
                                 f"random heads, {self.n_pairs or '?'} pairs, {seeds} random seeds{bands} (Figure 3)")

    def _write(self, folder: Path) -> None:
        write_json(folder / "data.json", {"curve": self.curve.to_json(), "n_pairs": self.n_pairs, "task": self.task})

    @classmethod
    def _read(cls, folder: Path, config: KnockoutConfig) -> KnockoutResult:
        path = folder / "data.json"
        d = read_json(path)
        if not isinstance(d, dict) or not isinstance(d.get("curve"), dict):
            raise ResultError(f"{path}: expected a JSON object with a 'curve' object")
        task, n_pairs = d.get("task", ""), d.get("n_pairs", 0)
        if not isinstance(task, str):
            raise ResultError(f"{path}: field 'task' is {brief(task, 40)} ({type(task).__name__}), not str")
        if not isinstance(n_pairs, int) or isinstance(n_pairs, bool):
            raise ResultError(f"{path}: field 'n_pairs' is {brief(n_pairs, 40)} ({type(n_pairs).__name__}), not int")
        return cls(config, KnockoutCurve.from_json(d["curve"], path), task, n_pairs)
