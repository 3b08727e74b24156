"""Plain reference implementations of the engines beyond heads at END, one forward (or backward) at a time.

Slow on purpose, written as a TransformerLens user writes them: full prompts, ``run_with_hooks`` /
``run_with_cache``, one patched forward per node. The tests assert that the fast engines equal them
(:mod:`~circuits.patching.engines.position_sweep`, :mod:`~circuits.patching.engines.neuron_sweep`, :mod:`~circuits.patching.engines.edge_sweep`,
:mod:`~circuits.patching.engines.attribution`), and the benchmarks time them.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import replace
from functools import partial

import torch
from torch import Tensor

from circuits.models.backend import Model, act_name
from circuits.data.pairs import PairBatch, second_answers
from circuits.patching.engines.end_sweep import all_components
from circuits.patching.engines.edge_sweep import EdgeSweep, every_receiver, upstream
from circuits.patching.engines.neuron_sweep import NeuronSweep
from circuits.patching.engines.position_sweep import PositionSweep
from circuits.patching.engines.attribution import Attribution, readout_of
from circuits.patching.engines.input_node import INPUT_SITE, input_effect  # the input node: the embeddings
from circuits.patching.engines.eap_ig import (DEFAULT_GRID, DEFAULT_STEPS, EAPIGScores, alphas, eap_receivers,
                                               eap_senders, eap_upstream)
from circuits.patching.core.end_layers import keep_hook
from circuits.patching.core.metrics import Metric, get_metric
from circuits.patching.core.readouts import Readouts, first_difference
from circuits.patching.engines.end_sweep_plain import (_run_end, baseline_plain, freeze_heads, input_plain, patch_at,
                                                      readouts_of)
from circuits.patching.core.scores import Scores
from circuits.patching.ablation.edges_plain import sender_site
from circuits.types import Component, Mode, Neuron, Receiver



@torch.no_grad()
def cf_answer_plain(model: Model, batch: PairBatch) -> Tensor:
    return second_answers(batch.cf_label, _run_end(model, batch.counterfactual, [], batch))


@torch.no_grad()
def patch_at_plain(model: Model, batch: PairBatch, sender: Component | Neuron, offset: int,
                   cf_answer: Tensor, mode: Mode = "activation") -> dict[str, Tensor]:
    """END readouts after patching ``sender`` at position ``end - offset`` of each pair (activation patching; or
    path patching with every other head frozen)."""
    rows = torch.arange(len(batch))
    pos = batch.end - offset
    names = lambda n: n.endswith(("hook_z", "hook_mlp_out", "hook_post"))  # noqa: E731
    _, ref = model.run_with_cache(batch.reference, names_filter=names)
    _, cf = model.run_with_cache(batch.counterfactual, names_filter=names)
    if isinstance(sender, Neuron):
        name, index = act_name("post", sender.layer), sender.index
    elif sender.kind == "head":
        name, index = act_name("z", sender.layer), sender.head
    else:
        name, index = act_name("mlp_out", sender.layer), None

    patch, freeze = patch_at(cf, rows, pos, index), freeze_heads(ref, cf, rows, pos, sender)
    hooks = [(name, patch)]
    if mode == "path":
        hooks = [(act_name("z", l), freeze) for l in range(model.cfg.n_layers)]
        if not (isinstance(sender, Component) and sender.kind == "head"):  # a head sender is patched by freeze()
            hooks.append((name, patch))
    return readouts_of(_run_end(model, batch.reference, hooks, batch), batch.answer, cf_answer)


@torch.enable_grad()
def attribute_plain(model: Model, batch: PairBatch, metric: Metric, readout: str,
                    mode: Mode = "activation", drop_layer: int | None = None) -> dict[str, Tensor]:
    """Attribution patching as in the TransformerLens demo: full prompts, one forward with gradients, one
    backward. Returns ``(a_cf - a_ref) . grad`` at absolute positions: ``head [layer, pair, pos, head]``, ``mlp
    [layer, pair, pos]``, ``neuron [layer, pair, pos, d_mlp]``, ``input [pair, pos]`` (the embeddings,
    ``blocks.0.hook_resid_pre``); and per layer the attention pattern ``A`` and the
    gradient ``G`` of the readout with respect to it. ``drop_layer``: GradDrop's pass with that layer's residual
    writes (attention and MLP outputs) passing no gradient."""
    L = model.cfg.n_layers
    rows = torch.arange(len(batch))
    with torch.no_grad():
        cf_logits, cf = model.run_with_cache(
            batch.counterfactual,
            names_filter=lambda n: n.endswith(("hook_z", "hook_mlp_out", "hook_post")) or n == INPUT_SITE)
    cf_logits = cf_logits.detach()
    cf_answer = second_answers(batch.cf_label, cf_logits[rows, batch.end].float())
    store: dict[str, Tensor] = {}

    def keep(act: Tensor, hook) -> Tensor:
        if mode == "path" and hook.name.endswith("hook_z"):
            act = act.detach().requires_grad_(True)
        store[hook.name] = act
        return act

    def leaf(act: Tensor, hook) -> Tensor:  # the input node: a leaf whose gradient is read
        store[INPUT_SITE] = act = act.detach().requires_grad_(True)
        return act

    hooks = [(INPUT_SITE, leaf)]
    hooks += [(act_name(s, l), keep) for l in range(L) for s in ("z", "mlp_out", "post", "pattern")]
    if drop_layer is not None:
        hooks += [(act_name(s, drop_layer), lambda act, hook: act.detach()) for s in ("attn_out", "mlp_out")]
    logits = model.run_with_hooks(batch.reference, fwd_hooks=hooks)
    end_logits = logits[rows, batch.end].float()
    if readout in ("logit", "logit_diff", "prob"):
        value = readouts_of(end_logits, batch.answer, cf_answer)[readout]
    else:
        value = metric.of_logits(end_logits, batch.answer, cf_answer)
    names = [n for n in store if not n.endswith("hook_pattern") or mode == "activation"]
    grads = dict(zip(names, torch.autograd.grad(value.sum(), [store[n] for n in names], allow_unused=True)))
    grads = {n: torch.zeros_like(store[n]) if g is None else g for n, g in grads.items()}
    d = lambda n: (cf[n] - store[n].detach()) * grads[n]  # noqa: E731
    out = {"head": torch.stack([d(act_name("z", l)).sum(-1) for l in range(L)]),
           "mlp": torch.stack([d(act_name("mlp_out", l)).sum(-1) for l in range(L)]),
           "neuron": torch.stack([d(act_name("post", l)) for l in range(L)]), "input": d(INPUT_SITE).sum(-1)}
    if mode == "activation":
        out["A"] = [store[act_name("pattern", l)].detach() for l in range(L)]
        out["G"] = [grads[act_name("pattern", l)] for l in range(L)]
    return out


@torch.no_grad()
def edge_caches(model: Model, batch: PairBatch) -> tuple:
    """The reference and counterfactual caches :func:`edge_plain` reads (cache once per batch, as a user would)."""
    _, ref = model.run_with_cache(batch.reference, names_filter=lambda n: n.endswith(("hook_z", "hook_resid_pre",
                                                                                   "hook_resid_mid")))
    _, cf = model.run_with_cache(batch.counterfactual, names_filter=lambda n: n.endswith(("hook_z", "hook_mlp_out")))
    return ref, cf


@torch.no_grad()
def edge_plain(model: Model, batch: PairBatch, sender: Component, receiver: Receiver,
               cf_answer: Tensor, caches: tuple | None = None) -> dict[str, Tensor]:
    """Path patching from ``sender`` to ``receiver`` at END, as in Wang et al. (2023a): (1) run the reference with
    the sender's END output from the counterfactual run and every other head frozen at its reference value (MLPs
    recompute), and record the receiver's input at END; (2) run the reference with only that input replaced
    (the other heads of the receiver's layer keep their reference outputs) and everything after it recomputing;
    read the END logits."""
    L = model.cfg.n_layers
    rows, end = torch.arange(len(batch)), batch.end
    ref, cf = caches or edge_caches(model, batch)
    r_layer = receiver.layer
    site = "resid_pre" if receiver.channel else "resid_mid"
    got: dict[str, Tensor] = {}

    freeze = freeze_heads(ref, cf, rows, end, sender)
    hooks = [(act_name("z", l), freeze) for l in range(L)]
    if sender.kind == "mlp":
        hooks.append((act_name("mlp_out", sender.layer), patch_at(cf, rows, end)))
    hooks.append((act_name(site, r_layer), lambda act, hook: got.__setitem__("x", act[rows, end].clone())))
    model.run_with_hooks(batch.reference, fwd_hooks=hooks, stop_at_layer=r_layer + 1)
    x = got["x"]
    split, mlp_in = model.cfg.use_split_qkv_input, model.cfg.use_hook_mlp_in
    try:
        if receiver.channel:
            model.set_use_split_qkv_input(True)
            n_kv = model.cfg.n_key_value_heads or model.cfg.n_heads
            group = model.cfg.n_heads // n_kv
            idx = receiver.component.head if receiver.channel == "q" else receiver.component.head // group  # type: ignore[operator]

            def patch_input(act: Tensor, hook) -> Tensor:
                act = act.clone()
                act[rows, end, idx] = x.to(act.dtype)
                return act

            def keep_others(z: Tensor, hook) -> Tensor:  # only the receiver head takes the patched input
                out = ref[hook.name].clone()
                out[:, :, receiver.component.head] = z[:, :, receiver.component.head]
                return out

            hooks = [(f"blocks.{r_layer}.hook_{receiver.channel}_input", patch_input),
                     (act_name("z", r_layer), keep_others)]
        else:
            model.set_use_hook_mlp_in(True)

            def patch_mlp_in(act: Tensor, hook) -> Tensor:
                act = act.clone()
                act[rows, end] = x.to(act.dtype)
                return act

            hooks = [(f"blocks.{r_layer}.hook_mlp_in", patch_mlp_in)]
        end_logits = _run_end(model, batch.reference, hooks, batch)
    finally:
        model.set_use_split_qkv_input(split)
        model.set_use_hook_mlp_in(mlp_in)
    return readouts_of(end_logits, batch.answer, cf_answer)


@torch.no_grad()
def ablation_values_plain(model: Model, batch: PairBatch, ablation: str) -> dict[str, Tensor] | None:
    """What :func:`ablate_plain` writes into ablated nodes: the counterfactual run's ``hook_z``/``hook_mlp_out``/
    ``hook_post``, or their mean over the reference runs at each offset from END (a loop over offsets), or
    ``None`` (zero)."""
    names = lambda n: n.endswith(("hook_z", "hook_mlp_out", "hook_post")) or n == INPUT_SITE  # noqa: E731
    if ablation == "zero":
        return None
    if ablation == "counterfactual":
        _, cf = model.run_with_cache(batch.counterfactual, names_filter=names)
        return dict(cf.items())
    _, ref = model.run_with_cache(batch.reference, names_filter=names)
    out = {}
    for name, act in ref.items():
        mean = torch.zeros_like(act)
        for k in range(int(batch.end.max()) + 1):
            have = [p for p in range(len(batch)) if batch.end[p] >= k]
            m = torch.stack([act[p, batch.end[p] - k] for p in have]).float().mean(0).to(act.dtype)
            for p in have:
                mean[p, batch.end[p] - k] = m
        out[name] = mean
    return out


@torch.no_grad()
def ablate_plain(model: Model, batch: PairBatch, heads: list[tuple[int, int]], mlps: list[int],
                 neurons: dict[int, list[int]], values: dict[str, Tensor] | None, positions: str,
                 input: bool = False) -> Tensor:
    """END logits ``[pair, d_vocab]`` (float32) of the reference prompts with ``heads`` (``(layer, head)``),
    ``mlps`` (layers), ``neurons`` (``{layer: [index]}``) and, with ``input``, the input node (the embeddings,
    ``blocks.0.hook_resid_pre``) ablated to ``values`` (from :func:`ablation_values_plain`; ``None``: zero) at END
    (``positions="end"``) or at every position (``"all"``): one ``run_with_hooks``, one unit at a time. The plain
    loop :mod:`circuits.patching.circuit_curves` is tested against."""
    rows = torch.arange(len(batch))

    def put(act: Tensor, hook, index: int | None, name: str | None = None) -> Tensor:
        act = act.clone()
        src = torch.zeros_like(act) if values is None else values[name or hook.name]
        if positions == "end":
            if index is None:
                act[rows, batch.end] = src[rows, batch.end]
            else:
                act[rows, batch.end, index] = src[rows, batch.end, index]
        elif index is None:
            act[:] = src
        else:
            act[:, :, index] = src[:, :, index]
        return act

    hooks = [(act_name("z", l), partial(put, index=h)) for l, h in heads]
    hooks += [(act_name("mlp_out", l), partial(put, index=None)) for l in mlps]
    hooks += [(act_name("post", l), partial(put, index=i)) for l, idx in neurons.items() for i in idx]
    hooks += [(INPUT_SITE, partial(put, index=None, name=INPUT_SITE))] if input else []
    return _run_end(model, batch.reference, hooks, batch)  # Gemma 2's final soft-cap applied there, once


@torch.no_grad()
def ablate_edges_plain(model: Model, batch: PairBatch, ablated: list[tuple[str, str]], ablation: str) -> Tensor:
    """END logits ``[pair, d_vocab]`` (float32) of the reference prompts with the edges ``ablated`` (``(sender,
    receiver)`` names: senders ``input``, ``"3.1"``, ``"MLP3"``; receivers ``"4.2.q"``/``.k``/``.v``, ``"MLP4"``,
    ``logits``) carrying the sender's counterfactual END output (``ablation="counterfactual"``), its mean over the
    reference runs' END, or zero, at END: one ``run_with_hooks`` with split query/key/value inputs
    (:meth:`~circuits.models.backend.Backend.split_inputs`, ungrouped under grouped-query attention), per-head results and MLP inputs, each receiver's END input
    written sender by sender as the sum of every upstream sender's current output (kept edge) or ablated value
    (ablated edge) and the attention biases before it. The plain loop
    :func:`circuits.patching.circuit_curves.circuit_curve` (edges) is tested against."""
    L = model.cfg.n_layers
    rows, end = torch.arange(len(batch)), batch.end
    cur: dict[str, Tensor] = {}

    def keep_current(act: Tensor, hook, name: str) -> Tensor:  # by the name asked for (a Bridge's hook.name is
        cur[name] = act[rows, end].clone()  # an alias's canonical name)
        return act

    sites = ["blocks.0.hook_resid_pre"] + [act_name(s, l) for l in range(L) for s in ("result", "mlp_out")]
    with model.backend.split_inputs(ungroup=True, attn_result=True):
        if ablation == "zero":
            val = None
        else:
            model.run_with_hooks(batch.counterfactual if ablation == "counterfactual" else batch.reference,
                                 fwd_hooks=[(n, partial(keep_current, name=n)) for n in sites])
            val, cur = dict(cur), {}
            if ablation == "mean":
                val = {n: v.mean(0, keepdim=True).expand_as(v) for n, v in val.items()}

        def value(sender: str, kept: bool) -> Tensor:
            site, head = sender_site(sender)
            src = cur if kept else val
            if src is None:
                return torch.zeros_like(cur[site] if head is None else cur[site][:, head])
            return src[site] if head is None else src[site][:, head]

        def senders_into(layer: int, mlp: bool) -> list[str]:
            heads = lambda l: [f"{l}.{h}" for h in range(model.cfg.n_heads)]  # noqa: E731
            out = ["input"] + [s for l in range(layer) for s in [*heads(l), f"MLP{l}"]]
            return out + heads(layer) if mlp else out

        def assemble(act: Tensor, hook, receiver: str, receiver_head: int | None, layer: int, mlp: bool) -> Tensor:
            # the receiver's END input: each upstream sender's current output, or its ablated value where the edge is
            # ablated, plus the attention output biases of the layers before it
            x = sum(value(s, (s, receiver) not in gone) for s in senders_into(layer, mlp))
            x = x + sum(model.backend.attn_out(l)[1] for l in range(layer + mlp))
            act = act.clone()
            if receiver_head is None:
                act[rows, end] = x.to(act.dtype)
            else:
                act[rows, end, receiver_head] = x.to(act.dtype)
            return act

        gone = set(ablated)
        into = {r for _, r in ablated}
        hooks = [("blocks.0.hook_resid_pre", partial(keep_current, name="blocks.0.hook_resid_pre"))]
        for l in range(L):
            for h in range(model.cfg.n_heads):
                for c in "qkv":
                    if (r := f"{l}.{h}.{c}") in into:
                        hooks.append((f"blocks.{l}.hook_{c}_input",
                                      partial(assemble, receiver=r, receiver_head=h, layer=l, mlp=False)))
            hooks.append((act_name("result", l), partial(keep_current, name=act_name("result", l))))
            if f"MLP{l}" in into:
                hooks.append((f"blocks.{l}.hook_mlp_in",
                              partial(assemble, receiver=f"MLP{l}", receiver_head=None, layer=l, mlp=True)))
            hooks.append((act_name("mlp_out", l), partial(keep_current, name=act_name("mlp_out", l))))
        if "logits" in into:
            hooks.append((act_name("resid_post", L - 1),
                          partial(assemble, receiver="logits", receiver_head=None, layer=L, mlp=False)))
        logits = _run_end(model, batch.reference, hooks, batch)
    return logits  # soft-capped once, in _run_end


@torch.enable_grad()
def eap_ig_plain(model: Model, batch: PairBatch, metric: Metric, readout: str, steps: int, level: str = "node",
                 positions: str = "all", grid: str = "left") -> dict[str, Tensor]:
    """EAP-IG (inputs variant) as its authors' code computes it: full prompts; the counterfactual and reference
    runs cached; per step (``alpha`` in :func:`circuits.patching.engines.eap_ig.alphas` of ``grid``) one forward of the
    reference prompt with ``blocks.0.hook_resid_pre`` replaced by ``e_cf + alpha (e_ref - e_cf)`` and ``torch.autograd.grad`` of the readout; then, node by node
    (and sender by receiver), ``(a_cf - a_ref) . mean gradient`` summed over positions up to END (or at END).

    Returns ``input [pair]``, ``head [layer, head, pair]``, ``mlp [layer, pair]``; with ``level="edge"`` also
    ``edge [sender, receiver, pair]`` in :func:`circuits.patching.engines.eap_ig.eap_senders` x ``eap_receivers`` order
    (NaN where EAP-IG's graph has no edge), sender outputs read from TransformerLens's own ``hook_result``."""
    cfg = model.cfg
    L, H = cfg.n_layers, cfg.n_heads
    rows = torch.arange(len(batch))
    edges = level == "edge"
    embed = "blocks.0.hook_resid_pre"
    names = [embed] + [act_name(s, l) for l in range(L) for s in ("z", "mlp_out", *(("result",) if edges else ()))]

    def cached(tokens: Tensor) -> tuple[Tensor, dict[str, Tensor]]:  # activations by the names asked for (a
        got: dict[str, Tensor] = {}  # Bridge's hook.name is an alias's canonical name)
        logits = model.run_with_hooks(tokens, fwd_hooks=[(n, keep_hook(got, n)) for n in names])
        return logits, got

    with model.backend.split_inputs(ungroup=True, attn_result=True) if edges else contextlib.nullcontext():
        with torch.no_grad():
            cf_logits, cf = cached(batch.counterfactual)
            _, ref = cached(batch.reference)
        cf_answer = second_answers(batch.cf_label, cf_logits[rows, batch.end].float())
        if edges:
            targets = [f"blocks.{l}.hook_{c}_input" for l in range(L) for c in "qkv"]
            targets += [f"blocks.{l}.hook_mlp_in" for l in range(L)] + [f"blocks.{L - 1}.hook_resid_post"]
        else:
            targets = [act_name(s, l) for l in range(L) for s in ("z", "mlp_out")]
        total: dict[str, Tensor] = {}
        for step_alpha in alphas(steps, grid):
            store: dict[str, Tensor] = {}

            def interpolate(act: Tensor, hook, alpha: float = step_alpha) -> Tensor:
                x = torch.lerp(cf[embed], ref[embed], alpha).detach().requires_grad_(True)
                store[embed] = x
                return x

            def keep(act: Tensor, hook, name: str) -> Tensor:  # the gradient at the receiver's own copy (a
                store[name] = act = act.clone()  # Bridge's hook_mlp_in is ln2's input, which the residual carries on)
                return act

            logits = model.run_with_hooks(batch.reference, fwd_hooks=[(embed, interpolate)] +
                                          [(t, partial(keep, name=t)) for t in targets])
            end_logits = logits[rows, batch.end].float()
            if readout in ("logit", "logit_diff", "prob"):
                value = readouts_of(end_logits, batch.answer, cf_answer)[readout]
            else:
                value = metric.of_logits(end_logits, batch.answer, cf_answer)
            keys = list(store)
            for key, g in zip(keys, torch.autograd.grad(value.sum(), [store[n] for n in keys], allow_unused=True)):
                g = torch.zeros_like(store[key]) if g is None else g
                total[key] = total[key] + g if key in total else g
    pos = torch.arange(batch.reference.shape[1])
    counted = (pos[None] == batch.end[:, None]) if positions == "end" else (pos[None] <= batch.end[:, None])
    grad = {n: g / steps for n, g in total.items()}

    def score(a: Tensor, g: Tensor) -> Tensor:  # [pair, pos, d] -> [pair]
        return ((a * g).sum(-1) * counted).sum(-1)

    out = {"input": score(cf[embed] - ref[embed], grad[embed]),
           "head": torch.zeros(L, H, len(batch)), "mlp": torch.zeros(L, len(batch))}
    if not edges:
        for l in range(L):
            z = act_name("z", l)
            for h in range(H):
                out["head"][l, h] = score(cf[z][:, :, h] - ref[z][:, :, h], grad[z][:, :, h])
            out["mlp"][l] = score(cf[act_name("mlp_out", l)] - ref[act_name("mlp_out", l)], grad[act_name("mlp_out", l)])
        return out
    senders, receivers = eap_senders(L, H), eap_receivers(L, H)

    def sender_delta(s) -> Tensor:
        if s == "input":
            return cf[embed] - ref[embed]
        if s.kind == "head":
            n = act_name("result", s.layer)
            return cf[n][:, :, s.head] - ref[n][:, :, s.head]
        return cf[act_name("mlp_out", s.layer)] - ref[act_name("mlp_out", s.layer)]

    def receiver_grad(r) -> Tensor:
        if r == "logits":
            return grad[f"blocks.{L - 1}.hook_resid_post"]
        if r.channel is None:
            return grad[f"blocks.{r.layer}.hook_mlp_in"]
        return grad[f"blocks.{r.layer}.hook_{r.channel}_input"][:, :, r.component.head]

    out["edge"] = torch.full((len(senders), len(receivers), len(batch)), float("nan"))
    for i, s in enumerate(senders):
        for j, r in enumerate(receivers):
            if eap_upstream(s, r):
                out["edge"][i, j] = score(sender_delta(s), receiver_grad(r))
    return out


# --- the registry's references (circuits.patching.engines.registry): each engine's plain loop as the same Scores ------------
def reference_positions(model: Model, batch: PairBatch, *, metric: str | Metric, positions: str,
                        offsets: Sequence[int] | None = None, **options) -> Scores:
    """circuits.patching.engines.plain.patch_at_plain: one run_with_hooks per component and offset"""
    cfg = model.cfg
    P, K = len(batch), int(batch.end.max()) + 1
    ks = [0] if positions == "end" else (range(K) if offsets is None else offsets)
    heads, mlps = Readouts.empty((cfg.n_layers, cfg.n_heads, K, P)), Readouts.empty((cfg.n_layers, K, P))
    cf_answer = cf_answer_plain(model, batch)
    for k in ks:
        valid = torch.nonzero(batch.end >= k).flatten()
        sub = batch.select(valid)
        for c in all_components(model):
            row = patch_at_plain(model, sub, c, k, cf_answer[valid])
            view, idx = (heads, (c.layer, c.head)) if c.kind == "head" else (mlps, (c.layer,))
            for r, v in row.items():
                getattr(view, r)[idx + (k, valid.cpu())] = v.float().cpu()
    inputs = Readouts.empty((K, P))  # the input node at each offset, one run_with_hooks per pair
    for k in ks:
        valid = torch.nonzero(batch.end >= k).flatten()
        inputs.put((k, valid.cpu()), input_plain(model, batch.select(valid), k, cf_answer[valid]))
    base = baseline_plain(model, batch).to("cpu")
    s = PositionSweep(base, heads, mlps, Readouts.empty((0, K, P)), [], batch.end.cpu(), first_difference(batch).cpu())
    scores = s.scores(metric)
    effect, _ = input_effect(inputs, base, get_metric(metric), batch.end.cpu())
    return replace(scores, parts={"input": effect, **scores.parts}).at(positions)


def _attribution_reference(model: Model, batch: PairBatch, metric: str | Metric, positions: str, grad_drop: bool,
                           neurons: bool = False, qk_fix: bool = False, **options) -> Scores:
    m = get_metric(metric)  # qk_fix changes only the query and key nodes, which Scores leave out
    L, P, K = model.cfg.n_layers, len(batch), int(batch.end.max()) + 1
    ends = batch.end.cpu()
    first = first_difference(batch).cpu()
    Kn = int((ends - torch.minimum(first, ends)).max()) + 1  # offsets where any pair's prompts differ

    def by_offset(x: Tensor) -> Tensor:  # [layer, pair, pos, *rest] -> [layer, *rest, offset, pair]
        out = torch.full((L, *x.shape[3:], K, P), float("nan"))
        for i in range(P):
            e = int(ends[i])
            out[..., : e + 1, i] = x[:, i, : e + 1].flip(1).movedim(1, -1).float().cpu()
        return out

    sites = ("head", "mlp", "neuron") if neurons else ("head", "mlp")
    gd: dict[str, Tensor] = {}
    if grad_drop:
        total = [attribute_plain(model, batch, m, readout_of(m), drop_layer=l) for l in range(L)]
        for site in sites:
            t = by_offset(sum(d[site].abs() for d in total) / (L - 1))  # type: ignore[arg-type]
            gd[site] = (t[..., :Kn, :] if site == "neuron" else t).nanmean(-1)
        gd["input"] = by_offset((sum(d["input"].abs() for d in total) / (L - 1))[None])[0].nanmean(-1)  # type: ignore[union-attr]
    plain = attribute_plain(model, batch, m, readout_of(m), "activation")
    neuron = by_offset(plain["neuron"])[..., :Kn, :] if neurons else None  # later offsets: both prompts agree
    att = Attribution(m, "activation", readout_of(m), baseline_plain(model, batch).to("cpu"),
                      by_offset(plain["head"]), by_offset(plain["mlp"]), neuron, None, None, ends, first, gd,
                      input=by_offset(plain["input"][None])[0])
    return att.scores(graddrop=grad_drop, input=True).at(positions)


def reference_screen(model: Model, batch: PairBatch, *, metric: str | Metric, positions: str, **options) -> Scores:
    """circuits.patching.engines.plain.attribute_plain: full prompts, one forward and one backward"""
    return _attribution_reference(model, batch, metric, positions, False, **options)


def reference_graddrop(model: Model, batch: PairBatch, *, metric: str | Metric, positions: str, **options) -> Scores:
    """circuits.patching.engines.plain.attribute_plain: full prompts, one forward and one backward per dropped layer"""
    return _attribution_reference(model, batch, metric, positions, True, **options)


def reference_eap_ig(model: Model, batch: PairBatch, *, metric: str | Metric, positions: str,
                     steps: int | None = None, level: str = "node", grid: str | None = None, edges: bool = False,
                     **options) -> Scores:
    """circuits.patching.engines.plain.eap_ig_plain: full prompts, one forward and backward per integration step"""
    m = get_metric(metric)
    steps, grid, level = steps or DEFAULT_STEPS, grid or DEFAULT_GRID, "edge" if edges else level
    p = eap_ig_plain(model, batch, m, readout_of(m), steps, level=level, positions=positions, grid=grid)
    p = {k: v.float().cpu() for k, v in p.items()}
    return EAPIGScores.of(m, readout_of(m), baseline_plain(model, batch).to("cpu"), steps, positions, p["input"],
                          p["head"], p["mlp"], p.get("edge"), grid=grid)


def reference_neurons(model: Model, batch: PairBatch, *, metric: str | Metric, positions: str, mode: Mode = "path",
                      neurons: Sequence[Neuron] | None = None, layers: Sequence[int] | None = None,
                      **options) -> Scores:
    """circuits.patching.engines.plain.patch_at_plain: one run_with_hooks per neuron"""
    if neurons is None:
        layers = range(model.cfg.n_layers) if layers is None else layers
        neurons = [Neuron(l, i) for l in layers for i in range(model.cfg.d_mlp)]
    neurons = sorted(set(neurons))
    cf_answer = cf_answer_plain(model, batch)
    out = Readouts.empty((len(neurons), len(batch)))
    for j, n in enumerate(neurons):
        out.put((j,), {r: v.float().cpu() for r, v in patch_at_plain(model, batch, n, 0, cf_answer, mode).items()})
    return NeuronSweep(mode, baseline_plain(model, batch).to("cpu"), neurons, out).scores(metric)


def reference_edges(model: Model, batch: PairBatch, *, metric: str | Metric, positions: str,
                    receivers: Sequence[Receiver | str] | str | None = None,
                    senders: Sequence[Component | str] | None = None, **options) -> Scores:
    """circuits.patching.engines.plain.edge_plain: two run_with_hooks per edge (Wang et al.'s two steps)"""
    recv = every_receiver(model) if receivers is None else Receiver.parse_many(receivers)
    send = (all_components(model) if senders is None else [Component.parse(s) for s in senders])
    send = sorted((s for s in send if senders is not None or any(upstream(s, r) for r in recv)),
                  key=Component.sort_key)
    cf_answer, caches = cf_answer_plain(model, batch), edge_caches(model, batch)
    out = Readouts.empty((len(send), len(recv), len(batch)))
    for i, s in enumerate(send):
        for j, r in enumerate(recv):
            if upstream(s, r):
                out.put((i, j), {k: v.float().cpu() for k, v in edge_plain(model, batch, s, r, cf_answer,
                                                                             caches).items()})
    return EdgeSweep(baseline_plain(model, batch).to("cpu"), send, recv, out).scores(metric)
