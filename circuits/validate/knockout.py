"""Knockout of heads and MLPs by mean ablation (Section 4.1 "Validation", Figure 3; Wang et al., 2023a), zero
ablation, or resample ablation (each pair gets another pair's counterfactual value, position by position).

Knocking out a head replaces its output (``hook_z``, per head) by its mean over the counterfactual
prompts X_c, at every position; knocking out an MLP replaces ``hook_mlp_out`` the same way. Means
are taken per template position where prompts align: prompts of one template and one token length
share every position's meaning, so a mean group is ``(template_id, length)``. For prompts that do not
align with any template (the transfer sets of Figure 4), :func:`compute_means` with ``pooled=True``
gives one mean per head, averaged over every position of every counterfactual prompt.

Speed. Rows that share their few-shot prefix (every Figure 8 template renders the same prefix) run
the prefix once, with the knockout hooks on, into a key/value cache that is then repeated along the
batch; only the short question bodies run per row. Tests assert this equals the plain full-prompt run.
:func:`knockout_many` runs many ablation sets in the same forward passes (a per-row mask of the knocked-out heads
and MLPs): Figure 3's curves, every k of every order, are a few batched passes.
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
from tqdm.auto import tqdm
from circuits.models.backend import Model
from circuits.models.backend import act_name as get_act_name
from circuits.models.backend import continue_prefix, final_residual, prefix_sharing

from circuits import distributed as D
from circuits.data.pairs import PromptPair
from circuits.models.forward import end_residuals, prefix_cache, unembed_end
from circuits.validate.config import KnockoutConfig
from circuits.results import Result
from circuits.io import read_json, write_json
from circuits.types import Ablation, Component, Head, all_heads
from circuits.validate.groups import GroupKey, group_index, group_key
from circuits.validate.resample import ResampledActivations, resample_values, resampled_logits


@dataclass
class MeanActivations:
    """Mean ``hook_z`` and ``hook_mlp_out`` per group and position.

    ``z[layer]`` is ``[group, pos, head, d_head]`` and ``mlp_out[layer]`` ``[group, pos, d_model]``;
    with ``pooled`` there is one group and one position, used at every position of any prompt.
    """

    z: list[Float[Tensor, "group pos head d_head"]]
    mlp_out: list[Float[Tensor, "group pos d_model"]]
    groups: dict[GroupKey, int]
    pooled: bool
    n_prompts: int

    def group_of(self, pair: PromptPair) -> int:
        return group_index(self.groups, self.pooled, pair, "mean",
                           "Take means over counterfactuals of the same templates, or use pooled=True.")


@torch.no_grad()
def compute_means(
    model: Model,
    pairs: Sequence[PromptPair],
    *,
    source: str = "counterfactual",
    pooled: bool = False,
    batch_size: int = 32,
    progress: bool = True,
) -> MeanActivations:
    """Means of every head's ``hook_z`` and every MLP's output over ``pairs``' prompts.

    Args:
        source: ``"counterfactual"`` (the paper: X_c) or ``"reference"`` (used by tests).
        pooled: one mean per head over all positions and prompts, instead of per (template, length, position).
        progress: a bar over the prompts run (a few seconds per batch on a CPU for a 135M model).
    """
    if source not in ("counterfactual", "reference"):
        raise ValueError(f"source must be 'counterfactual' or 'reference', got {source!r}")
    if not pairs:
        raise ValueError("compute_means needs at least one pair.")
    L = model.cfg.n_layers
    names = [get_act_name("z", l) for l in range(L)] + [get_act_name("mlp_out", l) for l in range(L)]
    by_group: dict[GroupKey, list[PromptPair]] = {}
    for p in pairs:
        by_group.setdefault(group_key(p), []).append(p)
    sums_z: list[list[Tensor]] = [[] for _ in range(L)]
    sums_m: list[list[Tensor]] = [[] for _ in range(L)]
    counts: list[int] = []
    total_z = [None] * L
    total_m = [None] * L
    n_pos_total = 0
    bar = tqdm(total=len(pairs), desc=f"means ({source} prompts)", unit="prompt", disable=not progress or not D.is_main())
    for key, group in by_group.items():
        acc_z: list[Tensor | None] = [None] * L
        acc_m: list[Tensor | None] = [None] * L
        for i in range(0, len(group), batch_size):
            chunk = group[i : i + batch_size]
            ids = [p.counterfactual_token_ids if source == "counterfactual" else p.reference_token_ids for p in chunk]
            tokens = torch.tensor(ids, device=model.cfg.device)
            _, cache = model.run_with_cache(tokens, names_filter=lambda n: n in names, stop_at_layer=L)
            for l in range(L):
                z = cache[get_act_name("z", l)].float().sum(0)
                m = cache[get_act_name("mlp_out", l)].float().sum(0)
                acc_z[l] = z if acc_z[l] is None else acc_z[l] + z
                acc_m[l] = m if acc_m[l] is None else acc_m[l] + m
            bar.update(len(chunk))
        counts.append(len(group))
        n_pos_total += len(group) * key[1]
        for l in range(L):
            sums_z[l].append(acc_z[l] / len(group))
            sums_m[l].append(acc_m[l] / len(group))
            if pooled:
                tz, tm = acc_z[l].sum(0), acc_m[l].sum(0)
                total_z[l] = tz if total_z[l] is None else total_z[l] + tz
                total_m[l] = tm if total_m[l] is None else total_m[l] + tm
    bar.close()
    dtype = model.cfg.dtype
    if pooled:
        z = [(total_z[l] / n_pos_total)[None, None].to(dtype) for l in range(L)]
        m = [(total_m[l] / n_pos_total)[None, None].to(dtype) for l in range(L)]
        return MeanActivations(z, m, {}, True, len(pairs))
    width = max(k[1] for k in by_group)

    def stack(parts: list[Tensor]) -> Tensor:
        out = torch.zeros((len(parts), width, *parts[0].shape[1:]), dtype=dtype, device=parts[0].device)
        for g, t in enumerate(parts):
            out[g, : t.shape[0]] = t.to(dtype)
        return out

    z = [stack(sums_z[l]) for l in range(L)]
    m = [stack(sums_m[l]) for l in range(L)]
    return MeanActivations(z, m, {k: g for g, k in enumerate(by_group)}, False, len(pairs))


def zero_values(model: Model) -> MeanActivations:
    """Replacement values of zero ablation: every head's ``hook_z`` and MLP output set to 0."""
    L, cfg = model.cfg.n_layers, model.cfg
    z = [torch.zeros(1, 1, cfg.n_heads, cfg.d_head, dtype=cfg.dtype, device=cfg.device) for _ in range(L)]
    m = [torch.zeros(1, 1, cfg.d_model, dtype=cfg.dtype, device=cfg.device) for _ in range(L)]
    return MeanActivations(z, m, {}, True, 0)


def replacement_values(model: Model, pairs: Sequence[PromptPair], ablation: Ablation | str = Ablation.MEAN,
                       *, pooled: bool = False, seed: int = 0) -> MeanActivations | ResampledActivations:
    """What a knocked-out component's output becomes: its mean over ``pairs``' counterfactual prompts (the
    paper's), zero, or another pair's counterfactual value (resample; ``seed`` draws the donors)."""
    ablation = Ablation.parse(ablation)
    if ablation is Ablation.ZERO:
        return zero_values(model)
    if ablation is Ablation.RESAMPLE:
        return resample_values(model, pairs, seed=seed)
    return compute_means(model, pairs, pooled=pooled)


def _hooks(means: MeanActivations, group: int, offset: int, heads: Sequence[Head], mlps: Sequence[int]) -> list:
    """Forward hooks that write the means of ``heads``/``mlps`` at positions ``offset...``."""
    by_layer: dict[int, list[int]] = {}
    for l, h in heads:
        by_layer.setdefault(l, []).append(h)
    hooks: list[tuple[str, Any]] = []

    def at(table: Tensor, n_pos: int) -> Tensor:
        if means.pooled:
            return table[0, 0]
        return table[group, offset : offset + n_pos]

    for layer, hs in by_layer.items():
        idx = torch.tensor(sorted(set(hs)))

        def z_hook(z: Tensor, hook: Any, layer: int = layer, idx: Tensor = idx) -> Tensor:
            mean = at(means.z[layer], z.shape[1]).to(z.device)
            z[:, :, idx.to(z.device)] = mean[..., idx.to(mean.device), :].to(z.dtype)
            return z

        hooks.append((get_act_name("z", layer), z_hook))
    for layer in sorted(set(mlps)):

        def m_hook(out: Tensor, hook: Any, layer: int = layer) -> Tensor:
            return at(means.mlp_out[layer], out.shape[1]).to(out).expand_as(out).clone()

        hooks.append((get_act_name("mlp_out", layer), m_hook))
    return hooks


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


@torch.no_grad()
def knockout_logits(
    model: Model,
    pairs: Sequence[PromptPair],
    means: MeanActivations | ResampledActivations,
    heads: Sequence[Head] = (),
    mlps: Sequence[int] = (),
    *,
    batch_size: int = 64,
    share_prefix: bool = True,
) -> Float[Tensor, "pair d_vocab"]:
    """END logits of each pair's reference prompt with ``heads`` and ``mlps`` mean-ablated.

    Rows are grouped by mean group, few-shot prefix and length (no padding anywhere). With
    ``share_prefix`` a group's common prefix runs once into a key/value cache; the result is the same
    as running every full prompt (asserted in tests) but costs a fraction of it. ``means`` may also be
    :class:`ResampledActivations` (resample ablation).
    """
    heads, mlps = checked_set(model, heads, mlps)
    if not isinstance(means, MeanActivations):  # resample ablation: per-pair donors (validate.resample)
        return resampled_logits(model, list(pairs), means, heads, mlps, batch_size)
    keys, prefixes = [], []
    for p in pairs:
        # Position-wise means need equal lengths; pooled means allow right padding (causal: pads
        # after END never reach it).
        keys.append((means.group_of(p), -1 if means.pooled else len(p.reference_token_ids)))
        prefixes.append(p.prefix_length if share_prefix else 0)
    resid = end_residuals(
        model, [p.reference_token_ids for p in pairs], prefixes, group_keys=keys, batch_size=batch_size,
        hooks=lambda key, offset: _hooks(means, key[0], offset, heads, mlps),
    )
    return unembed_end(model, resid).cpu()


AblationSet = tuple[Sequence[Head], Sequence[int]]


@torch.no_grad()
def knockout_residuals(
    model: Model,
    pairs: Sequence[PromptPair],
    sets: Sequence[AblationSet],
    means: MeanActivations | ResampledActivations,
    *,
    rows_per_batch: int = 256,
    share_prefix: bool = True,
) -> Float[Tensor, "set pair d_model"]:
    """Final END residuals of every pair under each ablation set ``(heads, mlps)`` of ``sets``, many sets per
    forward pass: a row is one (set, pair), and its hooks replace only the heads and MLPs of its own set (a per-row
    mask), as the patching engine batches senders. Figure 3's curve (every k of the effect order and of each random
    order) is then a handful of forward passes instead of one run per (k, order).

    A prefix group (pairs whose few-shot prefixes are equal) runs its prefix once per set -- knocked-out heads change
    the prefix's keys and values too -- and the question bodies of all its pairs under all those sets together,
    right-padded (pads after END never reach it). Resample ablation runs full prompts (a donor's prefix may differ).
    Equal to :func:`knockout_logits` per set (asserted in tests)."""
    pairs = list(pairs)
    cfg, L = model.cfg, model.cfg.n_layers
    device = cfg.device
    S, P = len(sets), len(pairs)
    head_mask = torch.zeros(S, L, cfg.n_heads, dtype=torch.bool)
    mlp_mask = torch.zeros(S, L, dtype=torch.bool)
    for s, (heads, mlps) in enumerate(sets):
        heads, mlps = checked_set(model, heads, mlps)
        for l, h in heads:
            head_mask[s, l, h] = True
        for l in mlps:
            mlp_mask[s, l] = True
    resample = not isinstance(means, MeanActivations)
    pooled = (not resample) and means.pooled  # type: ignore[union-attr]
    src = [means.row_of(p) if resample else means.group_of(p) for p in pairs]  # type: ignore[union-attr]
    groups: dict[tuple[int, ...], list[int]] = {}
    share = share_prefix and not resample and prefix_sharing(model)  # a cache that gives the full run's numbers
    for i, p in enumerate(pairs):
        n_pre = p.prefix_length if share else 0
        n_pre = min(n_pre, len(p.reference_token_ids) - 1)  # every row keeps at least its last token
        groups.setdefault(tuple(p.reference_token_ids[:n_pre]), []).append(i)

    def hooks(masks: Tensor, mmasks: Tensor, rows_src: Tensor, offset: int) -> list:
        """Per-row replacement: ``masks`` ``[row, layer, head]``, ``mmasks`` ``[row, layer]``, each row's values
        from table row ``rows_src`` at positions ``offset...``."""
        out: list[tuple[str, Any]] = []

        def values(table: Tensor, n: int) -> Tensor:
            if pooled:
                return table[0, 0]
            return table[rows_src.to(table.device), offset : offset + n]

        for l in range(L):
            if masks[:, l].any():
                m = masks[:, l].to(device)

                def z_hook(z: Tensor, hook: Any, l: int = l, m: Tensor = m) -> Tensor:
                    v = values(means.z[l], z.shape[1]).to(z)
                    return torch.where(m[:, None, :, None], v, z)

                out.append((get_act_name("z", l), z_hook))
            if mmasks[:, l].any():
                mm = mmasks[:, l].to(device)

                def m_hook(o: Tensor, hook: Any, l: int = l, mm: Tensor = mm) -> Tensor:
                    v = values(means.mlp_out[l], o.shape[1]).to(o)
                    return torch.where(mm[:, None, None], v, o)

                out.append((get_act_name("mlp_out", l), m_hook))
        return out

    out = torch.empty(S, P, cfg.d_model, dtype=cfg.dtype, device=model.unembed.W_U.device)
    for pre, members in groups.items():
        n_pre = len(pre)
        for b0 in range(0, len(members), rows_per_batch):
            block = members[b0 : b0 + rows_per_batch]
            nb = len(block)
            lengths = torch.tensor([len(pairs[i].reference_token_ids) for i in block])
            width = int(lengths.max()) - n_pre
            body = torch.zeros(nb, width, dtype=torch.long)
            for r, i in enumerate(block):
                body[r, : int(lengths[r]) - n_pre] = torch.tensor(pairs[i].reference_token_ids[n_pre:])
            block_src = torch.tensor([src[i] for i in block])
            per = max(1, rows_per_batch // nb)  # sets per forward pass
            for s0 in range(0, S, per):
                sl = slice(s0, min(S, s0 + per))
                ns = sl.stop - sl.start
                cache = None
                if n_pre:  # one prefix row per set, each repeated for the block's pairs
                    prefix = torch.tensor(pre, device=device)[None].expand(ns, -1)
                    cache = prefix_cache(model, prefix, hooks(head_mask[sl], mlp_mask[sl], block_src[:1].expand(ns), 0),
                                         nb)
                rows_body = body.repeat(ns, 1).to(device)
                row_hooks = hooks(head_mask[sl].repeat_interleave(nb, 0), mlp_mask[sl].repeat_interleave(nb, 0),
                                  block_src.repeat(ns), n_pre)
                with model.hooks(fwd_hooks=row_hooks):
                    if cache is None:
                        resid = final_residual(model, rows_body)
                    else:
                        resid = continue_prefix(model, rows_body, cache)
                ends = (lengths - n_pre - 1).repeat(ns).to(resid.device)
                end = resid[torch.arange(len(ends), device=resid.device), ends].reshape(ns, nb, -1)
                out[sl][:, torch.tensor(block, device=out.device)] = end.to(out.device)
    return out


@torch.no_grad()
def knockout_many(
    model: Model,
    pairs: Sequence[PromptPair],
    sets: Sequence[AblationSet],
    *,
    means: MeanActivations | ResampledActivations | None = None,
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
    means: MeanActivations | ResampledActivations | None = None,
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
    means: MeanActivations | ResampledActivations | None = None,
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
        return self.curve.figure()

    def _write(self, folder: Path) -> None:
        write_json(folder / "data.json", {"curve": self.curve.to_json(), "n_pairs": self.n_pairs, "task": self.task})

    @classmethod
    def _read(cls, folder: Path, config: KnockoutConfig) -> KnockoutResult:
        d = read_json(folder / "data.json")
        return cls(config, KnockoutCurve.from_json(d["curve"]), d.get("task", ""), int(d.get("n_pairs", 0)))
