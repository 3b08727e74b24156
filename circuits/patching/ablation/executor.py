"""One ablation executor: a masked forward over batched sets of ablated components (knockout, faithfulness).

A *set* says which components it ablates (:class:`AblationMasks`: heads ``[set, layer, head]``, MLPs ``[set,
layer]``, neurons ``{layer: [set, d_mlp]}``); :class:`~circuits.patching.ablation.values.AblationValues` say what
their outputs become. :func:`ablated_residuals` runs every (set, pair) as one row of a batch -- many sets per forward
pass, one hook per site replacing, row by row, the units the row's set marks (a per-row mask, as the patching engine
batches senders) -- and returns the final residual stream at each pair's last token. Ablation is at every position,
or at the last token only (``at_end``).

Prefix sharing, through the backend's ``prefix_cache``/``continue_prefix`` where
:meth:`~circuits.models.backend.Backend.prefix_sharing` says the cache gives the full run's numbers (causal attention makes
it exact):

- ``ablate_prefix=True`` (knockout: the prefix is ablated too, so its keys and values depend on the set): pairs with
  equal prefix tokens run the prefix once per set, repeated for the pairs; the prefix reads the values of the
  group's first pair -- values at a shared prefix's positions are activations of those same tokens (means of a
  template group, a pair's counterfactual run), equal across the group.
- ``ablate_prefix=False`` (the values equal the clean run's there, e.g. counterfactual values before a pair's first
  difference, or ablation at END only): each pair's prefix runs once without hooks and is repeated for every set.

Tests assert the executor equals the plain loops of :mod:`circuits.patching.plain` for every kind of values.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch
from jaxtyping import Bool, Float, Int
from torch import Tensor

from circuits.data.pairs import PairBatch
from circuits.models.backend import Model, act_name
from circuits.patching.ablation.values import AblationValues
from circuits.patching.readouts import first_difference


@dataclass
class AblationMasks:
    """Which components each set ablates (``True``: replaced by its value): ``heads [set, layer, head]``,
    ``mlps [set, layer]`` (``hook_mlp_out``), ``neurons {layer: [set, d_mlp]}`` (``hook_post``)."""

    heads: Bool[Tensor, "set layer head"]
    mlps: Bool[Tensor, "set layer"]
    neurons: dict[int, Bool[Tensor, "set d_mlp"]] = field(default_factory=dict)

    def __len__(self) -> int:
        return self.heads.shape[0]

    @classmethod
    def of_sets(cls, model: Model, sets: Sequence[tuple[Sequence[tuple[int, int]], Sequence[int]]],
                neurons: Sequence[dict[int, Sequence[int]]] | None = None) -> AblationMasks:
        """Masks of ablation sets ``(heads, mlp layers)`` (and ``{layer: [neuron, ...]}`` per set)."""
        cfg = model.cfg
        S = len(sets)
        heads = torch.zeros(S, cfg.n_layers, cfg.n_heads, dtype=torch.bool)
        mlps = torch.zeros(S, cfg.n_layers, dtype=torch.bool)
        for s, (hs, ms) in enumerate(sets):
            for l, h in hs:
                heads[s, l, h] = True
            for l in ms:
                mlps[s, l] = True
        by_layer: dict[int, Tensor] = {}
        for s, ns in enumerate(neurons or []):
            for l, idx in ns.items():
                t = by_layer.setdefault(int(l), torch.zeros(S, cfg.d_mlp, dtype=torch.bool))
                t[s, torch.as_tensor(list(idx), dtype=torch.long)] = True
        return cls(heads, mlps, by_layer)


def site_hook(ablate: Bool[Tensor, "row unit"], table: Tensor | None, source: Int[Tensor, " row"], offset: int,
              pooled: bool, end: Int[Tensor, " row"] | None = None) -> Callable:
    """A hook that replaces, row by row, the units ``ablate`` marks (heads of ``hook_z``, neurons of ``hook_post``,
    or one unit for a whole ``hook_mlp_out``) by ``table`` (``[source, pos, ...]``; ``None``: zero) at the row's
    ``source`` row, positions ``offset...`` of the table being the call's positions; at every position, or at
    ``end`` (each row's last position among the tokens fed) only."""

    def values(act: Tensor, pos: Tensor | slice) -> Tensor:
        if pooled:
            return table[0, 0]  # type: ignore[index]
        src = source.to(table.device)  # type: ignore[union-attr]
        if isinstance(pos, slice):
            return table[src, pos]  # type: ignore[index]
        return table[src, pos.to(table.device) + offset]  # type: ignore[index]

    def hook(act: Tensor, hook: object) -> Tensor:
        R, trailing = act.shape[0], act.ndim - 3  # d_head after the head axis of hook_z
        mask = ablate.to(act.device).reshape(R, ablate.shape[1], *[1] * trailing)
        if end is None:
            new = torch.zeros_like(act) if table is None else values(act, slice(offset, offset + act.shape[1])).to(act)
            return torch.where(mask[:, None], new, act)
        rows, e = torch.arange(R, device=act.device), end.to(act.device)
        cur = act[rows, e]
        new = torch.zeros_like(cur) if table is None else values(act, e).to(act)
        act = act.clone()
        act[rows, e] = torch.where(mask, new, cur)
        return act

    return hook


def ablation_hooks(model: Model, masks: AblationMasks, row_set: Int[Tensor, " row"], values: AblationValues,
                   source: Int[Tensor, " row"], offset: int, end: Int[Tensor, " row"] | None = None) -> list:
    """One hook per site that some row ablates: row ``r`` ablates what set ``row_set[r]`` marks, with the values of
    source row ``source[r]`` (:func:`site_hook`)."""
    device = model.cfg.device
    hooks = []

    def add(site: str, layer: int, ablate: Tensor) -> None:
        if bool(ablate.any()):
            hooks.append((act_name(site, layer), site_hook(ablate.to(device), values.table(site, layer), source,
                                                           offset, values.pooled, end)))

    for l in range(model.cfg.n_layers):
        add("z", l, masks.heads[row_set, l])
        if l in masks.neurons:
            add("post", l, masks.neurons[l][row_set])
        add("mlp_out", l, masks.mlps[row_set, l][:, None])
    return hooks


def shared_start(batch: PairBatch) -> Int[Tensor, " pair"]:
    """Each pair's tokens before its prompts differ, at most END (every row keeps its END to run): the prefix
    counterfactual values leave as it is (``ablate_prefix=False``), the pair's two runs being the same there
    (:func:`~circuits.patching.readouts.first_difference` capped at END)."""
    return torch.minimum(first_difference(batch), batch.end)


@torch.no_grad()
def ablated_residuals(
    model: Model,
    tokens: Sequence[Sequence[int]],
    masks: AblationMasks,
    values: AblationValues,
    sources: Sequence[int],
    *,
    prefix_lengths: Sequence[int] | None = None,
    ablate_prefix: bool = True,
    at_end: bool = False,
    rows_per_batch: int = 256,
) -> Float[Tensor, "set pair d_model"]:
    """The final residual stream at each pair's last token under every ablation set of ``masks``.

    Args:
        tokens: one token list per pair (its last token is its END; rows are right-padded, and pads after END never
            reach it).
        sources: each pair's row in ``values`` (:meth:`AblationValues.source_of`).
        prefix_lengths: tokens at the start of each pair that pairs may share (run once, see the module docstring);
            ``None``: whole prompts. Every pair keeps at least its last token.
        ablate_prefix: whether the ablation reaches the prefix (then it runs once per set); ``False`` when the
            values equal the clean run there (the prefix then runs once per pair for every set).
        at_end: ablate at each pair's last token only (the prefix is then never ablated).
        rows_per_batch: rows (set x pair) per forward pass.
    """
    cfg = model.cfg
    S, P = len(masks), len(tokens)
    ablate_prefix = ablate_prefix and not at_end
    share = prefix_lengths is not None and model.backend.prefix_sharing()
    groups: dict[object, list[int]] = {}
    for i, ids in enumerate(tokens):
        n_pre = min(prefix_lengths[i], len(ids) - 1) if share else 0  # type: ignore[index]
        groups.setdefault(tuple(ids[:n_pre]) if ablate_prefix else n_pre, []).append(i)
    src_all = torch.as_tensor(list(sources), dtype=torch.long)
    out = torch.empty(S, P, cfg.d_model, dtype=cfg.dtype, device=model.unembed.W_U.device)
    for key, members in groups.items():
        n_pre = len(key) if ablate_prefix else int(key)  # type: ignore[arg-type]
        for b0 in range(0, len(members), rows_per_batch):
            block = members[b0 : b0 + rows_per_batch]
            nb = len(block)
            lengths = torch.tensor([len(tokens[i]) for i in block])
            body = torch.zeros(nb, int(lengths.max()) - n_pre, dtype=torch.long)
            for r, i in enumerate(block):
                body[r, : int(lengths[r]) - n_pre] = torch.as_tensor(list(tokens[i][n_pre:]))
            block_src = src_all[block]
            per = max(1, rows_per_batch // nb)  # sets per forward pass
            for s0 in range(0, S, per):
                sets = torch.arange(s0, min(S, s0 + per))
                ns = len(sets)
                if n_pre and not ablate_prefix:  # rows pair-major: each pair's prefix row repeated for every set
                    row_set, row_pair = sets.repeat(nb), torch.arange(nb).repeat_interleave(ns)
                else:  # rows set-major: the set's prefix row repeated for every pair
                    row_set, row_pair = sets.repeat_interleave(nb), torch.arange(nb).repeat(ns)
                cache = None
                if n_pre and ablate_prefix:
                    prefix = torch.tensor(tokens[block[0]][:n_pre], device=cfg.device)[None].expand(ns, -1)
                    hooks = ablation_hooks(model, masks, sets, values, block_src[:1].expand(ns), 0)
                    cache = model.backend.prefix_cache(prefix, hooks, nb)
                elif n_pre:
                    prefix = torch.tensor([list(tokens[i][:n_pre]) for i in block], device=cfg.device)
                    cache = model.backend.prefix_cache(prefix, [], ns)
                ends = lengths[row_pair] - n_pre - 1
                hooks = ablation_hooks(model, masks, row_set, values, block_src[row_pair], n_pre,
                                       ends if at_end else None)
                rows = body[row_pair].to(cfg.device)
                with model.hooks(fwd_hooks=hooks):
                    resid = model.backend.final_residual(rows) if cache is None else \
                        model.backend.continue_prefix(rows, cache)
                end = resid[torch.arange(len(rows), device=resid.device), ends.to(resid.device)]
                pair = torch.tensor(block)[row_pair]
                out[row_set.to(out.device), pair.to(out.device)] = end.to(out)
    return out
