"""What an ablated component's output becomes: one type, :class:`AblationValues`, for every kind of replacement.

Kinds (:data:`VALUE_KINDS`), each a table per site (``hook_z`` per head, ``hook_mlp_out``, ``hook_post`` per neuron)
of shape ``[source, pos, ...]``, and a rule that finds a pair's source row:

- ``"mean"``: the mean over the counterfactual prompts X_c of the pair's template group, per position (Section 4.1
  "Validation", after Wang et al. 2023a; :func:`compute_means`). Prompts of one template and one token length share
  every position's meaning, so a group is ``(template_id, length)`` (:func:`group_key`). With ``pooled`` one mean
  per site over every position of every prompt (``[1, 1, ...]``), used at every position of any prompt (the transfer
  sets of Figure 4, which align with no template).
- ``"end_mean"``: the mean over the pairs' reference runs per position counted back from END
  (:func:`end_aligned_mean`): needs no template (faithfulness's mean, as MIB).
- ``"zero"``: zero (:func:`zero_values`).
- ``"resample"``: another pair's counterfactual value, position by position (Chan et al. 2022): a donor of the same
  template group drawn by a seeded derangement (:func:`resample_values`).
- ``"counterfactual"``: the pair's own counterfactual run (MIB's "patching"; :func:`per_pair_values`).

:mod:`circuits.patching.ablation.executor` runs the masked forward that writes them.
"""

from __future__ import annotations

import random
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

import torch
from jaxtyping import Float, Int
from torch import Tensor
from tqdm.auto import tqdm

from circuits import distributed as D
from circuits.data.pairs import PromptPair
from circuits.models.backend import Model, act_name
from circuits.patching.core.end_layers import keep_hook
from circuits.types import Ablation

# The input node of MIB's graph (the embeddings): the residual stream entering the first block, as the edge graph's
# "input" sender (circuits.patching.circuit_curves.edge_curves) and EAP-IG's interpolation read it. MIB hooks
# hook_embed, the same tensor where no position embedding is added (rotary models: Llama, SmolLM2); a pair's two
# prompts have one length, so a counterfactual patch of either is the same intervention on any model.
INPUT_SITE = "blocks.0.hook_resid_pre"

ValueKind = Literal["mean", "end_mean", "zero", "resample", "counterfactual"]
VALUE_KINDS: tuple[str, ...] = ("mean", "end_mean", "zero", "resample", "counterfactual")
SourceRule = Literal["group", "pair", "row", "pooled"]
GroupKey = tuple[str, int]


def group_key(pair: PromptPair) -> GroupKey:
    """The mean group of a pair: its template and its token length (positions align within it)."""
    return (pair.template_id, len(pair.reference_token_ids))


def group_index(groups: Mapping[GroupKey, int], pooled: bool, pair: PromptPair, what: str, advice: str = "") -> int:
    """The row of ``pair``'s group in values taken per group (``groups``: key -> row); 0 when ``pooled`` (one row
    for every pair). A group that has no row is a ``KeyError`` naming ``what`` was missing, the groups there are and
    ``advice``."""
    if pooled:
        return 0
    key = group_key(pair)
    if key not in groups:
        raise KeyError(f"No {what} for template {key[0]!r} at length {key[1]}: means were taken over "
                       f"{sorted(groups)}" + (f". {advice}" if advice else ""))
    return groups[key]


@dataclass
class AblationValues:
    """Replacement values of every site, and how a pair finds its row in them.

    ``z[layer]`` is ``[source, pos, head, d_head]``, ``mlp_out[layer]`` ``[source, pos, d_model]`` and
    ``post[layer]`` ``[source, pos, d_mlp]`` (neuron layers only); ``None``: not taken (ablating it is an error). ``rule`` says
    what a source row is: a template group (``index``: :func:`group_key` -> row), a pair (``index``: its token ids
    -> row), the pair's place in the list the values were taken for (``"row"``), or one row and one position used
    at every position of every pair (``"pooled"``). ``donor`` (resample) names each pair's donor."""

    z: list[Tensor | None]
    mlp_out: list[Tensor | None]
    post: dict[int, Tensor | None] = field(default_factory=dict)
    index: dict[Hashable, int] = field(default_factory=dict)
    rule: SourceRule = "pooled"
    kind: ValueKind = "mean"
    n_prompts: int = 0
    donor: list[int] = field(default_factory=list)
    what: str = "mean"  # what a missing group is called in the error
    # the input node's values (MIB's graph: the embeddings, ``blocks.0.hook_resid_pre``) ``[source, pos, d_model]``;
    # None: not taken (the faithfulness engine's per-pair values and zeros take it; knockout's means do not)
    input: Tensor | None = None
    # Per source row (group means only): the leading tokens every prompt averaged into that row has in common. At
    # those positions the row's value is each of those prompts' own activation (causal attention), so a pair whose
    # own tokens start the same way runs them unablated (:meth:`clean_start`). Empty: no such claim.
    shared_tokens: list[tuple[int, ...]] = field(default_factory=list)

    @property
    def pooled(self) -> bool:
        return self.rule == "pooled"

    def source_of(self, pair: PromptPair, i: int = 0) -> int:
        """``pair``'s row in the tables (``i``: its place in the list, for ``rule="row"``)."""
        if self.rule == "row":
            return i
        if self.rule == "pair":
            key = (pair.reference_token_ids, pair.counterfactual_token_ids)
            if key not in self.index:
                raise KeyError("This pair was not among the pairs the resampled values were drawn for; draw them for "
                               "the pairs you knock out")
            return self.index[key]
        advice = "Take means over counterfactuals of the same templates, or use pooled=True." if self.what == "mean" \
            else ""
        return group_index(self.index, self.pooled, pair, self.what, advice)  # type: ignore[arg-type]

    def clean_start(self, pair: PromptPair, i: int = 0) -> int:
        """How many of ``pair``'s leading reference tokens these values leave as the clean run has them: positions
        where the pair's tokens equal the tokens every prompt of its mean group shares (``shared_tokens``), so that
        the mean there is the clean activation of those same tokens. Knocking out any set of components then changes
        nothing before that position (by induction over layers: what reaches it is the clean run), and the executor
        runs those positions once, unablated, for every set (:func:`~circuits.patching.ablation.executor.run_ablation`).
        0 for values that make no such claim (zero, resample, pooled or per-pair values)."""
        if self.kind != "mean" or self.rule != "group" or not self.shared_tokens:
            return 0
        common = self.shared_tokens[self.source_of(pair, i)]
        ids = pair.reference_token_ids
        n = 0
        while n < min(len(common), len(ids)) and common[n] == ids[n]:
            n += 1
        return n

    def table(self, site: str, layer: int) -> Tensor:
        """The table of ``site`` (``"z"``, ``"mlp_out"``, ``"post"``; ``"resid_pre"`` at layer 0: the input node) at
        ``layer``; a ValueError where these values were not taken for it (never a silent zero)."""
        if site == "resid_pre":
            table = self.input if layer == 0 else None
        else:
            table = self.post.get(layer) if site == "post" else (self.z if site == "z" else self.mlp_out)[layer]
        if table is None:
            what = f"MLP layer {layer}'s neurons (hook_post)" if site == "post" else \
                "the input node (blocks.0.hook_resid_pre)" if site == "resid_pre" else f"layer {layer}'s hook_{site}"
            parts = ["heads and MLPs"] if any(t is not None for t in self.z) else []
            parts += [f"the neurons of MLP layers {sorted(self.post)}"] if self.post else []
            cover = " and ".join(parts) or "nothing"
            raise ValueError(f"No replacement values for {what}; these values cover {cover}")
        return table


def _site_names(model: Model, heads_and_mlps: bool, neuron_layers: Sequence[int]) -> list[str]:
    L = model.cfg.n_layers
    names = [act_name(s, l) for l in range(L) for s in ("z", "mlp_out")] if heads_and_mlps else []
    return names + [act_name("post", l) for l in neuron_layers]


def _tables(model: Model, acts: Mapping[str, Tensor | None], neuron_layers: Sequence[int]
            ) -> tuple[list[Tensor | None], list[Tensor | None], dict[int, Tensor | None]]:
    L = model.cfg.n_layers
    return ([acts.get(act_name("z", l)) for l in range(L)], [acts.get(act_name("mlp_out", l)) for l in range(L)],
            {l: acts.get(act_name("post", l)) for l in neuron_layers})


@torch.no_grad()
def compute_means(
    model: Model,
    pairs: Sequence[PromptPair],
    *,
    source: str = "counterfactual",
    pooled: bool = False,
    batch_size: int = 32,
    progress: bool = True,
    heads_and_mlps: bool = True,
    neuron_layers: Sequence[int] = (),
) -> AblationValues:
    """Means of every head's ``hook_z`` and every MLP's output (and ``hook_post`` of ``neuron_layers``) over
    ``pairs``' prompts, per (template, length) group and position.

    Args:
        source: ``"counterfactual"`` (the paper: X_c) or ``"reference"`` (used by tests).
        pooled: one mean per site over all positions and prompts, instead of per (template, length, position).
        progress: a bar over the prompts run (a few seconds per batch on a CPU for a 135M model).
        heads_and_mlps: take ``hook_z`` and ``hook_mlp_out`` of every layer (``False``: only the neuron layers).
    """
    if source not in ("counterfactual", "reference"):
        raise ValueError(f"source must be 'counterfactual' or 'reference', got {source!r}")
    if not pairs:
        raise ValueError("compute_means needs at least one pair.")
    names = _site_names(model, heads_and_mlps, neuron_layers)
    stop = model.cfg.n_layers if heads_and_mlps else max(neuron_layers) + 1
    by_group: dict[GroupKey, list[PromptPair]] = {}
    for p in pairs:
        by_group.setdefault(group_key(p), []).append(p)
    prompt = (lambda p: p.counterfactual_token_ids) if source == "counterfactual" else (lambda p: p.reference_token_ids)
    means: dict[str, list[Tensor]] = {n: [] for n in names}
    total: dict[str, Tensor] = {}
    n_pos_total = 0
    bar = tqdm(total=len(pairs), desc=f"means ({source} prompts)", unit="prompt", disable=not progress or not D.is_main())
    # The groups' prompts run together, ``batch_size`` at a time, right-padded (causal attention: a pad after a
    # prompt never reaches its positions), so a handful of pairs over many templates is one forward, not one per group.
    order = [(g, p) for g, group in enumerate(by_group.values()) for p in group]
    acc: list[dict[str, Tensor]] = [{} for _ in by_group]
    for i in range(0, len(order), batch_size):
        chunk = order[i : i + batch_size]
        ids = [prompt(p) for _, p in chunk]
        width = max(map(len, ids))
        tokens = torch.tensor([list(t) + [t[-1]] * (width - len(t)) for t in ids], device=model.cfg.device)
        _, cache = model.run_with_cache(tokens, names_filter=lambda n: n in names, stop_at_layer=stop)
        rows_of: dict[int, list[int]] = {}
        for r, (g, _) in enumerate(chunk):
            rows_of.setdefault(g, []).append(r)
        for g, rows in rows_of.items():
            lengths = {len(ids[r]) for r in rows}
            if len(lengths) > 1:
                raise ValueError(f"compute_means: the {source} prompts of template {chunk[rows[0]][1].template_id!r} "
                                 f"at length {list(by_group)[g][1]} have {sorted(lengths)} tokens; a mean per position "
                                 "needs one length per group")
            idx, n_tok = torch.tensor(rows, device=tokens.device), lengths.pop()
            for n in names:
                s = cache[n][idx, :n_tok].float().sum(0)
                acc[g][n] = s if n not in acc[g] else acc[g][n] + s
        bar.update(len(chunk))
    for (key, group), a in zip(by_group.items(), acc):
        n_pos_total += len(group) * key[1]
        for n in names:
            means[n].append(a[n] / len(group))
            if pooled:
                t = a[n].sum(0)
                total[n] = t if n not in total else total[n] + t
    bar.close()
    dtype = model.cfg.dtype
    what = "mean" if heads_and_mlps else "neuron mean"
    if pooled:
        acts = {n: (total[n] / n_pos_total)[None, None].to(dtype) for n in names}
        return AblationValues(*_tables(model, acts, neuron_layers), rule="pooled", kind="mean",
                              n_prompts=len(pairs), what=what)
    width = max(k[1] for k in by_group)

    def stack(parts: list[Tensor]) -> Tensor:
        out = torch.zeros((len(parts), width, *parts[0].shape[1:]), dtype=dtype, device=parts[0].device)
        for g, t in enumerate(parts):
            out[g, : t.shape[0]] = t.to(dtype)
        return out

    acts = {n: stack(means[n]) for n in names}
    return AblationValues(*_tables(model, acts, neuron_layers), index={k: g for g, k in enumerate(by_group)},
                          rule="group", kind="mean", n_prompts=len(pairs), what=what,
                          shared_tokens=[common_start([prompt(p) for p in group]) for group in by_group.values()])


def common_start(prompts: Sequence[Sequence[int]]) -> tuple[int, ...]:
    """The leading tokens every prompt of ``prompts`` has in common."""
    first = tuple(prompts[0])
    n = len(first)
    for ids in prompts[1:]:
        n = min(n, len(ids))
        n = next((i for i in range(n) if ids[i] != first[i]), n)
    return first[:n]


def zero_values(model: Model, neuron_layers: Sequence[int] = ()) -> AblationValues:
    """Replacement values of zero ablation: every head's ``hook_z``, MLP output and neuron of ``neuron_layers`` set
    to 0 (pooled tables of zeros, ``[1, 1, ...]``)."""
    L, cfg = model.cfg.n_layers, model.cfg
    zeros = lambda *shape: torch.zeros(1, 1, *shape, dtype=cfg.dtype, device=cfg.device)  # noqa: E731
    return AblationValues([zeros(cfg.n_heads, cfg.d_head) for _ in range(L)], [zeros(cfg.d_model) for _ in range(L)],
                          {l: zeros(cfg.d_mlp) for l in neuron_layers}, rule="pooled", kind="zero",
                          input=zeros(cfg.d_model))


@torch.no_grad()
def resample_values(model: Model, pairs: Sequence[PromptPair], seed: int = 0,
                    batch_size: int = 32) -> AblationValues:
    """Donors for resample ablation: within each (template, length) group a seeded derangement of the pairs, and
    the donors' counterfactual ``hook_z`` and ``hook_mlp_out`` at every position, indexed by the *receiving* pair
    (a pair whose group has no other pair is its own donor)."""
    pairs = list(pairs)
    if not pairs:
        raise ValueError("resample_values needs at least one pair.")
    L, cfg = model.cfg.n_layers, model.cfg
    rng = random.Random(seed)
    donor = list(range(len(pairs)))
    by_group: dict[GroupKey, list[int]] = {}
    for i, p in enumerate(pairs):
        by_group.setdefault(group_key(p), []).append(i)
    for members in by_group.values():
        order = members[:]
        rng.shuffle(order)
        for j, i in enumerate(order):
            donor[i] = order[(j + 1) % len(order)]
    width = max(len(p.reference_token_ids) for p in pairs)
    z = [torch.zeros(len(pairs), width, cfg.n_heads, cfg.d_head, dtype=cfg.dtype, device=cfg.device) for _ in range(L)]
    m = [torch.zeros(len(pairs), width, cfg.d_model, dtype=cfg.dtype, device=cfg.device) for _ in range(L)]
    names = set(_site_names(model, True, ()))
    for members in by_group.values():
        for i in range(0, len(members), batch_size):
            chunk = members[i : i + batch_size]
            tokens = torch.tensor([pairs[donor[r]].counterfactual_token_ids for r in chunk], device=cfg.device)
            _, cache = model.run_with_cache(tokens, names_filter=lambda n: n in names, stop_at_layer=L)
            idx = torch.tensor(chunk, device=cfg.device)
            for l in range(L):
                z[l][idx, : tokens.shape[1]] = cache[act_name("z", l)]
                m[l][idx, : tokens.shape[1]] = cache[act_name("mlp_out", l)]
    rows = {(p.reference_token_ids, p.counterfactual_token_ids): i for i, p in enumerate(pairs)}
    return AblationValues(z, m, index=rows, rule="pair", kind="resample", n_prompts=len(pairs), donor=donor)  # type: ignore[arg-type]


def replacement_values(model: Model, pairs: Sequence[PromptPair], ablation: Ablation | str = Ablation.MEAN,
                       *, pooled: bool = False, seed: int = 0) -> AblationValues:
    """What a knocked-out component's output becomes: its mean over ``pairs``' counterfactual prompts (the
    paper's), zero, or another pair's counterfactual value (resample; ``seed`` draws the donors)."""
    ablation = Ablation.parse(ablation)
    if ablation is Ablation.ZERO:
        return zero_values(model)
    if ablation is Ablation.RESAMPLE:
        return resample_values(model, pairs, seed=seed)
    return compute_means(model, pairs, pooled=pooled)


def end_aligned_mean(acts: Float[Tensor, "pair pos ..."], end: Int[Tensor, " pair"]) -> Float[Tensor, "pair pos ..."]:
    """Each pair's position ``t`` gets the mean over pairs of the activation at the same offset ``end - t`` from
    their END (over the pairs that have that position); positions after END get zeros."""
    P, T = acts.shape[:2]
    end = end.to(acts.device)
    pos = torch.arange(T, device=acts.device)
    offset = end[:, None] - pos[None, :]  # [pair, pos]
    valid = offset >= 0
    flat_off = offset.clamp(min=0)
    total = acts.new_zeros((T, *acts.shape[2:]), dtype=torch.float32)
    count = torch.zeros(T, device=acts.device)
    total.index_add_(0, flat_off[valid], acts[valid].float())
    count.index_add_(0, flat_off[valid], torch.ones(int(valid.sum()), device=acts.device))
    mean = total / count.clamp(min=1).reshape(T, *[1] * (acts.ndim - 2))
    out = mean[flat_off].to(acts.dtype)
    return out * valid.reshape(P, T, *[1] * (acts.ndim - 2)).to(acts.dtype)


@torch.no_grad()
def record(model: Model, tokens: Int[Tensor, "pair pos"], names: Sequence[str]
           ) -> tuple[dict[str, Tensor], Float[Tensor, "pair pos d_model"]]:
    """``names``' activations at every position of ``tokens`` (one forward), and the final residual stream."""
    store: dict[str, Tensor] = {}
    resid = model.run_with_hooks(tokens, stop_at_layer=model.cfg.n_layers,
                                 fwd_hooks=[(n, keep_hook(store, n)) for n in names])
    return store, resid


def head_outputs(model: Model, layer: int, z: Float[Tensor, "... head d_head"]) -> Float[Tensor, "... head d_model"]:
    """Each head's write into the residual stream, ``z_h @ W_O[h]`` (``hook_result``, without the layer's bias), on
    ``z``'s device and dtype."""
    W_O = model.backend.attn_out(layer)[0]
    return torch.einsum("...he,hed->...hd", z, W_O.to(z.device, z.dtype))


@torch.no_grad()
def per_pair_values(model: Model, kind: ValueKind, reference: Int[Tensor, "pair pos"], end: Int[Tensor, " pair"],
                    neuron_layers: Sequence[int] = (), counterfactual: Mapping[str, Tensor] | None = None
                    ) -> AblationValues:
    """Values with one row per pair (``rule="row"``) at every position of the padded batch: ``"counterfactual"``
    (the activations ``counterfactual`` recorded from the counterfactual run, :func:`record`), ``"end_mean"`` (the
    END-aligned mean over the reference runs) or ``"zero"``."""
    if kind == "zero":
        return zero_values(model, neuron_layers)
    names = _site_names(model, True, neuron_layers) + [INPUT_SITE]
    if kind == "counterfactual":
        if counterfactual is None:
            raise ValueError("counterfactual values need the counterfactual run's activations (record())")
        acts = dict(counterfactual)
    elif kind == "end_mean":
        acts = {n: end_aligned_mean(a, end) for n, a in record(model, reference, names)[0].items()}
    else:
        raise ValueError(f"Unknown per-pair values {kind!r}; accepted: counterfactual, end_mean, zero")
    return AblationValues(*_tables(model, acts, neuron_layers), rule="row", kind=kind, n_prompts=len(end),
                          input=acts.get(INPUT_SITE))


def site_names(model: Model, neuron_layers: Sequence[int] = (), input_node: bool = False) -> list[str]:
    """The hook names the values cover: every layer's ``hook_z`` and ``hook_mlp_out``, ``hook_post`` of
    ``neuron_layers`` and, with ``input_node``, the input node's :data:`INPUT_SITE`."""
    return _site_names(model, True, neuron_layers) + ([INPUT_SITE] if input_node else [])


def end_values(kind: ValueKind, acts: Mapping[str, Tensor]) -> dict[str, Tensor]:
    """Replacement values at END only, ``[pair, ...]`` per site, from ``acts`` read at each pair's END (the
    counterfactual run's for ``"counterfactual"``, the reference run's otherwise): the END-aligned mean at END is
    the mean over every pair's END (:func:`end_aligned_mean` at offset 0)."""
    if kind == "end_mean":
        return {n: t.float().mean(0, keepdim=True).to(t.dtype).expand_as(t) for n, t in acts.items()}
    if kind == "zero":
        return {n: torch.zeros_like(t) for n, t in acts.items()}
    if kind == "counterfactual":
        return dict(acts)
    raise ValueError(f"Unknown END values {kind!r}; accepted: counterfactual, end_mean, zero")
