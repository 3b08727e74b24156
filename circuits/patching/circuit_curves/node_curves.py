"""The curve of a ranking's circuits (:func:`circuit_curve`): node circuits (heads, MLPs, neurons) or edge circuits,
every circuit (and the full model and the empty circuit) one set of the mechanism's one ablation executor
(:func:`circuits.patching.ablation.executor.run_ablation`), which chooses how to run them; see
:mod:`circuits.patching.circuit_curves`."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence

import einops
import torch
from jaxtyping import Float, Int
from torch import Tensor

from circuits.data.pairs import Pairs, as_batch, second_answers
from circuits.models.backend import Model
from circuits.patching.ablation.executor import AblationMasks, AblationSpec, run_ablation
from circuits.patching.core.end_layers import end_logits
from circuits.patching.circuit_curves.curve import (ABLATIONS, COUNTS, MIB_SIZES, POSITIONS, VALUE_KIND, FaithfulnessCurve,
                                                  NodeMasks, check_choice, check_metric, check_sizes, circuit_masks,
                                                  curve_from, metric_of)
from circuits.patching.circuit_curves.edge_curves import check_edge_model, edge_masks, edge_valid
from circuits.patching.core.metrics import MIB_METRIC, Metric
from circuits.types import DEFAULT_COUNT


def _full_and_empty(masks: NodeMasks) -> NodeMasks:
    """``masks`` with two more circuits: every node kept (N), then no node kept (empty; MLP layers that are not
    nodes, and the input where it is not a node, stay kept)."""
    L = masks.mlps.shape[1]

    def two(t: Tensor) -> Tensor:
        return torch.cat([t, torch.ones_like(t[:1]), torch.zeros_like(t[:1])])

    empty_mlps = torch.tensor([l not in masks.mlp_layers for l in range(L)], dtype=torch.bool)
    mlps = torch.cat([masks.mlps, torch.ones(1, L, dtype=torch.bool), empty_mlps[None]])
    return NodeMasks(two(masks.heads), mlps, {l: two(v) for l, v in masks.neurons.items()},
                     torch.cat([masks.n_kept, torch.tensor([masks.n_nodes, 0])]), masks.n_nodes, masks.mlp_layers,
                     None if masks.input is None else two(masks.input))


@torch.no_grad()
def circuit_curve(
    model: Model,
    pairs: Pairs,
    heads: Float[Tensor, "layer head"] | None = None,
    mlps: Float[Tensor, " layer"] | None = None,
    *,
    neurons: Mapping[int, Float[Tensor, " d_mlp"]] | None = None,
    edges: Float[Tensor, "sender receiver"] | None = None,
    input: Tensor | float | None = None,
    sizes: Sequence[float] = MIB_SIZES,
    ablation: str = "counterfactual",
    positions: str = "end",
    metric: str | Metric = MIB_METRIC,
    n_boot: int = 1000,
    level: float = 0.95,
    seed: int = 0,
    memory_mb: float = 1024,
    count: str = DEFAULT_COUNT,
) -> FaithfulnessCurve:
    """The faithfulness curve of a node ranking (``heads``, ``mlps``, ``neurons``) or of an edge ranking
    (``edges``), see the module docstring of :mod:`circuits.patching.circuit_curves`.

    Args:
        heads: a score per head ``[layer, head]``, higher = more important (pass absolute values of a signed
            ranking).
        mlps: a score per MLP ``[layer]``; ``None``: MLPs are not nodes (always kept, heads-only circuits).
        neurons: ``{layer: [d_mlp]}`` scores; such a layer's MLP is scored by its neurons (``hook_post``).
        input: the input node's score (one number): the embeddings (``blocks.0.hook_resid_pre``) are then a node,
            ranked and counted with the heads and MLPs and ablated (every position of ``positions``) when a circuit
            leaves them out, as MIB's node graph; ``None``: not a node (always kept, not counted). Nodes only.
        edges: instead of nodes, a score per edge ``[sender, receiver]`` over
            :func:`~circuits.patching.circuit_curves.edge_curves.edge_senders` x ``edge_receivers`` (entries that are not
            edges, :func:`~circuits.patching.circuit_curves.edge_curves.edge_valid`, are ignored); at END or at every position (MIB's).
        sizes: fractions of the nodes (edges) in [0, 1] (default MIB's nine, 0.1% ... 50%).
        ablation: ``counterfactual`` (MIB), ``mean`` (over the reference runs, END-aligned) or ``zero``.
        positions: ``end`` (the END position only) or ``all`` (every position, as MIB; nodes and edges).
        metric: the END quantity m: ``logit_diff`` (:data:`~circuits.patching.core.metrics.MIB_METRIC`, MIB's), ``logit``,
            ``prob`` or a :func:`~circuits.patching.core.metrics.logits_metric`.
        n_boot: bootstrap resamples of the pairs for the intervals (0: none); ``level`` their coverage.
        memory_mb: the working memory one forward may take (rows per forward follow from it).
        count: ``round`` (``round(size * n)`` nodes, halves up) or ``floor`` (``int(size * n)``, MIB's count).
    """
    t0 = time.perf_counter()
    sizes = check_sizes(sizes)
    check_choice("ablation", ablation, ABLATIONS)
    check_choice("positions", positions, POSITIONS)
    check_choice("count", count, COUNTS)
    cfg = model.cfg
    if edges is not None:
        if input is not None:
            raise ValueError("input= is a node score; at edge level the input's edges are rows of edges= (sender 0)")
        metric = check_metric(metric)
        check_edge_model(model)
        valid = edge_valid(model)
        if tuple(edges.shape) != tuple(valid.shape):
            raise ValueError(f"Edge scores must be [sender, receiver] = {list(valid.shape)} for this model "
                             f"(edge_senders x edge_receivers), got {list(edges.shape)}")
        keep, n_kept, n = edge_masks(valid, edges, sizes, count)
        every = torch.cat([keep, valid[None], torch.zeros_like(valid)[None]])  # the circuits, N, empty
        C, L = len(every), cfg.n_layers
        sites = AblationMasks(torch.zeros(C, L, cfg.n_heads, dtype=torch.bool), torch.zeros(C, L, dtype=torch.bool),
                              edges=~every)
    else:
        metric = check_metric(metric)
        if heads is None or tuple(heads.shape) != (cfg.n_layers, cfg.n_heads):
            raise ValueError(f"heads scores must be [layer, head] = [{cfg.n_layers}, {cfg.n_heads}] for this model, "
                             f"got {None if heads is None else list(heads.shape)}")
        for l, s in (neurons or {}).items():
            if s.shape[-1] != cfg.d_mlp:
                raise ValueError(f"neuron scores of layer {l} must have d_mlp = {cfg.d_mlp} entries, got "
                                 f"{s.shape[-1]}")
        masks = circuit_masks(heads, mlps, neurons, sizes, count, input)
        n_kept, n = masks.n_kept, masks.n_nodes
        every = _full_and_empty(masks)
        sites = AblationMasks(~every.heads, ~every.mlps, {l: ~v for l, v in every.neurons.items()},
                              input=None if every.input is None else ~every.input)
    batch = as_batch(pairs, model)
    run = run_ablation(model, batch, AblationSpec(VALUE_KIND[ablation], sites, positions),  # type: ignore[arg-type]
                       memory_mb=memory_mb)
    m = circuit_metric(model, run.resid, batch.answer, run.cf_resid, metric, batch.cf_label)
    name = metric if isinstance(metric, str) else metric.name
    return curve_from(sizes, n_kept, n, m[:-2], m[-2], m[-1], metric=name, ablation=ablation, positions=positions,
                      level="node" if edges is None else "edge", n_boot=n_boot, ci_level=level, seed=seed,
                      seconds=time.perf_counter() - t0)


def circuit_metric(model: Model, resid: Float[Tensor, "circuit pair d_model"], answer: Int[Tensor, " pair"],
                   cf_resid: Float[Tensor, "pair d_model"], metric: str | Metric,
                   cf_label: Int[Tensor, " pair"] | None = None) -> Float[Tensor, "circuit pair"]:
    """m of every circuit on every pair from the final END residuals (the counterfactual answer: the pair's label
    where ``cf_label`` has one, else the top token of the counterfactual run's, ``cf_resid``;
    :func:`~circuits.data.pairs.second_answers`)."""
    C = resid.shape[0]
    logits = end_logits(model, einops.rearrange(resid, "c p d -> (c p) d"))
    cf_answer = second_answers(cf_label, end_logits(model, cf_resid))
    m = metric_of(logits, answer.to(logits.device).repeat(C), cf_answer.to(logits.device).repeat(C), metric)
    return einops.rearrange(m.cpu(), "(c p) -> c p", c=C)
