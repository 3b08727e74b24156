"""The plain loop of edge ablation at every position (MIB's ``evaluate_graph``), written for clarity: one
``run_with_hooks`` per pair per circuit, edge by edge. :func:`circuits.patching.ablation.edges.edges_everywhere` (the
executor's batched strategy) is tested against it."""

from __future__ import annotations

from functools import partial

import torch
from torch import Tensor

from circuits.data.pairs import PairBatch
from circuits.models.backend import Model, act_name
from circuits.patching.ablation.values import INPUT_SITE


def sender_site(name: str) -> tuple[str, int | None]:
    """The hook a sender's output is read at (``input``, ``"3.1"`` a head through ``hook_result``, ``"MLP3"``) and its
    head."""
    if name == "input":
        return INPUT_SITE, None
    if name.startswith("MLP"):
        return act_name("mlp_out", int(name[3:])), None
    layer, head = map(int, name.split("."))
    return act_name("result", layer), head


@torch.no_grad()
def _outputs(model: Model, tokens: Tensor, names: list[str]) -> dict[str, Tensor]:
    """``names``' activations at every position of one prompt ``tokens [pos]`` (with per-head ``hook_result``)."""
    store: dict[str, Tensor] = {}

    def keep(act: Tensor, hook, name: str) -> None:
        store[name] = act[0].detach().clone()

    with model.backend.split_inputs(ungroup=True, attn_result=True):
        model.run_with_hooks(tokens[None], fwd_hooks=[(n, partial(keep, name=n)) for n in names],
                             stop_at_layer=model.cfg.n_layers)
    return store


@torch.no_grad()
def ablate_edges_everywhere_plain(model: Model, batch: PairBatch, ablated: list[tuple[str, str]],
                                  ablation: str, outputs: list[dict[str, Tensor]] | None = None) -> Tensor:
    """END logits ``[pair, d_vocab]`` (float32) of the reference prompts with the edges ``ablated`` (``(sender,
    receiver)`` names as :func:`circuits.patching.engines.plain.ablate_edges_plain` takes them: senders ``input``,
    ``"3.1"``, ``"MLP3"``; receivers ``"4.2.q"``/``.k``/``.v``, ``"MLP4"``, ``logits``) ablated at every position:
    each receiver's input is the residual stream of this run minus, for each of its ablated edges, the sender's output
    in this run minus its ablated value at the same position (``ablation``: ``counterfactual``, the pair's
    counterfactual run; ``mean``, the mean over the batch's reference runs at the same offset from END; ``zero``).
    One pair and one ``run_with_hooks`` at a time, each pair's prompt up to its END. ``outputs``: where given, each
    pair's sender outputs in its ablated run (``{site: [pos, ...]}``, heads through ``hook_result``) are appended to
    it."""
    L = model.cfg.n_layers
    sites = [INPUT_SITE] + [act_name(s, l) for l in range(L) for s in ("result", "mlp_out")]
    prompts = [batch.reference[i, : int(batch.end[i]) + 1] for i in range(len(batch))]
    # the ablated value of every sender site at every position of each pair
    if ablation == "counterfactual":
        values = [_outputs(model, batch.counterfactual[i, : int(batch.end[i]) + 1], sites) for i in range(len(batch))]
    elif ablation == "mean":
        runs = [_outputs(model, t, sites) for t in prompts]
        values = []
        for i, t in enumerate(prompts):
            mean = {}
            for n in sites:
                at = []
                for pos in range(len(t)):  # the mean over the pairs that have this offset from END
                    offset = len(t) - 1 - pos
                    at.append(torch.stack([r[n][len(u) - 1 - offset] for r, u in zip(runs, prompts)
                                           if len(u) - 1 - offset >= 0]).float().mean(0))
                mean[n] = torch.stack(at).to(runs[i][n].dtype)
            values.append(mean)
    elif ablation == "zero":
        values = [None] * len(batch)
    else:
        raise ValueError(f"Unknown ablation {ablation!r}; accepted: counterfactual, mean, zero")

    into: dict[str, list[str]] = {}
    for sender, receiver in ablated:
        into.setdefault(receiver, []).append(sender)
    logits = []
    for i, tokens in enumerate(prompts):
        current: dict[str, Tensor] = {}

        def keep(act: Tensor, hook, name: str) -> Tensor:
            current[name] = act[0]
            return act

        def difference(sender: str) -> Tensor:  # [pos, d_model]: the sender's output now minus its ablated value
            site, head = sender_site(sender)
            now = current[site] if head is None else current[site][:, head]
            if values[i] is None:
                return now
            val = values[i][site] if head is None else values[i][site][:, head]
            return now - val

        def construct(act: Tensor, hook, receiver: str, head: int | None) -> Tensor:
            act = act.clone()
            for sender in into[receiver]:
                if head is None:
                    act[0] -= difference(sender)
                else:
                    act[0, :, head] -= difference(sender)
            return act

        hooks = [(INPUT_SITE, partial(keep, name=INPUT_SITE))]
        for l in range(L):
            for h in range(model.cfg.n_heads):
                for c in "qkv":
                    if f"{l}.{h}.{c}" in into:
                        hooks.append((act_name(f"{c}_input", l), partial(construct, receiver=f"{l}.{h}.{c}", head=h)))
            hooks.append((act_name("result", l), partial(keep, name=act_name("result", l))))
            if f"MLP{l}" in into:
                hooks.append((act_name("mlp_in", l), partial(construct, receiver=f"MLP{l}", head=None)))
            hooks.append((act_name("mlp_out", l), partial(keep, name=act_name("mlp_out", l))))
        if "logits" in into:
            hooks.append((act_name("resid_post", L - 1), partial(construct, receiver="logits", head=None)))
        with model.backend.split_inputs(ungroup=True, attn_result=True):
            resid = model.run_with_hooks(tokens[None], fwd_hooks=hooks, stop_at_layer=L)
        logits.append(model.unembed(model.ln_final(resid[:, -1:]))[0, 0].float())
        if outputs is not None:
            outputs.append({n: v.detach().clone() for n, v in current.items()})
    return torch.stack(logits)
