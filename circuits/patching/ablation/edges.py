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

**Where the two runs agree nothing is cut** (counterfactual values): before a pair's first differing token
(:func:`body_start`, at most END) its two prompts are the same tokens, so the counterfactual run equals the clean run
there, and so does every circuit's run. By induction over the layers: at such a position the input's output
(embeddings, and positional embeddings, of the same token at the same position) is the same in both runs, so its
difference is 0; a receiver there reads the residual less a sum of zero differences, i.e. the clean residual; its
attention reads keys and values at that position and earlier ones only (causal attention), all before the first
difference, so every head's and MLP's output there is the clean one, equal to the counterfactual run's, and every
difference is 0 again. Each pair's shared start therefore runs once, clean and unhooked, into the backend's
key/value cache (:meth:`~circuits.models.backend.Backend.run_prefixes`; the distinct starts once each), and every row
continues from it over the positions from the first difference to END alone: the counterfactual run once per pair,
then the circuits. Mean and zero values differ from the clean run's before the first difference, so those rows run
their whole prompts (start 0), as they do on a backend whose cache does not give the full run's numbers
(:meth:`~circuits.models.backend.Backend.prefix_sharing`).

Rows are ``set x pair`` (each pair's body, right-padded: causal attention keeps pads after END from reaching it), as
many per forward as ``memory_mb`` allows, under :meth:`~circuits.models.backend.Backend.split_inputs` (each head's own
q, k, v input, each MLP its own): hooks keep each sender's difference at every body position (a head's from its
``hook_z`` through ``W_O``), and each receiver's input hook subtracts the differences of the senders its row's set
cuts off from it (one einsum per layer's q, k, v inputs, one per MLP input); the final residual at END subtracts the
logits' ones. :func:`~circuits.patching.ablation.edges_plain.ablate_edges_everywhere_plain` is the plain loop it
equals (one ``run_with_hooks`` per pair per circuit, whole prompts, every position cut)."""

from __future__ import annotations

from functools import partial

import torch
from jaxtyping import Bool, Float, Int
from torch import Tensor

from circuits.data.pairs import PairBatch
from circuits.models.backend import Model, act_name
from circuits.patching.ablation.values import INPUT_SITE, ValueKind, end_aligned_mean, head_outputs, record
from circuits.patching.core.readouts import first_difference

KINDS = ("counterfactual", "end_mean", "zero")


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


def body_start(model: Model, batch: PairBatch, kind: ValueKind) -> Int[Tensor, " pair"]:
    """Each pair's first position whose edges can carry anything: with counterfactual values, where its prompts first
    differ (at most END; every difference before it is 0, see the module docstring), on a backend whose key/value
    cache gives the full run's numbers; else 0 (mean and zero values differ from the clean run everywhere)."""
    if kind == "counterfactual" and model.backend.prefix_sharing():
        return torch.minimum(first_difference(batch), batch.end).cpu()
    return torch.zeros(len(batch), dtype=torch.long)


def _keep(store: dict[str, Tensor], name: str):  # by the name asked for (a Bridge's hook.name is an alias's target)
    def hook(act: Tensor, hook) -> Tensor:
        store[name] = act.detach()
        return act
    return hook


def row_bytes(model: Model, body: int, n_prefix: int) -> int:
    """Bytes one ``set x pair`` row takes in a forward of ``body`` positions after ``n_prefix`` cached ones: every
    sender's difference at every body position, the prefix's keys and values (one per query head) and one layer's
    working tensors (the per-head q, k, v inputs, the MLP's, the attention pattern)."""
    cfg = model.cfg
    d, H, L = cfg.d_model, cfg.n_heads, cfg.n_layers
    n_s = 1 + L * (H + 1)
    per = body * n_s * d + 2 * L * H * cfg.d_head * n_prefix + \
        body * (3 * H * d + 8 * d + 3 * (cfg.d_mlp or 4 * d) + 2 * H * (n_prefix + body))
    return per * (torch.finfo(cfg.dtype).bits // 8)


@torch.no_grad()
def edges_everywhere(model: Model, batch: PairBatch, edges: Bool[Tensor, "set sender receiver"], kind: ValueKind,
                     memory_mb: float = 1024) -> tuple[Float[Tensor, "set pair d_model"], Float[Tensor, "pair d_model"]]:
    """The final END residual of every set ablating, at every position, the edges ``[set, sender, receiver]`` it marks
    (values of ``kind``: ``counterfactual``, ``end_mean`` or ``zero``), and the counterfactual run's ``[pair,
    d_model]`` (see the module docstring). Rows per forward follow ``memory_mb`` (:func:`row_bytes`)."""
    if kind not in KINDS:
        raise ValueError(f"Unknown edge values {kind!r}; accepted: {', '.join(KINDS)}")
    cfg = model.cfg
    L, H, d = cfg.n_layers, cfg.n_heads, cfg.d_model
    S, n_s, n_r = edges.shape
    P = len(batch)
    dtype, device = cfg.dtype, cfg.device
    end = batch.end.cpu()
    start = body_start(model, batch, kind)  # [pair]: positions before it run once, clean, in the key/value cache
    body_end = end - start  # each pair's END among its body positions
    T = int(body_end.max()) + 1
    src = (start[:, None] + torch.arange(T)[None]).clamp_max(batch.reference.shape[1] - 1)
    ref_body = batch.reference.cpu().gather(1, src)
    cf_body = batch.counterfactual.cpu().gather(1, src)
    n_max = int(start.max())
    prefix = model.backend.run_prefixes(batch.reference[:, :n_max].to(device), start.to(device)) if n_max else None
    if prefix is not None:  # the receivers' own inputs read one key/value head per query head
        prefix = model.backend.ungroup_prefix(prefix)
    rows_all = torch.arange(P)

    def run(tokens: Tensor, rows: Tensor, hooks: list) -> Tensor:
        """The final residual of body ``tokens`` (each row continuing pair ``rows[i]``'s cached start)."""
        pre = None if prefix is None else model.backend.select_prefix(prefix, rows.to(device))
        with model.backend.split_inputs(ungroup=True), model.hooks(fwd_hooks=hooks):
            return model.backend.continue_prefixes(tokens.to(device), pre)

    # The counterfactual run, once per pair: its END residual reads the second answer, its senders' outputs (over
    # the body) are the counterfactual values.
    names = sender_names(model)
    acts: dict[str, Tensor] = {}
    cf_full = run(cf_body, rows_all, [(n, _keep(acts, n)) for n in names] if kind == "counterfactual" else [])
    cf_resid = cf_full[rows_all.to(cf_full.device), body_end.to(cf_full.device)]
    if kind == "counterfactual":
        values: Tensor | None = sender_outputs(model, acts)  # [pair, body, sender, d_model]
    elif kind == "end_mean":  # start 0: the body is the whole prompt
        values = end_aligned_mean(sender_outputs(model, record(model, ref_body.to(device), names)[0]), end)
    else:
        values = None
    del acts, cf_full
    gone = edges.to(device=device, dtype=dtype)  # [set, sender, receiver]: 1 where the set cuts the edge
    out = torch.empty(S, P, d, dtype=dtype, device=model.backend.output_device())
    rows_per = max(2, int(memory_mb * 2**20 / row_bytes(model, T, n_max)))
    pairs_per = max(1, min(P, rows_per // S))  # every set of a pair in one pass where memory allows
    sets_per = max(1, min(S, rows_per // pairs_per))
    for p0 in range(0, P, pairs_per):
        pairs = torch.arange(p0, min(P, p0 + pairs_per))
        nb = len(pairs)
        # [sender, pair, body, d]: the layout of the differences below
        val = None if values is None else values[pairs.to(values.device)].to(device).permute(2, 0, 1, 3).contiguous()
        for s0 in range(0, S, sets_per):
            sets = torch.arange(s0, min(S, s0 + sets_per))
            ns = len(sets)
            g = gone[sets.to(device)]  # [c, sender, receiver]
            # each sender's output minus its value, [set, sender, pair, pos, d]: every receiver's sum over senders is
            # one batched matrix product over the contiguous (pair, pos, d) block of each sender
            diff = torch.zeros(ns, n_s, nb, T, d, dtype=dtype, device=device)

            def keep(act: Tensor, hook, first: int, head: bool, layer: int = 0) -> Tensor:
                x = act.to(device, dtype)  # hook_z [row, pos, head, d_head] -> each head's write [row, pos, head, d_model]
                x = head_outputs(model, layer, x) if head else x[:, :, None]
                x = x.reshape(ns, nb, T, -1, d).permute(0, 3, 1, 2, 4)  # [set, sender, pair, pos, d]
                k = x.shape[1]
                diff[:, first : first + k] = x if val is None else x - val[None, first : first + k]
                return act

            qkv: dict[int, Tensor] = {}  # a layer's q, k, v deltas, computed at its first input hook

            def cut(act: Tensor, hook, upto: int, receivers: slice, layer: int | None = None, c: int = 0) -> Tensor:
                m = g[:, :upto, receivers]  # [c, sender, receiver]
                if not bool(m.any()):
                    return act
                senders = diff[:, :upto].flatten(2)  # [c, sender, pair * pos * d]
                if layer is None:  # an MLP's input
                    delta = torch.bmm(m.transpose(1, 2), senders)  # [c, 1, pair * pos * d]
                else:  # the layer's 3H inputs at once, head by head [c, head, qkv, pair, pos, d]
                    if layer not in qkv:
                        qkv.clear()
                        qkv[layer] = torch.bmm(m.transpose(1, 2), senders).view(ns, H, 3, nb, T, d)
                    delta = qkv[layer][:, :, c].permute(0, 2, 3, 1, 4)  # [c, pair, pos, head, d]
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
            row_pair = pairs.repeat(ns)  # rows set-major: row c * nb + j continues pair pairs[j]
            resid = run(ref_body[row_pair], row_pair, hooks)
            e = body_end[row_pair]
            at_end = resid[torch.arange(ns * nb, device=resid.device), e.to(resid.device)].to(device, dtype)
            # the logits: the final residual at END less the differences of the senders cut off from them
            d_end = diff[:, :, torch.arange(nb, device=device), body_end[pairs].to(device)]  # [c, sender, pair, d]
            at_end = at_end.reshape(ns, nb, d) - torch.einsum("cspd,cs->cpd", d_end, g[:, :, n_r - 1])
            out[sets.to(out.device)[:, None], pairs.to(out.device)[None]] = at_end.to(out)
    return out, cf_resid.to(out)
