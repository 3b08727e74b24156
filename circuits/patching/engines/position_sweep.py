"""Activation patching at every position (Stolfo et al. 2023), exact and fast.

Patching a component's output at position ``p`` with its value on the counterfactual prompt changes nothing
before ``p`` (causal attention), so only positions ``p..END`` need recomputing: the engine starts every patched
row at ``p`` from the reference run's residual stream and runs the model's own blocks on the suffix ``p..END``
only, with the keys and values of positions ``< p`` taken from the reference run (the backend's key/value cache,
exactly as in generation: :meth:`~circuits.models.backend.Backend.block_runner`, TransformerLens 3's frozen cache on 3.9,
Hugging Face's on a TransformerBridge with the masks and rotary tables the model hands each block). Many senders share one pass (rows are ``sender x pair``, senders
join at their own layer), and the answer is read at END with the END engine's readout. On 3.9 the backend's block
runner reads each pair's cached prefix once for all the rows that continue it (:class:`circuits.models.attention.
SharedPrefix`: rotated once, never copied per row or per query head), so what a pass costs is its rows' suffixes
through the blocks; the answer probability's log-sum-exp is skipped where the caller does not read it (``prob``).

Two more savings, both exact: positions before the first token where reference and counterfactual differ hold
identical activations in both runs, so a patch there is the unpatched run (filled from the baseline, not
computed); and pairs of different lengths are aligned from the end: position ``offset`` counts back from END
(``offset 0`` is END), so the question bodies of prompts with few-shot prefixes of different lengths line up.

Where the backend's cache cannot hold the reference's keys (a Bridge under transformers 5.24) each patched row runs
its whole prompt (exact, as the plain loop; :func:`_whole_pass`) while the rest of the engine is the same.

Path patching at a position other than END carries nothing to the logits (every head is frozen, so no
information moves between positions), which is why this engine patches activations; at END it equals
:func:`circuits.patching.engines.end_sweep.sweep` in activation mode (tests assert both, and equality with
TransformerLens's ``get_act_patch_attn_head_out_by_pos`` and ``get_act_patch_mlp_out``).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from dataclasses import dataclass, field

import torch
from jaxtyping import Int
from torch import Tensor
from tqdm.auto import tqdm

from circuits.io import Shapes
from circuits.models.backend import Model, act_name
from circuits.data.pairs import PairBatch, Pairs, as_batch
from circuits.patching.core.end_layers import check_supported, keep_hook, left_padded, readout
from circuits.patching.engines.end_sweep import all_components
from circuits.patching.core.scores import Scores
from circuits.patching.core.metrics import DEFAULT_METRIC, Baseline, Metric, get_metric, PROB_METRICS
from circuits.patching.core.readouts import (MetricLookup, Readouts, Sender, baseline_of, cat_baselines, check_senders,
    checked_neurons, first_difference, sender_sort_key)
from circuits.types import Neuron

Node = tuple[Sender, int]  # a sender and an offset from END


@dataclass
class _Runs:
    """One chunk of pairs: what the suffix passes read (every position, per layer)."""

    resid_pre: list[Tensor]  # [pair, pos, d_model], reference
    keys: list[Tensor]  # [pair, pos, kv_head, d_head], reference keys as the backend caches them (backend.prefix_kv_hooks)
    values: list[Tensor]  # (both empty where the backend's cache cannot hold them: whole-prompt passes)
    z_cf: list[Tensor]  # [pair, pos, head, d_head]
    mlp_cf: list[Tensor]  # [pair, pos, d_model]
    post_cf: dict[int, Tensor]  # layer -> [pair, pos, d_mlp] (layers with neuron senders)
    ref_end: Tensor
    cf_end: Tensor
    tokens: Tensor | None = None  # [pair, pos] reference tokens (whole-prompt passes on a TransformerBridge)


@torch.no_grad()
def _collect(model: Model, batch: PairBatch, neuron_layers: set[int]) -> _Runs:
    L = model.cfg.n_layers
    ref: dict[str, Tensor] = {}
    cf: dict[str, Tensor] = {}
    rows = torch.arange(len(batch), device=batch.end.device)

    final = act_name("resid_post", L - 1)
    kv = [model.backend.prefix_kv_hooks(l) for l in range(L)] if model.backend.prefix_sharing() else [None] * L
    kv_names = [n for names in kv if names is not None for n in names] if all(kv) else []
    ref_names = [act_name("resid_pre", l) for l in range(L)] + kv_names + [final]
    cf_names = [act_name(s, l) for l in range(L) for s in ("z", "mlp_out")] + [final]
    cf_names += [act_name("post", l) for l in sorted(neuron_layers)]
    model.run_with_hooks(batch.reference, fwd_hooks=[(n, keep_hook(ref, n)) for n in ref_names], stop_at_layer=L)
    model.run_with_hooks(batch.counterfactual, fwd_hooks=[(n, keep_hook(cf, n)) for n in cf_names], stop_at_layer=L)
    per = lambda d, site: [d[act_name(site, l)] for l in range(L)]  # noqa: E731
    keys = [ref[names[0]] for names in kv] if kv_names else []
    values = [ref[names[1]] for names in kv] if kv_names else []
    return _Runs(per(ref, "resid_pre"), keys, values, per(cf, "z"), per(cf, "mlp_out"),
                 {l: cf[act_name("post", l)] for l in neuron_layers},
                 ref[final][rows, batch.end], cf[final][rows, batch.end], batch.reference)


def _row_bytes(model: Model, n_tokens: int, n_cached: int) -> int:
    cfg = model.cfg
    n_kv = cfg.n_key_value_heads or cfg.n_heads
    per_token = cfg.d_model * 8 + (cfg.d_mlp or 4 * cfg.d_model) * 4 + cfg.n_heads * (cfg.d_head * 3 + n_tokens + n_cached)
    return (n_tokens * per_token + 2 * (n_cached + n_tokens) * n_kv * cfg.d_head) * (torch.finfo(cfg.dtype).bits // 8)


def _patch_hooks(runs: _Runs, new: list[tuple[int, Sender]], pairs: Tensor, pos: Tensor, G: int,
                 at: Tensor | int = 0) -> list:
    """Hooks that write each new row's sender at position ``at`` of the tokens fed (0: the suffix's first; ``pos``
    for whole prompts), absolute position ``pos[g]`` of pair ``pairs[g]``, from the counterfactual run; ``new``
    holds ``(first_row, sender)``, ``G`` rows (one per pair) each."""
    by_site: dict[str, list[tuple[Tensor, int | None, int]]] = {}
    for start, s in new:
        rows = torch.arange(start, start + G, device=pairs.device)
        if isinstance(s, Neuron):
            by_site.setdefault(act_name("post", s.layer), []).append((rows, s.index, s.layer))
        elif s.kind == "head":
            by_site.setdefault(act_name("z", s.layer), []).append((rows, s.head, s.layer))
        else:
            by_site.setdefault(act_name("mlp_out", s.layer), []).append((rows, None, s.layer))
    hooks = []
    for name, items in by_site.items():
        def hook(act: Tensor, hook, items=items, name=name) -> Tensor:
            for rows, index, layer in items:
                if name.endswith("hook_z"):
                    act[rows, at, index] = runs.z_cf[layer][pairs, pos, index].to(act.dtype)
                elif name.endswith("hook_post"):
                    act[rows, at, index] = runs.post_cf[layer][pairs, pos, index].to(act.dtype)
                else:
                    act[rows, at] = runs.mlp_cf[layer][pairs, pos].to(act.dtype)
            return act
        hooks.append((name, hook))
    return hooks


@torch.no_grad()
def _suffix_pass(model: Model, runs: _Runs, pairs: Tensor, pos: Tensor, k: int, senders: list[Sender],
                 answer: Tensor, cf_answer: Tensor, custom: Sequence[Metric], prob: bool = True) -> dict[str, Tensor]:
    """Patched END readouts ``[sender, pair]`` for ``senders`` patched at position ``pos[g]`` of each pair (``k``
    positions before its END): the suffix ``pos..END`` runs over the reference's cached keys and values of the
    positions before it. Pairs whose suffixes start at different positions share the pass: their caches are
    left-padded to one width and masked, as TransformerLens batches generation. Each row starts at its
    sender's layer from the reference's residual stream and runs block by block
    (:meth:`~circuits.models.backend.Backend.block_runner`), or, where blocks do not run alone after a cache (or the suffix
    starts the prompt), the whole model continues the suffix (:meth:`~circuits.models.backend.Backend.continue_prefixes`);
    where the backend's cache cannot hold the reference's keys (no :meth:`~circuits.models.backend.Backend.prefix_kv_hooks`),
    whole prompts run (:func:`_whole_pass`)."""
    L = model.cfg.n_layers
    G = len(pairs)
    assert all(a.layer <= b.layer for a, b in zip(senders, senders[1:])), "senders must come in layer order"
    if not runs.keys:
        return _whole_pass(model, runs, pairs, pos, k, senders, answer, cf_answer, custom, prob)
    p_max = int(pos.max())
    suffix = pos[:, None] + torch.arange(k + 1, device=pos.device)[None]  # [pair, k + 1]
    # the reference's keys and values before each pair's suffix, left-padded: [pair, p_max, kv_head, d_head]
    keys, keep = left_padded(runs.keys, pairs, pos)
    values, _ = left_padded(runs.values, pairs, pos)
    padded = not bool(keep.all())
    tokens = runs.tokens[pairs[:, None], suffix]  # type: ignore[index]
    run = model.backend.block_runner(tokens, keys, values, keep.long() if padded else None) if p_max else None
    if run is None:  # every row through the whole model, from the suffix's tokens
        S = len(senders)
        prefix = model.backend.prefix_from_kv([k_.repeat(S, 1, 1, 1) for k_ in keys],
                                        [v_.repeat(S, 1, 1, 1) for v_ in values],
                                        keep.long().repeat(S, 1)) if p_max else None
        with model.hooks(fwd_hooks=_patch_hooks(runs, [(i * G, s) for i, s in enumerate(senders)], pairs, pos, G)):
            resid = model.backend.continue_prefixes(tokens.repeat(S, 1), prefix)
        final = resid[:, -1].reshape(S, G, -1)
        return {k_: v.cpu() for k_, v in readout(model, final, answer, cf_answer, custom, prob=prob).items()}
    x: Tensor | None = None
    # Sender i's rows are i * G .. (i + 1) * G (senders join in layer order); its hook fires in its own block only.
    with model.hooks(fwd_hooks=_patch_hooks(runs, [(i * G, s) for i, s in enumerate(senders)], pairs, pos, G)):
        for layer in range(senders[0].layer, L):
            n_new = sum(1 for s in senders if s.layer == layer)
            if n_new:
                fresh = runs.resid_pre[layer][pairs[:, None], suffix].repeat(n_new, 1, 1)
                x = fresh if x is None else torch.cat([x, fresh])
            assert x is not None
            x = run(layer, x)
    assert x is not None
    final = x[:, -1].reshape(len(senders), G, -1)
    return {k_: v.cpu() for k_, v in readout(model, final, answer, cf_answer, custom, prob=prob).items()}


@torch.no_grad()
def _whole_pass(model: Model, runs: _Runs, pairs: Tensor, pos: Tensor, k: int, senders: list[Sender],
                answer: Tensor, cf_answer: Tensor, custom: Sequence[Metric], prob: bool = True) -> dict[str, Tensor]:
    """:func:`_suffix_pass` where the backend's cache cannot hold the reference's keys (a Bridge under transformers
    5.24): each patched row runs its whole reference prompt with the sender's counterfactual value written at
    ``pos[g]`` (rows ``sender x pair``), the answer read at END. Exact, like the plain loop; without the suffix
    saving."""
    G = len(pairs)
    assert runs.tokens is not None
    ends = pos + k
    tokens = runs.tokens[pairs][:, : int(ends.max()) + 1].repeat(len(senders), 1)
    hooks = _patch_hooks(runs, [(i * G, s) for i, s in enumerate(senders)], pairs, pos, G, at=pos)
    with model.hooks(fwd_hooks=hooks):
        resid = model.backend.final_residual(tokens)
    final = resid[torch.arange(len(tokens), device=resid.device), ends.repeat(len(senders))]
    final = final.reshape(len(senders), G, -1)
    return {k_: v.cpu() for k_, v in readout(model, final, answer, cf_answer, custom, prob=prob).items()}


@dataclass
class PositionSweep(MetricLookup):
    """Patched END quantities for senders patched at each offset from END, per pair (float32).

    ``heads`` is ``[layer, head, offset, pair]``, ``mlps`` ``[layer, offset, pair]`` and ``neurons``
    ``[neuron, offset, pair]`` (for ``neuron_list``); ``offset`` counts back from each pair's END (``0`` is END;
    position ``end - offset``). Offsets beyond a pair's prompt and senders not swept are NaN. ``ends`` and
    ``first_diff`` give each pair's END and first position where its two prompts differ.
    """

    baseline: Baseline
    heads: Readouts
    mlps: Readouts
    neurons: Readouts
    neuron_list: list[Neuron]
    ends: Int[Tensor, " pair"]
    first_diff: Int[Tensor, " pair"]
    custom_metrics: dict[str, Metric] = field(default_factory=dict)

    @property
    def n_offsets(self) -> int:
        return self.heads.logit.shape[2]

    def _effect(self, view: Readouts, metric: Metric) -> Tensor:
        """The metric over the pairs that have each offset: ``[..., offset]``."""
        out = torch.full(view.logit.shape[:-1], float("nan"))
        for k in range(view.logit.shape[-2]):
            valid = torch.nonzero(self.ends >= k).flatten()
            if len(valid):
                sub = view.index((..., k, slice(None))).select(valid)
                out[..., k] = metric.effect(sub, self.baseline.select(valid))
        return out

    def scores(self, metric: str | Metric = DEFAULT_METRIC) -> Scores:
        """:class:`~circuits.patching.core.scores.Scores` by offset from END: heads ``[layer, head, offset]``, MLPs
        ``[layer, offset]`` and, when swept, neurons ``[neuron, offset]`` (``neuron_list``'s order)."""
        m = self.metric(metric)
        parts = {"heads": self._effect(self.heads, m), "mlps": self._effect(self.mlps, m)}
        labels: dict = {}
        if self.neuron_list:
            parts["neurons"] = self._effect(self.neurons, m)
            labels["neurons"] = list(self.neuron_list)
        return Scores(parts, m.name, m.sign, self.baseline, offsets=True, labels=labels, engine="positions")

    def tensors(self) -> dict:
        return {**self.heads.tensors("head"), **self.mlps.tensors("mlp"), **self.neurons.tensors("neuron"),
                "neuron_list": [list(n) for n in self.neuron_list], "baseline": self.baseline.to_dict(),
                "ends": self.ends, "first_diff": self.first_diff}

    @classmethod
    def from_tensors(cls, d: dict, source: str | Path = "the position sweep") -> PositionSweep:
        """The sweep :meth:`tensors` gave (``source``: the file it was read from), checked first: heads ``[layer,
        head, offset, pair]``, MLPs ``[layer, offset, pair]``, neurons ``[neuron, offset, pair]`` over as many neurons
        as it names, ``ends`` and ``first_diff`` one position per pair, the baseline over the same pairs; else one
        :class:`~circuits.io.TensorError` line naming ``source`` and the tensor."""
        shapes = Shapes(source)
        if not isinstance(d, dict) or not isinstance(d.get("neuron_list"), list):
            raise shapes.fail("it is not a position sweep's tensors (no neuron_list)")
        neurons = checked_neurons(d, "neuron_list", shapes)
        heads = Readouts.checked(d, "head", ("layer", "head", "offset", "pair"), shapes)
        mlps = Readouts.checked(d, "mlp", ("layer", "offset", "pair"), shapes)
        neuron_views = Readouts.checked(d, "neuron", ("neuron", "offset", "pair"), shapes)
        ends = shapes.tensor("ends", d.get("ends"), ("pair",), "int")
        first = shapes.tensor("first_diff", d.get("first_diff"), ("pair",), "int")
        return cls(Baseline.checked(d.get("baseline"), shapes), heads, mlps, neuron_views, neurons, ends, first)


def _plan(senders: Sequence[Sender], offsets: Sequence[int] | None, nodes: Sequence[Node] | None,
          max_offset: int) -> dict[int, list[Sender]]:
    if nodes is not None:
        plan: dict[int, list[Sender]] = {}
        for s, k in nodes:
            if not 0 <= int(k) < max_offset:
                raise ValueError(f"Offset {k} is outside the prompts (accepted: 0..{max_offset - 1}, counted back from END)")
            plan.setdefault(int(k), [])
            if s not in plan[int(k)]:
                plan[int(k)].append(s)
        return {k: sorted(ss, key=sender_sort_key) for k, ss in plan.items()}  # a pass meets senders in layer order
    ks = range(max_offset) if offsets is None else [int(k) for k in offsets]
    for k in ks:
        if not 0 <= k < max_offset:
            raise ValueError(f"Offset {k} is outside the prompts (accepted: 0..{max_offset - 1}, counted back from END)")
    return {k: list(senders) for k in ks}


@torch.no_grad()
def sweep_positions(
    model: Model,
    pairs: Pairs,
    *,
    senders: Sequence[Sender] | None = None,
    offsets: Sequence[int] | None = None,
    nodes: Sequence[Node] | None = None,
    metrics: Sequence[str | Metric] = (),
    pairs_per_chunk: int = 16,
    memory_mb: float = 1024,
    progress: bool = True,
    prob: bool = True,
) -> PositionSweep:
    """Activation-patch every sender at every offset from END (or the given ``offsets``, or only ``nodes``).

    Args:
        senders: heads and MLPs (:class:`~circuits.types.Component`) and neurons (:class:`~circuits.types.Neuron`);
            default every head and MLP.
        offsets: positions counted back from END (``0`` is END); default all.
        nodes: explicit ``(sender, offset)`` pairs instead of ``senders x offsets`` (what ``verify`` asks for).
        metrics: custom metrics (functions of the END logits) to compute besides the built-in readouts.
        pairs_per_chunk: pairs whose activations are cached at once (memory: every layer and position).
        prob: the patched answer probability (a log-sum-exp over the vocabulary for every patched row; without it
            ``prob`` is NaN and the ``prob`` metric with it, the logit and logit difference unchanged).
    """
    check_supported(model)
    custom = [m for m in map(get_metric, metrics) if m.logits_fn is not None]
    batch = as_batch(pairs, model)
    cfg = model.cfg
    P = len(batch)
    K = int(batch.end.max()) + 1
    senders = sorted(senders if senders is not None else all_components(model), key=sender_sort_key)
    plan = _plan(senders, offsets, nodes, K)
    everyone = sorted({s for ss in plan.values() for s in ss}, key=sender_sort_key)
    check_senders(model, everyone)
    neuron_list = [s for s in everyone if isinstance(s, Neuron)]
    names = [m.name for m in custom]
    heads = Readouts.empty((cfg.n_layers, cfg.n_heads, K, P), names)
    mlps = Readouts.empty((cfg.n_layers, K, P), names)
    neurons = Readouts.empty((len(neuron_list), K, P), names)
    first = first_difference(batch).cpu()
    ends = batch.end.cpu()

    def where(s: Sender) -> tuple[Readouts, tuple]:
        if isinstance(s, Neuron):
            return neurons, (neuron_list.index(s),)
        return (heads, (s.layer, s.head)) if s.kind == "head" else (mlps, (s.layer,))

    bases = []
    n_tasks = sum(len(ss) for ss in plan.values()) * P
    bar = tqdm(total=n_tasks, desc="position patching", unit="patch", disable=not progress)
    for c0 in range(0, P, pairs_per_chunk):
        chunk = batch.select(slice(c0, c0 + pairs_per_chunk))
        runs = _collect(model, chunk, {s.layer for s in neuron_list})
        base = baseline_of(model, chunk.answer, runs.ref_end, runs.cf_end, custom, chunk.cf_label)
        bases.append(base.to("cpu"))
        for k, ss in plan.items():
            # Every pair whose position END - k lies at or after its first difference (earlier: the unpatched run).
            members = [i for i in range(len(chunk)) if int(chunk.end[i]) - k >= int(first[c0 + i])]
            if not members:
                continue
            idx = torch.tensor(members, device=cfg.device)
            pos = chunk.end[idx] - k
            row_bytes = _row_bytes(model, k + 1, int(pos.max())) * len(members)
            per_chunk = max(1, int(memory_mb * 2**20 // max(row_bytes, 1)))
            cols = torch.tensor([c0 + m for m in members])
            for s0 in range(0, len(ss), per_chunk):
                part = ss[s0 : s0 + per_chunk]
                values = _suffix_pass(model, runs, idx, pos, k, part, base.answer[idx], base.cf_answer[idx], custom,
                                      prob)
                for j, s in enumerate(part):
                    view, where_idx = where(s)
                    view.put(where_idx + (k, cols), {n: v[j] for n, v in values.items()})
            bar.update(len(ss) * len(members))
        bar.update(sum(len(ss) for ss in plan.values()) * len(chunk) - sum(
            len(ss) * sum(1 for i in range(len(chunk)) if int(chunk.end[i]) - k >= int(first[c0 + i]))
            for k, ss in plan.items()))
    bar.close()
    baseline = cat_baselines(bases)
    # Patches before the first difference equal the unpatched run.
    for k, ss in plan.items():
        pos = ends - k
        same = torch.nonzero((pos >= 0) & (pos < first)).flatten()
        if len(same):
            for s in ss:
                view, idx = where(s)
                view.fill_baseline(idx + (k,), baseline, same)
    if not prob:  # not computed: NaN everywhere, the unpatched positions too
        for view in (heads, mlps, neurons):
            view.prob.fill_(float("nan"))
    return PositionSweep(baseline, heads, mlps, neurons, neuron_list, ends, first, {m.name: m for m in custom})


def score_positions(model: Model, pairs: Pairs, *, metric: str | Metric, positions: str, progress: bool,
                    memory_mb: float, offsets: Sequence[int] | None = None, **options) -> Scores:
    """The registry's ``positions``: :func:`sweep_positions` scored by ``metric``, at every offset (``"all"``) or at
    END alone (``"end"``), with the input node (MIB's node graph: the embeddings) patched at the same offsets
    (part ``input``: :func:`circuits.patching.engines.input_node.input_by_offset`)."""
    from dataclasses import replace

    from circuits.patching.engines.input_node import input_by_offset, input_effect

    m = get_metric(metric)
    prob = m.name in PROB_METRICS  # the probability's log-sum-exp only where the metric reads it
    ks = [0] if positions == "end" else offsets
    s = sweep_positions(model, pairs, offsets=ks, memory_mb=memory_mb, progress=progress, prob=prob, **options)
    scores = s.scores(m)
    batch = as_batch(pairs, model)
    ks = range(s.n_offsets) if ks is None else ks
    custom = [s.custom_metrics[m.name]] if m.name in s.custom_metrics else []
    view = input_by_offset(model, batch, ks, s.baseline, custom, prob=prob)
    effect, _ = input_effect(view, s.baseline, m, s.ends)
    return replace(scores, parts={"input": effect, **scores.parts}).at(positions)
