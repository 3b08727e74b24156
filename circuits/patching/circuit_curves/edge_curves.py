"""Edge circuits: MIB's graph (:func:`edge_senders`, :func:`edge_receivers`, :func:`edge_valid`), which edges
each circuit keeps (:func:`edge_masks`) and which models have separable edges (:func:`check_edge_model`); the curve is
:func:`circuits.patching.circuit_curves.node_curves.circuit_curve` with ``edges=``, run by the ablation executor's END-only
strategy (:func:`circuits.patching.ablation.end.edges_at_end`) or, at every position, its edges strategy
(:func:`circuits.patching.ablation.edges.edges_everywhere`); see :mod:`circuits.patching.circuit_curves`."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from jaxtyping import Bool
from torch import Tensor

from circuits.models.backend import Model
from circuits.patching.core.end_layers import check_supported
from circuits.patching.circuit_curves.curve import n_kept_at
from circuits.patching.core.ranking import order
from circuits.types import DEFAULT_COUNT, Component, Receiver, eap_upstream


# --- edges ---------------------------------------------------------------------------------------------------
#
# The graph, as MIB's: senders are the input embedding ("input"), every head and every MLP; receivers are every
# head's query, key and value input (per query head, also under grouped-query attention), every MLP's input, and
# the logits ("logits", the final residual stream). An edge joins a sender to a receiver downstream of it (a head
# of layer l feeds heads of later layers, the MLP of its own layer and later ones, and the logits). In a circuit,
# each receiver's END input is the residual stream minus, for every edge into it that the circuit leaves out, the
# sender's current END output minus its ablated value (its counterfactual END output, its mean over the reference
# runs, or zero): the edge then carries the ablated value and the kept edges the current one. At END only, earlier
# positions are the reference run's, and each layer is END-only work over the reference keys and values; at every
# position (MIB's evaluate_graph) every position's receiver inputs are assembled so, in whole-prompt forwards.

INPUT, LOGITS = "input", "logits"
EdgeSender = Component | str
EdgeReceiver = Receiver | str


def edge_senders(model: Model) -> list[EdgeSender]:
    """The senders in order: ``input``, then per layer its heads and its MLP."""
    L, H = model.cfg.n_layers, model.cfg.n_heads
    out: list[EdgeSender] = [INPUT]
    for l in range(L):
        out += [Component("head", l, h) for h in range(H)] + [Component("mlp", l)]
    return out


def edge_receivers(model: Model) -> list[EdgeReceiver]:
    """The receivers in order: per layer each head's ``q``, ``k``, ``v`` input (head by head), then its MLP's input;
    then ``logits``."""
    L, H = model.cfg.n_layers, model.cfg.n_heads
    out: list[EdgeReceiver] = []
    for l in range(L):
        out += [Receiver(Component("head", l, h), c) for h in range(H) for c in ("q", "k", "v")]
        out.append(Receiver(Component("mlp", l)))
    return [*out, LOGITS]


# Whether a sender's output reaches a receiver's input directly (an edge of the graph): EAP-IG's rule, MIB's graph.
edge_upstream = eap_upstream


def edge_valid(model: Model) -> Bool[Tensor, "sender receiver"]:
    """Which ``[sender, receiver]`` entries of :func:`edge_senders` x :func:`edge_receivers` are edges."""
    receivers = edge_receivers(model)  # once, not once per sender
    return torch.tensor([[edge_upstream(s, r) for r in receivers] for s in edge_senders(model)])


def edge_masks(valid: Tensor, scores: Tensor, sizes: Sequence[float], count: str = DEFAULT_COUNT
               ) -> tuple[Tensor, Tensor, int]:
    """Which edges each size keeps ``[circuit, sender, receiver]`` (the top ``n_kept_at(size, n_edges, count)``
    by score: ``round``, or ``int`` with ``count="floor"``; ties by index through :func:`order`), ``n_kept
    [circuit]`` and ``n_edges``."""
    flat = scores.float().cpu()[valid]
    if torch.isnan(flat).any():
        raise ValueError("Edge scores contain NaN on an edge; accepted: a finite score for every edge (-inf to put "
                         "an edge last); entries that are not edges are ignored")
    n = flat.numel()
    rank = torch.empty(n, dtype=torch.long)
    rank[order(flat, +1)] = torch.arange(n)
    n_kept = torch.tensor([n_kept_at(s, n, count) for s in sizes], dtype=torch.long)
    keep = torch.zeros(len(sizes), *valid.shape, dtype=torch.bool)
    keep[:, valid] = rank[None, :] < n_kept[:, None]
    return keep, n_kept, n


def check_edge_model(model: Model) -> None:
    check_supported(model)
    if model.backend.post_norms():
        raise ValueError(f"Edge faithfulness needs each head's output to add into the residual stream; "
                         f"{model.backend.architecture()} normalises the sum of its heads (ln1_post), so a head's share "
                         "is not separable. Accepted: pre-norm models without post-sublayer norms (Llama, Mistral, "
                         "Qwen2/3, GPT-2); node faithfulness takes every model")
