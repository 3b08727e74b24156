"""One ablation: a spec (:class:`AblationSpec`: what values x which sites each set ablates x at which positions) and
one executor (:func:`run_ablation`) that runs every set over every pair in batched forward passes and returns the
final residual stream at each pair's END. Knockout, neuron knockout, the heuristics' class knockout and faithfulness
(node and edge circuits) all call it; none registers a hook of its own.

The sites (:class:`AblationMasks`) are heads ``[set, layer, head]``, MLPs ``[set, layer]``, neurons ``{layer: [set,
d_mlp]}`` and MIB's edges ``[set, sender, receiver]`` (at END or at every position); the values
(:class:`~circuits.patching.ablation.values.AblationValues`) are either given (template means, zero, resample: knockout)
or a kind taken from the pairs' own runs (``"counterfactual"``, ``"end_mean"``, ``"zero"``: faithfulness). The
executor chooses the strategy from the spec and the model; each equals the plain loop of :mod:`circuits.patching.engines.plain`
(one hook per site, one set at a time), which the tests assert:

- **END-only layers** (values from the pairs' runs, ablation at END, a model the END-only layers compute,
  :func:`~circuits.patching.ablation.end.end_only_supported`; edges always): one batched forward of both prompts, then
  each layer as END-only work over ``set x pair`` rows (:mod:`circuits.patching.ablation.end`).
- **Counterfactual at every position** (counterfactual values, every position, a model that shares prefixes): the
  counterfactual run computed in the sets' own passes (:func:`_counterfactual_everywhere`).
- **Edges at every position** (MIB's ``evaluate_graph``: edges, values from the pairs' runs, every position): each
  receiver's q, k, v or MLP input at every position is the run's residual less the differences of the senders its
  set cuts off, over ``set x pair`` rows (:mod:`circuits.patching.ablation.edges`); with counterfactual values each
  pair's start before its first difference (where every difference is 0) runs once, clean, into the key/value cache,
  and the rows continue from it.
- **The masked forward** (everything else): every (set, pair) one row of a batch of whole prompts, one hook per site
  replacing, row by row, the units the row's set marks (:func:`ablated_residuals`).

Prefix sharing in the masked forward, through the backend's ``prefix_cache``/``continue_prefix`` where
:meth:`~circuits.models.backend.Backend.prefix_sharing` says the cache gives the full run's numbers (causal attention makes
it exact):

- ``ablate_prefix=True`` (knockout with zeros, or means of prompts whose prefix differs from the pair's: the prefix
  is ablated too, so its keys and values depend on the set): pairs with
  equal prefix tokens run the prefix once per set, repeated for the pairs; the prefix reads the values of the
  group's first pair -- values at a shared prefix's positions are activations of those same tokens (means of a
  template group, a pair's counterfactual run), equal across the group.
- ``ablate_prefix=False`` (the values equal the clean run's there, e.g. counterfactual values before a pair's first
  difference, template means over prompts that all start with the pair's prefix (knockout's usual case,
  :meth:`~circuits.patching.ablation.values.AblationValues.clean_start`), or ablation at END only): each pair's prefix
  runs once without hooks and is repeated for every set; where the backend runs blocks alone after cached keys and
  values (:meth:`~circuits.models.backend.Backend.block_runner`), each set's rows also start at the first layer the
  set ablates, from the clean run's residual stream there (:func:`_from_first_layers`: the layers before it are the
  clean run's, and a set that ablates nothing is the clean run).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal

import torch
from jaxtyping import Bool, Float, Int
from torch import Tensor

from circuits.data.pairs import PairBatch, Pairs, as_batch
from circuits.models.backend import Model, act_name
from circuits.patching.ablation.edges import edges_everywhere
from circuits.patching.ablation.end import edges_at_end, end_only_supported, end_runs, nodes_at_end
from circuits.patching.ablation.values import AblationValues, ValueKind, per_pair_values, record, site_names
from circuits.patching.core.end_layers import keep_hook, left_padded
from circuits.patching.core.readouts import first_difference

Positions = Literal["end", "all"]
Strategy = Literal["end", "edges", "counterfactual", "masked"]


@dataclass
class AblationMasks:
    """Which sites each set ablates (``True``: replaced by its value): ``heads [set, layer, head]``, ``mlps [set,
    layer]`` (``hook_mlp_out``), ``neurons {layer: [set, d_mlp]}`` (``hook_post``); or ``edges [set, sender,
    receiver]`` over MIB's graph (:func:`circuits.patching.circuit_curves.edge_curves.edge_senders` x ``edge_receivers``; then
    the node masks are ignored: an edge carries its sender's ablated value into one receiver, at END or at every
    position); ``input [set]``: the
    input node, the embeddings every later node reads (``blocks.0.hook_resid_pre``; MIB's node graph)."""

    heads: Bool[Tensor, "set layer head"]
    mlps: Bool[Tensor, "set layer"]
    neurons: dict[int, Bool[Tensor, "set d_mlp"]] = field(default_factory=dict)
    edges: Bool[Tensor, "set sender receiver"] | None = None
    # the input node (MIB's graph: the embeddings, values.INPUT_SITE) per set; None: never ablated
    input: Bool[Tensor, " set"] | None = None

    def input_ablated(self) -> bool:
        """Whether some set ablates the input node."""
        return self.input is not None and bool(self.input.any())

    def __len__(self) -> int:
        return (self.heads if self.edges is None else self.edges).shape[0]

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


def site_hook(ablate: Bool[Tensor, "row unit"], table: Tensor | None, source: Int[Tensor, " row"],
              offset: int | Int[Tensor, " row"], pooled: bool, end: Int[Tensor, " row"] | None = None) -> Callable:
    """A hook that replaces, row by row, the units ``ablate`` marks (heads of ``hook_z``, neurons of ``hook_post``,
    or one unit for a whole ``hook_mlp_out``) by ``table`` (``[source, pos, ...]``; ``None``: zero) at the row's
    ``source`` row, positions ``offset...`` of the table being the call's positions (``offset`` one number, or one
    per row; positions past the table's last, right padding after a row's END, read its last); at every position,
    or at ``end`` (each row's last position among the tokens fed) only."""

    def values(act: Tensor, pos: Tensor | None) -> Tensor:
        if pooled:
            return table[0, 0]  # type: ignore[index]
        src = source.to(table.device)  # type: ignore[union-attr]
        if isinstance(offset, int):
            if pos is None:
                return table[src, offset : offset + act.shape[1]]  # type: ignore[index]
            return table[src, pos.to(table.device) + offset]  # type: ignore[index]
        off = offset.to(table.device)  # type: ignore[union-attr]
        if pos is None:
            at = (off[:, None] + torch.arange(act.shape[1], device=off.device)).clamp_max(table.shape[1] - 1)  # type: ignore[union-attr]
            return table[src[:, None], at]  # type: ignore[index]
        return table[src, pos.to(table.device) + off]  # type: ignore[index]

    def hook(act: Tensor, hook: object) -> Tensor:
        R, trailing = act.shape[0], act.ndim - 3  # d_head after the head axis of hook_z
        mask = ablate.to(act.device).reshape(R, ablate.shape[1], *[1] * trailing)
        if end is None:
            new = torch.zeros_like(act) if table is None else values(act, None).to(act)
            return torch.where(mask[:, None], new, act)
        rows, e = torch.arange(R, device=act.device), end.to(act.device)
        cur = act[rows, e]
        new = torch.zeros_like(cur) if table is None else values(act, e).to(act)
        act = act.clone()
        act[rows, e] = torch.where(mask, new, cur)
        return act

    return hook


def ablation_hooks(model: Model, masks: AblationMasks, row_set: Int[Tensor, " row"], values: AblationValues,
                   source: Int[Tensor, " row"], offset: int | Int[Tensor, " row"], end: Int[Tensor, " row"] | None = None,
                   layers: Sequence[int] | None = None) -> list:
    """One hook per site that some row ablates: row ``r`` ablates what set ``row_set[r]`` marks, with the values of
    source row ``source[r]`` (:func:`site_hook`); ``layers``: only those layers' sites (``None``: every layer's)."""
    device = model.cfg.device
    hooks = []

    def add(site: str, layer: int, ablate: Tensor) -> None:
        if bool(ablate.any()):
            hooks.append((act_name(site, layer), site_hook(ablate.to(device), values.table(site, layer), source,
                                                           offset, values.pooled, end)))

    layers = range(model.cfg.n_layers) if layers is None else layers
    if masks.input is not None and 0 in layers:
        add("resid_pre", 0, masks.input[row_set][:, None])
    for l in layers:
        add("z", l, masks.heads[row_set, l])
        if l in masks.neurons:
            add("post", l, masks.neurons[l][row_set])
        add("mlp_out", l, masks.mlps[row_set, l][:, None])
    return hooks


def shared_start(batch: PairBatch) -> Int[Tensor, " pair"]:
    """Each pair's tokens before its prompts differ, at most END (every row keeps its END to run): the prefix
    counterfactual values leave as it is (``ablate_prefix=False``), the pair's two runs being the same there
    (:func:`~circuits.patching.core.readouts.first_difference` capped at END)."""
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
    start_at_first_layer: bool = True,
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
        start_at_first_layer: with a clean prefix (``ablate_prefix=False``), start each set's rows at the first layer
            it ablates from the clean run's residual stream (the layers before it are the clean run's; a set that
            ablates nothing is the clean run), where the backend runs blocks alone after cached keys and values
            (:meth:`~circuits.models.backend.Backend.block_runner`); ``False``: every row through every layer (the
            tests compare the two).
    """
    cfg = model.cfg
    S, P = len(masks), len(tokens)
    ablate_prefix = ablate_prefix and not at_end
    share = prefix_lengths is not None and model.backend.prefix_sharing()
    # A clean prefix (ablate_prefix=False) and a backend whose blocks run alone after cached keys and values: each set's
    # rows start at the first layer it ablates, from the clean run's residual stream (_from_first_layers).
    n_pres = [min(prefix_lengths[i], len(ids) - 1) for i, ids in enumerate(tokens)] if share else []  # type: ignore[index]
    layered = (start_at_first_layer and share and not ablate_prefix and max(n_pres, default=0) > 0
               and not masks.input_ablated() and masks.edges is None and getattr(cfg, "n_devices", 1) == 1
               and all(model.backend.prefix_kv_hooks(l) is not None for l in range(cfg.n_layers)))
    if layered:  # pairs of one body length together, whatever their prefixes' (left-padded caches): no padded rows
        out = torch.empty(S, P, cfg.d_model, dtype=cfg.dtype, device=model.unembed.W_U.device)
        by_body: dict[int, list[int]] = {}
        for i, ids in enumerate(tokens):
            by_body.setdefault(len(ids) - n_pres[i], []).append(i)
        # A pair keeps its clean run's keys and values and a residual stream per start layer, at most every layer's:
        # as many pairs a block as keep about what rows_per_batch rows' working tensors take.
        kv_width = 2 * (getattr(cfg, "n_key_value_heads", None) or cfg.n_heads) * cfg.d_head
        per_pos = cfg.d_model * 8 + (cfg.d_mlp or 4 * cfg.d_model) * 3
        pairs_per = max(1, rows_per_batch * per_pos // (cfg.n_layers * (cfg.d_model + kv_width)))
        for members in by_body.values():
            for b0 in range(0, len(members), pairs_per):
                block = members[b0 : b0 + pairs_per]
                out[:, block] = _from_first_layers(model, [tokens[i] for i in block], [n_pres[i] for i in block],
                                                   masks, values, torch.as_tensor([sources[i] for i in block]), at_end,
                                                   rows_per_batch).to(out)
        return out
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


def first_ablated_layers(masks: AblationMasks, n_layers: int) -> Int[Tensor, " set"]:
    """The first layer each set of ``masks`` ablates a head, MLP or neuron at (``n_layers``: none)."""
    hit = masks.heads.any(-1) | masks.mlps
    for l, neurons in masks.neurons.items():
        hit[:, l] |= neurons.any(-1)
    layers = torch.arange(n_layers).expand_as(hit)
    return torch.where(hit, layers, n_layers).min(-1).values


@torch.no_grad()
def _from_first_layers(model: Model, tokens: Sequence[Sequence[int]], n_pre: Sequence[int], masks: AblationMasks,
                       values: AblationValues, sources: Int[Tensor, " pair"], at_end: bool, rows_per_batch: int
                       ) -> Float[Tensor, "set pair d_model"]:
    """:func:`ablated_residuals` of pairs whose first ``n_pre[i]`` tokens are the clean run under every set. One clean
    forward of the whole prompts keeps each layer's keys and values and the residual stream entering the layers
    where some set starts; each pair's prefix becomes a cache, left-padded to the longest (masked, as TransformerLens
    batches generation: rotary attention reads relative positions, and the residual stream taken from the clean run
    carries each token's own position), and its body the rows that run. Then each set's rows join at the first layer
    it ablates (:func:`first_ablated_layers`), from that clean residual, and run block by block (the backend's
    ``block_runner``), sets in order of their first layer, at most ``rows_per_batch`` rows a pass. The layers before
    a set's first are the clean run's, so this is the whole forward less those layers (equal up to float rounding);
    pairs of every prefix length share each pass."""
    cfg = model.cfg
    L, P, device = cfg.n_layers, len(tokens), cfg.device
    first = first_ablated_layers(masks, L)
    starts = sorted(set(first.tolist()) - {L})
    kv = [model.backend.prefix_kv_hooks(l) for l in range(L)]
    kept: dict[str, Tensor] = {}
    final = act_name("resid_post", L - 1)
    names = [n for pair in kv for n in pair] + [act_name("resid_pre", l) for l in starts] + [final]  # type: ignore[union-attr]
    lengths = torch.tensor([len(t) for t in tokens])
    full = torch.zeros(P, int(lengths.max()), dtype=torch.long)
    for i, t in enumerate(tokens):
        full[i, : len(t)] = torch.as_tensor(list(t))
    model.run_with_hooks(full.to(device), fwd_hooks=[(n, keep_hook(kept, n)) for n in names], stop_at_layer=L)
    rows = torch.arange(P)
    out = kept[final][rows.to(kept[final].device), (lengths - 1).to(kept[final].device)][None].repeat(len(first), 1, 1)
    order = [s for s in sorted(range(len(first)), key=lambda s: int(first[s])) if int(first[s]) < L]
    if not order:
        return out  # no set ablates anything: the clean run
    pre = torch.as_tensor(list(n_pre))
    width = int((lengths - pre).max())
    at_body = (pre[:, None] + torch.arange(width)[None]).clamp_max(full.shape[1] - 1)  # right padding: any token
    keys, real = left_padded([kept[k] for k, _ in kv], rows, pre)  # type: ignore[misc]
    vals, _ = left_padded([kept[v] for _, v in kv], rows, pre)  # type: ignore[misc]
    body = full[rows[:, None], at_body].to(device)
    run = model.backend.block_runner(body, keys, vals, None if bool(real.all()) else real.long().to(device))
    if run is None:
        raise RuntimeError("block_runner is None for a backend whose prefix_kv_hooks are set")
    ends = lengths - pre - 1  # each pair's END among its body's positions
    per = max(1, rows_per_batch // P)  # sets per pass
    for c0 in range(0, len(order), per):
        chunk = order[c0 : c0 + per]
        x: Tensor | None = None
        present = 0
        for layer in range(int(first[chunk[0]]), L):
            new = [s for s in chunk[present:] if int(first[s]) == layer]
            if new:
                resid = kept[act_name("resid_pre", layer)]
                fresh = resid[rows.to(resid.device)[:, None], at_body.to(resid.device)].repeat(len(new), 1, 1)
                x = fresh if x is None else torch.cat([x, fresh])
                present += len(new)
            assert x is not None
            row_set = torch.tensor(chunk[:present]).repeat_interleave(P)
            row_pair = rows.repeat(present)
            layer_hooks = ablation_hooks(model, masks, row_set, values, sources[row_pair], pre[row_pair],
                                         ends[row_pair] if at_end else None, layers=[layer])
            with model.hooks(fwd_hooks=layer_hooks):
                x = run(layer, x)
        assert x is not None
        end = x[torch.arange(len(x), device=x.device), ends.repeat(present).to(x.device)]
        out[torch.tensor(chunk)] = end.reshape(present, P, -1).to(out)
    return out


# --- the spec and the one entry -----------------------------------------------------------------------------------


@dataclass
class AblationSpec:
    """One ablation: ``values`` (given :class:`AblationValues`, or a kind taken from the pairs' own runs:
    ``"counterfactual"``, ``"end_mean"``, ``"zero"``) x ``sites`` (which heads, MLPs, neurons or edges each set
    ablates) x ``positions`` (``"end"``: each pair's last token only; ``"all"``: every position, the prefix
    included)."""

    values: AblationValues | ValueKind
    sites: AblationMasks
    positions: Positions = "all"

    def __post_init__(self) -> None:
        if self.positions not in ("end", "all"):
            raise ValueError(f"Unknown positions {self.positions!r}; accepted: end, all")
        if isinstance(self.values, str) and self.values not in ("counterfactual", "end_mean", "zero"):
            raise ValueError(f"Unknown values {self.values!r} from the pairs' runs; accepted: counterfactual, "
                             "end_mean, zero (or AblationValues)")
        if self.sites.edges is not None and not isinstance(self.values, str):
            raise ValueError("Edges are ablated with values from the pairs' runs (counterfactual, end_mean, zero), "
                             "not given AblationValues")


@dataclass
class Ablated:
    """What :func:`run_ablation` returns: the final residual stream at each pair's END under each set (``resid
    [set, pair, d_model]``) and, where the values came from the pairs' runs, the counterfactual run's (``cf_resid
    [pair, d_model]``; its top token is the counterfactual answer)."""

    resid: Float[Tensor, "set pair d_model"]
    cf_resid: Float[Tensor, "pair d_model"] | None = None
    strategy: Strategy = "masked"  # which of the module docstring's strategies ran


def rows_per_forward(model: Model, width: int, memory_mb: float) -> int:
    """Rows (set x pair) per forward pass so that one layer's working tensors fit ``memory_mb``."""
    cfg = model.cfg
    per_pos = cfg.d_model * 8 + (cfg.d_mlp or 4 * cfg.d_model) * 3 + cfg.n_heads * width * 2
    bytes_per = torch.finfo(cfg.dtype).bits // 8 if cfg.dtype.is_floating_point else 4
    return max(1, int(memory_mb * 2**20 / (per_pos * width * bytes_per)))


@torch.no_grad()
def run_ablation(model: Model, pairs: Pairs, spec: AblationSpec, *, rows_per_batch: int | None = None,
                 memory_mb: float = 1024, share_prefix: bool = True, strategy: Strategy | None = None) -> Ablated:
    """Every set of ``spec`` over every pair, by the strategy the spec and the model allow (the module docstring).

    Args:
        pairs: prompt pairs (given values find each pair's row by :meth:`AblationValues.source_of`, and its few-shot
            prefix by ``prefix_length``), or a :class:`PairBatch` where the values come from the pairs' runs.
        rows_per_batch: rows (set x pair) per forward pass; ``None``: as many as ``memory_mb`` allows.
        share_prefix: run a shared few-shot prefix once (given means or zeros: the values there are the same for a
            template group; the numbers do not change).
        strategy: ``None`` (the one the spec and the model allow), or ``"masked"`` to run the masked forward where
            another would run (the tests compare the strategies with it and with the plain loop).
    """
    sites, values = spec.sites, spec.values
    if isinstance(values, AblationValues):
        pairs = list(pairs)  # type: ignore[arg-type]
        tokens = [p.reference_token_ids for p in pairs]
        rows = rows_per_batch or rows_per_forward(model, max(map(len, tokens)), memory_mb)
        share = share_prefix and values.kind in ("mean", "zero")  # a resample donor's prefix may differ
        prefixes = [min(p.prefix_length, len(ids) - 1) for p, ids in zip(pairs, tokens)]
        # Group means of prompts that share the pair's prefix tokens are the clean run's activations there: the
        # prefix is then the clean run under every set, and runs once per pair, unhooked (AblationValues.clean_start).
        clean = share and all(values.clean_start(p, i) >= n for i, (p, n) in enumerate(zip(pairs, prefixes)))
        resid = ablated_residuals(model, tokens, sites, values, [values.source_of(p) for p in pairs],
                                  prefix_lengths=[p.prefix_length for p in pairs] if share else None,
                                  ablate_prefix=not clean, at_end=spec.positions == "end", rows_per_batch=rows)
        return Ablated(resid, None, "masked")
    batch = as_batch(pairs, model)
    neuron_layers = sorted(sites.neurons)
    rows = rows_per_batch or rows_per_forward(model, batch.reference.shape[1], memory_mb)
    if strategy not in (None, "masked"):
        raise ValueError(f"Unknown strategy {strategy!r}; accepted: None (chosen from the spec), masked")
    auto = strategy is None
    if spec.positions == "end" and (sites.edges is not None or (auto and end_only_supported(model))):
        runs = end_runs(model, batch, values, neuron_layers)
        resid = edges_at_end(model, batch, sites.edges, runs, memory_mb) if sites.edges is not None else \
            nodes_at_end(model, batch, sites.heads, sites.mlps, sites.neurons, runs, memory_mb, sites.input)
        return Ablated(resid, runs.cf_resid, "end")
    if sites.edges is not None:  # every position (END is the END-only layers above); no masked forward of edges
        if not auto:
            raise ValueError("Edges at every position run one strategy (edges); strategy='masked' is for nodes")
        resid, cf_resid = edges_everywhere(model, batch, sites.edges, values, memory_mb)  # type: ignore[arg-type]
        return Ablated(resid, cf_resid, "edges")
    if auto and spec.positions == "all" and values == "counterfactual" and model.backend.prefix_sharing():
        return Ablated(*_counterfactual_everywhere(model, batch, sites, rows), "counterfactual")
    names = site_names(model, neuron_layers, sites.input_ablated()) if values == "counterfactual" else []
    acts, cf_full = record(model, batch.counterfactual, names)
    table = per_pair_values(model, values, batch.reference, batch.end, neuron_layers, counterfactual=acts)
    end = batch.end.tolist()
    resid = ablated_residuals(model, [batch.reference[i, : end[i] + 1].tolist() for i in range(len(batch))], sites,
                              table, range(len(batch)), ablate_prefix=False, at_end=spec.positions == "end",
                              rows_per_batch=rows)
    return Ablated(resid, cf_full[torch.arange(len(batch), device=cf_full.device), batch.end.to(cf_full.device)],
                   "masked")


def _replace_from_counterfactual(ablate: Tensor, k: int) -> Callable:
    """A hook replacing, in every row, the units ``ablate [row, unit]`` marks by the same activation of its pair's
    counterfactual row (rows pair-major, ``k`` per pair, the first of each pair its counterfactual row, which
    ``ablate`` never marks), at every position: the counterfactual run's value at this site, computed in this same
    forward pass."""
    def hook(act: Tensor, hook: object) -> Tensor:
        R = act.shape[0]
        mask = ablate.to(act.device).reshape(R, 1, ablate.shape[1], *[1] * (act.ndim - 3))
        return torch.where(mask, act[::k].repeat_interleave(k, 0), act)

    return hook


@torch.no_grad()
def _counterfactual_everywhere(model: Model, batch: PairBatch, sites: AblationMasks, rows_per: int
                               ) -> tuple[Tensor, Tensor]:
    """Every set with counterfactual values at every position, the counterfactual run computed in the same forward
    passes as the sets: before a pair's first difference its two prompts are the same tokens, so that start
    (:func:`shared_start`) runs once per pair into a key/value cache, and after it each pair continues as one
    counterfactual row (its own prompt, nothing ablated) and one row per set (the reference prompt), every site a set
    ablates taking the counterfactual row's activation at that site and position (one hook per site). Exact (causal
    attention; the masked forward's numbers over whole prompts up to float rounding), without a separate
    counterfactual forward over whole prompts. The END residuals ``[set, pair, d_model]`` and the counterfactual
    run's ``[pair, d_model]``."""
    cfg = model.cfg
    C, P = len(sites), len(batch)
    end = batch.end.tolist()
    start = shared_start(batch).tolist()
    ref = [batch.reference[i, : end[i] + 1].tolist() for i in range(P)]
    cf = [batch.counterfactual[i, : end[i] + 1].tolist() for i in range(P)]
    out_device = model.backend.output_device()
    out = torch.empty(C, P, cfg.d_model, dtype=cfg.dtype, device=out_device)
    cf_end = torch.empty(P, cfg.d_model, dtype=cfg.dtype, device=out_device)
    groups: dict[int, list[int]] = {}
    for i in range(P):
        groups.setdefault(start[i], []).append(i)
    for n_pre, members in groups.items():
        pairs_per = max(1, rows_per // 2)  # each pair's counterfactual row and at least one set's
        for b0 in range(0, len(members), pairs_per):
            block = members[b0 : b0 + pairs_per]
            nb = len(block)
            per = max(1, rows_per // nb - 1)  # sets per forward pass
            width = max(len(ref[i]) for i in block) - n_pre
            for s0 in range(0, C, per):
                sets = torch.arange(s0, min(C, s0 + per))
                k = len(sets) + 1
                body = torch.zeros(nb * k, width, dtype=torch.long)
                ends = torch.empty(nb * k, dtype=torch.long)
                for j, i in enumerate(block):
                    body[j * k, : len(cf[i]) - n_pre] = torch.as_tensor(cf[i][n_pre:])
                    body[j * k + 1 : (j + 1) * k, : len(ref[i]) - n_pre] = torch.as_tensor(ref[i][n_pre:])
                    ends[j * k : (j + 1) * k] = len(ref[i]) - n_pre - 1

                def rows(ablate: Tensor) -> Tensor:  # [set, unit] -> [row, unit], pair-major, counterfactual rows kept
                    units = ablate[sets]
                    return torch.cat([torch.zeros_like(units[:1]), units]).repeat(nb, 1)

                hooks = []
                if sites.input is not None and bool(sites.input[sets].any()):
                    hooks.append((act_name("resid_pre", 0), _replace_from_counterfactual(rows(sites.input[:, None]), k)))
                for l in range(cfg.n_layers):
                    for site, ablate in (("z", sites.heads[:, l]), ("post", sites.neurons.get(l)),
                                         ("mlp_out", sites.mlps[:, l][:, None])):
                        if ablate is not None and bool(ablate[sets].any()):
                            hooks.append((act_name(site, l), _replace_from_counterfactual(rows(ablate), k)))
                tokens, cache = body.to(cfg.device), None
                if n_pre:  # the shared start, without hooks (nothing is ablated before the first difference)
                    prefix = torch.tensor([ref[i][:n_pre] for i in block], device=cfg.device)
                    cache = model.backend.prefix_cache(prefix, [], k)
                with model.hooks(fwd_hooks=hooks):
                    resid = model.backend.final_residual(tokens) if cache is None else \
                        model.backend.continue_prefix(tokens, cache)
                at_end = resid[torch.arange(nb * k, device=resid.device), ends.to(resid.device)].to(out)
                at_end = at_end.reshape(nb, k, -1)
                idx = torch.tensor(block, device=out_device)
                cf_end[idx] = at_end[:, 0]
                out[sets.to(out_device)[:, None], idx[None, :]] = at_end[:, 1:].transpose(0, 1)
    return out, cf_end
