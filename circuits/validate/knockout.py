"""Knockout of heads and MLPs (Section 4.1 "Validation", Figure 3; Wang et al., 2023a): the job-level parts --
the ablation sets, the scores (accuracy, answer probability), Figure 3's curves, the config and the result.

What a knocked-out component's output becomes (mean over the template group, zero, resample) is
:mod:`circuits.patching.ablation.values`; the masked forward that writes it, many ablation sets per pass with the
shared few-shot prefix run once, is :mod:`circuits.patching.ablation.executor`. The names knockout has always exported
(:func:`compute_means`, :func:`replacement_values`, :class:`MeanActivations`, ...) are importable from here too.
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

import torch
from jaxtyping import Float
from torch import Tensor

from circuits import distributed as D
from circuits.data.pairs import PromptPair
from circuits.validate.config import KnockoutConfig
from circuits.io import read_json, write_json
from circuits.models.backend import Model
from circuits.models.forward import unembed_end
from circuits.patching.ablation.executor import AblationMasks, ablated_residuals
from circuits.patching.ablation.values import (  # noqa: F401  (the names knockout has always exported)
    AblationValues,
    GroupKey,
    MeanActivations,
    ResampledActivations,
    compute_means,
    group_key,
    replacement_values,
    resample_values,
    zero_values,
)
from circuits.results import Result
from circuits.types import Ablation, Component, Head, all_heads


def checked_set(model: Model, heads: Sequence[Any], mlps: Sequence[Any]) -> tuple[list[Head], list[int]]:
    """An ablation set as :class:`Head` s and MLP layers, each inside the model (a ValueError saying which is not).

    ``heads``: anything :meth:`Head.parse` reads, the ``(Head, effect)`` pairs ``key_heads()``/``ranked()`` return
    included; ``mlps``: layer indices, ``"MLP19"``, MLP :class:`Component` s or the ``(layer, effect)`` pairs
    ``key_mlps()`` returns."""
    cfg = model.cfg
    hs = [Head.parse(h).check(cfg.n_layers, cfg.n_heads) for h in heads]
    ms = []
    for layer in mlps:
        if isinstance(layer, tuple) and len(layer) == 2 and isinstance(layer[1], float):
            layer = layer[0]  # (layer, effect) from key_mlps()
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


def _shares_prefix(values: AblationValues) -> bool:
    """Whether pairs with equal few-shot prefixes can run it once: the values at the prefix's positions must be the
    same for every pair of the group (means and zero; a resample donor's prefix may differ)."""
    return values.kind in ("mean", "zero")


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
    forward pass (the mechanism's one executor, :func:`circuits.patching.ablation.ablated_residuals`): a row is one
    (set, pair), and its hooks replace only the heads and MLPs of its own set. Figure 3's curve (every k of the
    effect order and of each random order) is then a handful of forward passes instead of one run per (k, order).

    A prefix group (pairs whose few-shot prefixes are equal) runs its prefix once per set -- knocked-out heads change
    the prefix's keys and values too -- and the question bodies of all its pairs under all those sets together.
    Resample ablation runs full prompts (a donor's prefix may differ)."""
    pairs = list(pairs)
    masks = AblationMasks.of_sets(model, [checked_set(model, h, m) for h, m in sets])
    share = share_prefix and _shares_prefix(means)
    return ablated_residuals(model, [p.reference_token_ids for p in pairs], masks, means,
                             [means.source_of(p) for p in pairs],
                             prefix_lengths=[p.prefix_length for p in pairs] if share else None,
                             rows_per_batch=rows_per_batch)


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
    return [score(unembed_end(model, resid[s]).cpu(), answers) for s in range(len(sets))]


@dataclass
class KnockoutScore:
    """Accuracy (argmax is the answer) and mean answer probability over pairs."""

    accuracy: float
    answer_prob: float
    correct: list[bool] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"accuracy": self.accuracy, "answer_prob": self.answer_prob}


def score(logits: Float[Tensor, "pair d_vocab"], answers: Sequence[int]) -> KnockoutScore:
    ans = torch.tensor(list(answers))
    probs = logits.softmax(-1)
    hit = probs.argmax(-1) == ans
    p = probs[torch.arange(len(ans)), ans]
    return KnockoutScore(float(hit.float().mean()), float(p.mean()), [bool(x) for x in hit])


def knockout(
    model: Model,
    pairs: Sequence[PromptPair],
    heads: Sequence[Head] = (),
    mlps: Sequence[int] = (),
    *,
    means: AblationValues | None = None,
    ablation: Ablation | str = Ablation.MEAN,
    **kwargs: Any,
) -> KnockoutScore:
    """Accuracy and answer probability on ``pairs`` with ``heads``/``mlps`` knocked out.

    ``heads``: :class:`Head` s, ``"20.8"`` or the ``(Head, effect)`` pairs ``key_heads()`` returns (so
    ``knockout(model, pairs, result.key_heads())`` works); ``mlps``: layers or ``key_mlps()``'s pairs. Checked before
    any work. ``means``: the replacement values (default: :func:`replacement_values` of ``pairs`` for ``ablation``);
    compute them once with :func:`replacement_values` and pass them to reuse them across calls."""
    heads, mlps = checked_set(model, heads, mlps)
    pairs = list(pairs)
    means = replacement_values(model, pairs, ablation) if means is None else means
    logits = knockout_logits(model, pairs, means, heads, mlps, **kwargs)
    return score(logits, [p.answer_token_id for p in pairs])


def random_order(n_layers: int, n_heads: int, seed: int) -> list[Head]:
    """Every head in a seeded random order (the "random-rank" of Figure 3)."""
    heads = all_heads(n_layers, n_heads)
    random.Random(seed).shuffle(heads)
    return heads


@dataclass
class KnockoutCurve:
    """Figure 3: scores after knocking out the first k heads of the effect ranking and of random rankings."""

    ks: list[int]
    ranking: list[Head]
    effect_accuracy: list[float]
    effect_prob: list[float]
    random_orders: list[list[Head]]
    random_accuracy: list[list[float]]  # [seed][k]
    random_prob: list[list[float]]

    def to_json(self) -> dict[str, Any]:
        d = self.__dict__.copy()
        d["ranking"] = [list(h) for h in self.ranking[: max(self.ks)]]
        d["random_orders"] = [[list(h) for h in o[: max(self.ks)]] for o in self.random_orders]
        return d

    def _repr_mimebundle_(self, include=None, exclude=None, **kwargs):
        """In a notebook: the figure (see :mod:`circuits.viz.notebook`)."""
        from circuits.viz.notebook import figure_bundle

        return figure_bundle(self, include, exclude, **kwargs)

    def figure(self):
        """Figure 3: accuracy and answer probability, effect-rank against random-rank heads."""
        from circuits.viz.figures import knockout_panels

        return knockout_panels(self.to_json())

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> KnockoutCurve:
        d = dict(d)
        d["ranking"] = [Head(*h) for h in d["ranking"]]
        d["random_orders"] = [[Head(*h) for h in o] for o in d["random_orders"]]
        return cls(**d)


def knockout_curve(
    model: Model,
    pairs: Sequence[PromptPair],
    ranking: Sequence[Head],
    ks: Sequence[int],
    seeds: Sequence[int] = (0, 1, 2),
    *,
    means: AblationValues | None = None,
    ablation: Ablation | str = Ablation.MEAN,
    **kwargs: Any,
) -> KnockoutCurve:
    """Knock out the top-k heads of ``ranking`` and of ``len(seeds)`` random orders for each k in ``ks``.

    ``ranking``: heads, most important first: :class:`Head` s or what ``ranked()``/``key_heads()`` return."""
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
                         rnd_p)


@dataclass(eq=False, repr=False)
class KnockoutResult(Result):
    """Figure 3: the knockout curves of one task, with the config that made them."""

    kind = "knockout"
    config_type = KnockoutConfig

    config: KnockoutConfig
    curve: KnockoutCurve
    task: str = ""
    n_pairs: int = 0

    def _repr_mimebundle_(self, include=None, exclude=None, **kwargs):
        """In a notebook: the figure (see :mod:`circuits.viz.notebook`)."""
        from circuits.viz.notebook import figure_bundle

        return figure_bundle(self, include, exclude, **kwargs)

    def figure(self):
        """Figure 3 titled with what was knocked out: the operation and the number of pairs."""
        from circuits.viz.figures import knockout_panels

        seeds = len(self.curve.random_accuracy)
        return knockout_panels(self.curve.to_json(), f"Knockout on {self.task or 'the task'}: key heads (effect rank) "
                               f"vs random heads, {self.n_pairs or '?'} pairs, {seeds} random seeds (Figure 3)")

    def _write(self, folder: Path) -> None:
        write_json(folder / "data.json", {"curve": self.curve.to_json(), "n_pairs": self.n_pairs, "task": self.task})

    @classmethod
    def _read(cls, folder: Path, config: KnockoutConfig) -> KnockoutResult:
        d = read_json(folder / "data.json")
        return cls(config, KnockoutCurve.from_json(d["curve"]), d.get("task", ""), int(d.get("n_pairs", 0)))
