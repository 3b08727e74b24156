"""Faithfulness of the circuits a ranking yields, as MIB scores circuit discovery (issue 24).

**Nodes.** A ranking of nodes -- heads ``[layer, head]``, MLPs ``[layer]``, optionally neurons ``{layer: [d_mlp]}``
(such a layer's MLP is then scored by its neurons instead of as one node) -- gives, at each size ``s`` (a fraction of
the ``n`` nodes), the circuit ``C_s`` = the top ``round(s * n)`` nodes by score (halves rounded up; ``count="floor"``
takes ``int(s * n)`` as MIB's code does, and is what the faithfulness job uses by default; ties broken by :func:`circuits.patching.core.ranking.order`, the project's one
sort: higher score first, ties by index). Everything outside the circuit is ablated:

- ``ablation="counterfactual"`` (MIB's "patching"): each ablated node's output takes its value in the
  counterfactual run of the same pair;
- ``"mean"``: its mean over the pairs' reference runs, per position counted back from END (position ``end - k``
  takes the mean over the pairs that have it; at END, the mean over every pair's END): the ``"end_mean"`` values
  of :mod:`circuits.patching.ablation.values`, which need no template (the knockout's ``"mean"`` is per template and
  length over counterfactual prompts);
- ``"zero"``: zero;

at ``positions="end"`` (only the END position, as the paper's patching) or ``"all"`` (every position, as MIB).

**The input node** (``input=``, a score for it): MIB's node graph has one more node than the heads and MLPs, the
input embeddings (EAP-IG's ``input``, here the residual stream entering the first block, ``blocks.0.hook_resid_pre``).
Given a score it is ranked and counted with the others (``n`` = heads + MLPs + 1: 301 on SmolLM2, where MIB's
``evaluate_area_under_curve`` counts its ``nodes_scores`` that are not NaN) and, when a circuit leaves it out, every
later node reads its ablated value (MIB's ``evaluate_graph`` adds the input's difference into every receiver's input
when its edges are out of the graph); the empty circuit then ablates it too, so ``m(empty)`` is the counterfactual
run's own. Without a score it is kept in every circuit and not counted, as MIB keeps (and does not count) a node
whose score is NaN.

**Edges** (:func:`circuit_curve` with ``edges=``, ``positions="end"`` or ``"all"``): MIB's graph -- senders are the
input embedding, every head and every MLP; receivers every head's query, key and value input (per query head, also
under grouped-query attention), every MLP's input and the logits. An edge left out of the circuit carries its
sender's ablated value into its receiver, the kept edges the current one (MIB's ``evaluate_graph``, which subtracts
each cut-off sender's difference, its output minus its ablated value, from its receiver's input): at END only, or at
every position as MIB (:mod:`circuits.patching.ablation.edges`). Models that normalise the sum of their heads (Gemma 2/3's ``ln1_post``) are refused at edge level (MIB
special-cases them); MIB's pruning of edges cut off from the input or the logits is not applied.

**Metric.** ``m`` is read from the END logits of each pair: by default ``logit_diff`` = logit(answer) -
logit(counterfactual answer), the counterfactual answer being the pair's own label where the pairs carry one
(``second_logit="label"``: MIB's arithmetic metric, the counterfactual problem's answer) and else the counterfactual
run's top token at END (``"top"``, the project's logit-difference readout); also ``"logit"``, ``"prob"``
or a :func:`circuits.patching.core.metrics.logits_metric`. Faithfulness ``f(C) = (m(C) - m(empty)) / (m(N) - m(empty))``
on means over pairs, ``N`` the model with nothing ablated and ``empty`` every node (edge) ablated, so ``f(N) = 1``
and ``f(empty) = 0`` by construction. CPR = the area under ``f`` and CMD = the area between ``f`` and 1
(``|1 - f|``), each by the trapezoid rule over the size axis in fractions with linear widths, as
``MIB-circuit-track``'s ``evaluate_area_under_curve`` computes them by default (its ``log_scale=True`` takes the
trapezoids over log sizes instead, which gives other numbers: 1.4507 / 5.4571 for a curve whose linear-width areas are
0.6747 / 0.3243). MIB's axis is 0.1% ... 50% and 100%; the curve here is closed at 1.0 the same way
(f(1.0) = 1, every node kept) when the sizes given stop short of it. Bootstrap intervals resample pairs
(:func:`circuits.patching.core.uncertainty.resample_pairs`) and recompute f, CPR and CMD from the resampled means.

**Exact and batched.** All circuits (every size, N and empty) are the sets of one
:class:`~circuits.patching.ablation.executor.AblationSpec` (values: the ablation's kind from the pairs' own runs; sites:
what each circuit leaves out; positions), run by the mechanism's one ablation executor
(:func:`~circuits.patching.ablation.executor.run_ablation`, which knockout also calls), which chooses the strategy: at
END, END-only layers over ``circuits x pairs`` rows after one batched reference and counterfactual forward
(:mod:`circuits.patching.ablation.end`; edges always, nodes where the END-only layers compute the model); edges at
every position, each receiver's input assembled from the senders its circuit keeps over ``circuits x pairs`` rows of
whole prompts (:mod:`circuits.patching.ablation.edges`); counterfactual node values at every position with the
counterfactual run in the circuits' own passes, each pair's start before its prompts differ run once; otherwise the
masked forward over whole prompts. This package registers no hook of its own.
Every model-specific piece comes from :mod:`circuits.models.backend`, so both TransformerLens lines (3.9's
``HookedTransformer``, 4.3's ``TransformerBridge``) run the same code. Each strategy is tested against the plain loops
of :mod:`circuits.patching.engines.plain` (:func:`~circuits.patching.engines.plain.ablate_plain`,
:func:`~circuits.patching.engines.plain.ablate_edges_plain`) and, for edges at every position,
:func:`~circuits.patching.ablation.edges_plain.ablate_edges_everywhere_plain` (one pair at a time): one circuit at a
time, one hook per site.

Public signature::

    circuit_curve(model, pairs, heads=None, mlps=None, *, neurons=None, edges=None, input=None, sizes=MIB_SIZES,
                  ablation="counterfactual", positions="end", metric=MIB_METRIC, n_boot=1000, level=0.95, seed=0,
                  memory_mb=1024, count=DEFAULT_COUNT) -> FaithfulnessCurve
        # nodes: heads [layer, head], mlps [layer], neurons {layer: [d_mlp]}, input (one number: the embeddings a
        # node, MIB's node graph); or edges [sender, receiver] over edge_senders x edge_receivers (END or all)
    edge_senders(model), edge_receivers(model), edge_valid(model) -> [sender, receiver] bool
    circuit_masks(heads, mlps, neurons, sizes, count, input) -> NodeMasks  # which nodes each size keeps
    edge_masks(valid, scores, sizes, count) -> (keep, n_kept, n_edges)
    area_scores(sizes, f) -> (cpr, cmd)                               # MIB's areas of one curve (or a batch)
    cmd_margin(a, b, n_boot) -> (b.cmd - a.cmd, low, high)            # paired bootstrap over the same pairs
    cmd_margin_draws(a, b, n_boot) -> (b.cmd - a.cmd, resamples)       # for a p-value and Holm's correction
    resampled_cmd(c, idx) -> CMD per resample                         # idx: [resample, pair] indices
    MIB_SIZES = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5)

``FaithfulnessCurve`` fields: ``sizes [size]``, ``n_kept [size]``, ``n_nodes`` (nodes or edges), ``m [size,
pair]``, ``m_full [pair]``, ``m_empty [pair]``, ``f [size]``, ``f_per_pair [size, pair]``, ``f_low``/``f_high
[size]``, ``cpr``, ``cmd``, ``cpr_interval``, ``cmd_interval``, ``metric``, ``ablation``, ``positions``, ``level``
("node"/"edge"), ``ci_level``, ``n_boot``, ``seconds``; ``to_dict()``/``from_dict()`` for saving, ``table()``.

The package: :mod:`~circuits.patching.circuit_curves.curve` (checks, circuits of a ranking, the metric, the curve),
:mod:`~circuits.patching.circuit_curves.edge_curves` (MIB's graph) and :mod:`~circuits.patching.circuit_curves.node_curves`
(:func:`circuit_curve`).
"""

from circuits.patching.circuit_curves.curve import (ABLATIONS, COUNTS, MIB_SIZES, POSITIONS, READOUTS, FaithfulnessCurve,
                                                  NodeMasks, area_axis, area_scores, check_choice, check_metric, cmd_margin,
                                                  cmd_margin_draws, resampled_cmd,
                                                  check_sizes, circuit_masks, curve_from, metric_of, n_kept_at)
from circuits.patching.circuit_curves.edge_curves import (INPUT, LOGITS, EdgeReceiver, EdgeSender, check_edge_model,
                                                  edge_masks, edge_receivers, edge_senders, edge_upstream, edge_valid)
from circuits.patching.circuit_curves.node_curves import circuit_curve, circuit_metric

__all__ = ["ABLATIONS", "COUNTS", "INPUT", "LOGITS", "MIB_SIZES", "POSITIONS", "READOUTS", "EdgeReceiver", "EdgeSender",
           "FaithfulnessCurve", "NodeMasks", "area_axis", "area_scores", "check_choice", "check_edge_model",
           "check_metric", "check_sizes", "cmd_margin", "cmd_margin_draws", "circuit_curve", "circuit_masks", "circuit_metric", "curve_from",
           "edge_masks", "edge_receivers", "edge_senders", "edge_upstream", "edge_valid", "metric_of", "n_kept_at",
           "resampled_cmd"]
