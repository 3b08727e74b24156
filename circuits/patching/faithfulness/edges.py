"""Edge faithfulness at END (:func:`edge_faithfulness`): MIB's graph (:func:`edge_senders`, :func:`edge_receivers`,
:func:`edge_valid`), which edges each circuit keeps (:func:`edge_masks`), and END-only layers whose receivers' inputs
are assembled from kept and ablated sender values; see :mod:`circuits.patching.faithfulness`."""

from __future__ import annotations

import time
from collections.abc import Sequence

import einops
import torch
from jaxtyping import Bool, Float
from torch import Tensor

from circuits.data.pairs import PairBatch, Pairs, as_batch
from circuits.models.backend import Model
from circuits.patching.end_layers import check_supported, end_logits, mlp_at_end
from circuits.patching.metrics import Metric
from circuits.patching.ranking import order
from circuits.types import Component, Receiver, eap_upstream
from circuits.patching.faithfulness.curve import (ABLATIONS, MIB_SIZES, POSITIONS, FaithfulnessCurve, check_choice,
                                                  check_metric, check_sizes, curve_from, metric_of, n_kept_at)
from circuits.patching.faithfulness.end import _end_runs, _EndRuns, _head_outputs, attention_split_at_end


# --- edges at END -------------------------------------------------------------------------------------------
#
# The graph, as MIB's: senders are the input embedding ("input"), every head and every MLP; receivers are every
# head's query, key and value input (per query head, also under grouped-query attention), every MLP's input, and
# the logits ("logits", the final residual stream). An edge joins a sender to a receiver downstream of it (a head
# of layer l feeds heads of later layers, the MLP of its own layer and later ones, and the logits). In a circuit,
# each receiver's END input is the residual stream minus, for every edge into it that the circuit leaves out, the
# sender's current END output minus its ablated value (its counterfactual END output, its mean over the reference
# runs, or zero): the edge then carries the ablated value and the kept edges the current one. Only END changes, so
# earlier positions are the reference run's, and each layer is END-only work over the reference keys and values.

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
    return torch.tensor([[edge_upstream(s, r) for r in edge_receivers(model)] for s in edge_senders(model)])


def edge_masks(valid: Tensor, scores: Tensor, sizes: Sequence[float], count: str = "round"
               ) -> tuple[Tensor, Tensor, int]:
    """Which edges each size keeps ``[circuit, sender, receiver]`` (the top ``round(size * n_edges)`` by score, ties by
    index through :func:`order`), ``n_kept [circuit]`` and ``n_edges``."""
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


def _edges_end_metric(model: Model, batch: PairBatch, keep: Bool[Tensor, "circuit sender receiver"], runs: _EndRuns,
                      metric: str | Metric, memory_mb: float) -> Float[Tensor, "circuit pair"]:
    """m of every edge circuit: END-only layers over circuits x pairs (circuits chunked by ``memory_mb``)."""
    cfg = model.cfg
    L, H, d = cfg.n_layers, cfg.n_heads, cfg.d_model
    C, P = keep.shape[0], len(batch)
    n_s = keep.shape[1]
    device, dtype = runs.input_ref.device, runs.input_ref.dtype
    end = batch.end.to(device)
    bytes_per = torch.finfo(dtype).bits // 8
    per = max(1, int(memory_mb * 2**20 / (P * (n_s + 8 * H) * d * bytes_per)))  # circuits per pass
    out = []
    val = torch.zeros(P, n_s, d, device=device, dtype=dtype)  # each sender's ablated END value
    val[:, 0] = runs.input_val
    for l in range(L):
        s0 = 1 + l * (H + 1)
        val[:, s0 : s0 + H], val[:, s0 + H] = _head_outputs(model, l, runs.z_val[l]), runs.mlp_val[l]
    for c0 in range(0, C, per):
        kept = keep[c0 : c0 + per].to(device=device, dtype=dtype)  # [c, sender, receiver]
        Cc = kept.shape[0]
        cur = torch.zeros(Cc, P, n_s, d, device=device, dtype=dtype)  # each sender's current END output
        cur[:, :, 0] = runs.input_ref[None]
        bias = torch.zeros(d, device=device, dtype=dtype)  # the attention biases so far (no sender's)

        def inputs(n_senders: int, receivers: slice | int) -> Tensor:
            # a receiver's input: kept edges carry the current output, the others the ablated value (a sum of the
            # parts, not the residual minus the ablated parts: no cancellation when most edges are ablated)
            k = kept[:, :n_senders, receivers]
            sub = "csn" if k.ndim == 3 else "cs"
            got = torch.einsum(f"cpsd,{sub}->cp{sub[2:]}d", cur[:, :, :n_senders], k)
            got = got + torch.einsum(f"psd,{sub}->cp{sub[2:]}d", val[:, :n_senders], 1 - k)
            return got + bias

        for l in range(L):
            s0, r0 = 1 + l * (H + 1), l * (3 * H + 1)
            x = einops.rearrange(inputs(s0, slice(r0, r0 + 3 * H)), "c p (h k) d -> k c p h d", k=3)
            z = attention_split_at_end(model, l, x[0], x[1], x[2], runs.keys[l], runs.values[l], end)
            cur[:, :, s0 : s0 + H] = _head_outputs(model, l, z)  # [c, pair, head, d_model]
            bias = bias + model.backend.attn_out(l)[1]
            cur[:, :, s0 + H] = mlp_at_end(model, l, inputs(s0 + H, r0 + 3 * H))
        logits = end_logits(model, inputs(n_s, -1).reshape(Cc * P, d))
        m = metric_of(logits, runs.answer.repeat(Cc), runs.cf_answer.repeat(Cc), metric)
        out.append(m.reshape(Cc, P).cpu())
    return torch.cat(out)


@torch.no_grad()
def edge_faithfulness(
    model: Model,
    pairs: Pairs,
    scores: Float[Tensor, "sender receiver"],
    *,
    sizes: Sequence[float] = MIB_SIZES,
    ablation: str = "counterfactual",
    positions: str = "end",
    metric: str | Metric = "logit_diff",
    n_boot: int = 1000,
    level: float = 0.95,
    seed: int = 0,
    memory_mb: float = 1024,
    count: str = "round",
) -> FaithfulnessCurve:
    """The faithfulness curve of an edge ranking at END (see the comment above :data:`INPUT`).

    ``scores [sender, receiver]`` is over :func:`edge_senders` x :func:`edge_receivers` (entries that are not edges,
    :func:`edge_valid`, are ignored); higher = more important. Sizes are fractions of the edges (``count`` as for
    :func:`faithfulness`). Only
    ``positions="end"``: edges at every position are not implemented."""
    t0 = time.perf_counter()
    sizes = check_sizes(sizes)
    check_choice("ablation", ablation, ABLATIONS)
    check_choice("positions", positions, POSITIONS)
    if positions != "end":
        raise ValueError("Edge faithfulness is at END only (positions='end'); every position is done at node level")
    metric = check_metric(metric)
    check_edge_model(model)
    valid = edge_valid(model)
    if tuple(scores.shape) != tuple(valid.shape):
        raise ValueError(f"Edge scores must be [sender, receiver] = {list(valid.shape)} for this model (edge_senders "
                         f"x edge_receivers), got {list(scores.shape)}")
    keep, n_kept, n = edge_masks(valid, scores, sizes, count)
    every = torch.cat([keep, valid[None], torch.zeros_like(valid)[None]])
    batch = as_batch(pairs, model)
    runs = _end_runs(model, batch, ablation)
    m = _edges_end_metric(model, batch, every, runs, metric, memory_mb)
    name = metric if isinstance(metric, str) else metric.name
    return curve_from(sizes, n_kept, n, m[:-2], m[-2], m[-1], metric=name, ablation=ablation, positions=positions,
                      level="edge", n_boot=n_boot, ci_level=level, seed=seed, seconds=time.perf_counter() - t0)
