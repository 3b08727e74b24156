"""The executor's every-position edge strategy (:func:`circuits.patching.ablation.executor.run_ablation` runs it for
edges with ``positions="all"``): MIB's edge ablation as ``MIB-circuit-track`` evaluates a circuit (EAP-IG's
``evaluate_graph``), at every position of the prompt.

MIB's graph (:mod:`circuits.patching.circuit_curves.edge_curves`): senders the input (the embeddings,
``blocks.0.hook_resid_pre``), every head and every MLP; receivers every head's query, key and value input (per query
head), every MLP's input and the logits (the final residual). In a circuit, each receiver reads, at every position,
the residual stream of the run as it goes minus, for every sender whose edge into it is out of the circuit, that
sender's difference (its output in this run minus its ablated value: its output in the pair's counterfactual run,
its END-aligned mean over the reference runs, or zero). A kept edge therefore carries the sender's output as the
ablated run computes it, an ablated one the sender's ablated value; with every edge kept nothing changes (the clean
run, exactly) and with none kept every receiver reads the senders' ablated values.

One forward per chunk of ``set x pair`` rows (whole prompts up to each pair's END, right-padded: causal attention
keeps pads after END from reaching it) under :meth:`~circuits.models.backend.Backend.split_inputs` (each head's own
q, k, v input, each MLP's own input): hooks keep each sender's difference at every position (a head's from its
``hook_z`` through ``W_O``), and each receiver's input hook subtracts the differences of the senders its row's set
cuts off from it (one einsum per layer's q, k, v inputs, one per MLP input); the final residual at END subtracts the
logits' ones. :func:`~circuits.patching.ablation.edges_plain.ablate_edges_everywhere_plain` is the plain loop it
equals (one ``run_with_hooks`` per pair per circuit)."""

from __future__ import annotations

from functools import partial

import torch
from jaxtyping import Bool, Float
from torch import Tensor

from circuits.data.pairs import PairBatch
from circuits.models.backend import Model, act_name
from circuits.patching.ablation.values import INPUT_SITE, ValueKind, end_aligned_mean, head_outputs, record


def sender_names(model: Model) -> list[str]:
    """The hooks every sender's output is read from: the input, then per layer its heads' ``hook_z`` (through
    ``W_O``) and its MLP's ``hook_mlp_out``."""
    return [INPUT_SITE] + [act_name(s, l) for l in range(model.cfg.n_layers) for s in ("z", "mlp_out")]


def sender_outputs(model: Model, acts: dict[str, Tensor]) -> Float[Tensor, "pair pos sender d_model"]:
    """Each sender's output at every position, in :func:`~circuits.patching.circuit_curves.edge_curves.edge_senders`'
    order, from the activations :func:`sender_names` names (a head's output is ``z_h @ W_O[h]``, its write into the
    residual stream without the layer's bias)."""
    cfg = model.cfg
    parts = [acts[INPUT_SITE][:, :, None]]
    for l in range(cfg.n_layers):
        parts += [head_outputs(model, l, acts[act_name("z", l)]), acts[act_name("mlp_out", l)][:, :, None]]
    return torch.cat([p.to(parts[0].device) for p in parts], dim=2)


def _rows_per_pass(memory_mb: float, per_row: int, dtype: torch.dtype) -> int:
    return max(2, int(memory_mb * 2**20 / (per_row * (torch.finfo(dtype).bits // 8))))


@torch.no_grad()
def edges_everywhere(model: Model, batch: PairBatch, edges: Bool[Tensor, "set sender receiver"], kind: ValueKind,
                     memory_mb: float = 1024) -> tuple[Float[Tensor, "set pair d_model"], Float[Tensor, "pair d_model"]]:
    """The final END residual of every set ablating, at every position, the edges ``[set, sender, receiver]`` it marks
    (values of ``kind``: ``counterfactual``, ``end_mean`` or ``zero``), and the counterfactual run's ``[pair,
    d_model]`` (see the module docstring). Rows per forward follow ``memory_mb`` (each row keeps every sender's
    difference at every position)."""
    cfg = model.cfg
    L, H, d = cfg.n_layers, cfg.n_heads, cfg.d_model
    S, n_s, n_r = edges.shape
    P = len(batch)
    end = batch.end
    W = int(end.max()) + 1
    ref, cf = batch.reference[:, :W].to(cfg.device), batch.counterfactual[:, :W].to(cfg.device)
    names = sender_names(model)
    acts, cf_full = record(model, cf, names)  # the counterfactual run: its END residual reads the second answer
    cf_resid = cf_full[torch.arange(P, device=cf_full.device), end.to(cf_full.device)]
    if kind == "counterfactual":
        values: Tensor | None = sender_outputs(model, acts)
    elif kind == "end_mean":
        values = end_aligned_mean(sender_outputs(model, record(model, ref, names)[0]), end)
    elif kind == "zero":
        values = None
    else:
        raise ValueError(f"Unknown edge values {kind!r}; accepted: counterfactual, end_mean, zero")
    del acts
    dtype, device = cfg.dtype, cfg.device
    gone = edges.to(device=device, dtype=dtype)  # [set, sender, receiver]: 1 where the set cuts the edge
    out = torch.empty(S, P, d, dtype=dtype, device=model.backend.output_device())
    rows_per = _rows_per_pass(memory_mb, W * n_s * d, dtype)
    pairs_per = max(1, min(P, rows_per // (S + 1)))  # every set of a pair in one pass where memory allows
    sets_per = max(1, min(S, rows_per // pairs_per - 1))
    for p0 in range(0, P, pairs_per):
        pairs = torch.arange(p0, min(P, p0 + pairs_per))
        nb = len(pairs)
        val = None if values is None else values[pairs.to(values.device)].to(device)  # [pair, pos, sender, d]
        for s0 in range(0, S, sets_per):
            sets = torch.arange(s0, min(S, s0 + sets_per))
            ns = len(sets)
            g = gone[sets.to(device)]  # [c, sender, receiver]
            diff = torch.zeros(ns, nb, W, n_s, d, dtype=dtype, device=device)  # each sender's output minus its value

            def keep(act: Tensor, hook, first: int, head: bool, layer: int = 0) -> Tensor:
                x = act.to(device, dtype)  # hook_z [row, pos, head, d_head] -> each head's write [row, pos, head, d_model]
                x = head_outputs(model, layer, x) if head else x[:, :, None]
                x = x.reshape(ns, nb, W, -1, d)
                diff[:, :, :, first : first + x.shape[3]] = x if val is None else x - val[None, :, :, first : first
                                                                                            + x.shape[3]]
                return act

            qkv: dict[int, Tensor] = {}  # a layer's q, k, v deltas, computed at its first input hook

            def cut(act: Tensor, hook, upto: int, receivers: slice, layer: int | None = None, c: int = 0) -> Tensor:
                m = g[:, :upto, receivers]  # [c, sender, receiver]
                if not bool(m.any()):
                    return act
                if layer is None:  # an MLP's input
                    delta = torch.einsum("cptsd,cs->cptd", diff[:, :, :, :upto], m[:, :, 0])
                else:  # the layer's 3H inputs at once, head by head [c, pair, pos, head, qkv, d]
                    if layer not in qkv:
                        qkv.clear()
                        qkv[layer] = torch.einsum("cptsd,csr->cptrd", diff[:, :, :, :upto], m).unflatten(3, (H, 3))
                    delta = qkv[layer][:, :, :, :, c]
                return act - delta.reshape(act.shape).to(act.device, act.dtype)

            hooks = [(INPUT_SITE, partial(keep, first=0, head=False))]
            for l in range(L):
                first, r0 = 1 + l * (H + 1), l * (3 * H + 1)
                for c, letter in enumerate("qkv"):  # receivers r0 + 3h + c: head h's q, k, v input
                    hooks.append((act_name(f"{letter}_input", l),
                                  partial(cut, upto=first, receivers=slice(r0, r0 + 3 * H), layer=l, c=c)))
                hooks.append((act_name("z", l), partial(keep, first=first, head=True, layer=l)))
                hooks.append((act_name("mlp_in", l), partial(cut, upto=first + H,
                                                             receivers=slice(r0 + 3 * H, r0 + 3 * H + 1))))
                hooks.append((act_name("mlp_out", l), partial(keep, first=first + H, head=False)))
            tokens = ref[pairs.to(device)].repeat(ns, 1)  # rows set-major: row c * nb + j
            with model.backend.split_inputs(ungroup=True), model.hooks(fwd_hooks=hooks):
                resid = model.backend.final_residual(tokens)
            e = end[pairs].to(device).repeat(ns)
            at_end = resid[torch.arange(ns * nb, device=resid.device), e.to(resid.device)].to(device, dtype)
            # the logits: the final residual at END less the differences of the senders cut off from them
            d_end = diff[:, torch.arange(nb, device=device), end[pairs].to(device)]  # [c, pair, sender, d]
            at_end = at_end.reshape(ns, nb, d) - torch.einsum("cpsd,cs->cpd", d_end, g[:, :, n_r - 1])
            out[sets.to(out.device)[:, None], pairs.to(out.device)[None]] = at_end.to(out)
    return out, cf_resid
