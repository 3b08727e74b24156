"""MIB's ``graph.prune()`` and the toolkit's edge circuits (issue 43; docs/mib.md, "Edges at every position").

MIB's circuit track scores an edge circuit after pruning it (``MIB_circuit_track/evaluation.py`` calls
``apply_topn(..., prune=True)``, then EAP-IG's ``evaluate_graph`` calls ``graph.prune()`` again; EAP-IG at the pinned
commit 7af394a, ``src/eap/graph.py``): a node (the input, a head, an MLP) stays in the graph only if some kept edge
leaves it and some kept edge enters one of its receivers (its q, k or v inputs, its MLP input; the input node always
counts as entered), every edge whose sender or receiver's node left is dropped, until the node set stops changing; the
logits are always in. The toolkit scores the circuit as ranked, unpruned. The argument that this changes nothing:
with counterfactual values at every position, a node no kept edge enters reads at every position the residual less
every sender's difference, i.e. the counterfactual residual, so it computes its counterfactual output and its
outgoing edges carry a difference of 0; a node no kept edge leaves is read by nobody (every receiver subtracts its
difference). Each pruning step keeps every receiver's input, so the END logits do not move. Here: the claim checked
on tiny models, and where it does not hold (edges at END only, mean values, zero values on a model with biases) that
pruning does move them.
The pruning rule is written out here from reading the library (not copied)."""

from __future__ import annotations

import pytest
import torch
from helpers import aligned_pairs, mixed_pairs

from circuits.data.pairs import PairBatch
from circuits.patching.ablation.executor import AblationMasks, AblationSpec, run_ablation
from circuits.patching.circuit_curves import MIB_SIZES, edge_masks, edge_valid
from circuits.patching.core.end_layers import end_logits


def receiver_node(model) -> torch.Tensor:
    """For each receiver (:func:`edge_receivers`' order), the sender index of the node it belongs to (a head's q, k,
    v: that head; an MLP's input: that MLP); -1 for the logits."""
    L, H = model.cfg.n_layers, model.cfg.n_heads
    out = []
    for l in range(L):
        first = 1 + l * (H + 1)
        out += [first + h for h in range(H) for _ in "qkv"] + [first + H]
    return torch.tensor(out + [-1])


def entered(kept: torch.Tensor, owner: torch.Tensor) -> torch.Tensor:
    """Per sender node: whether some kept edge enters one of its receivers (the input node always counts)."""
    into = kept.any(0)  # per receiver
    out = torch.zeros(kept.shape[0], dtype=torch.bool)
    real = owner >= 0
    out.index_put_((owner[real],), into[real], accumulate=True)
    out[0] = True
    return out


def mib_prune(kept: torch.Tensor, nodes: torch.Tensor, owner: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """One call of the pinned ``Graph.prune()`` on edges ``kept [sender, receiver]`` and ``nodes [sender]``: each
    round sets the nodes to those with a kept edge out and one in, notes whether that changed them, drops the edges
    whose sender or receiver's node is out (the logits always in), and stops after the first round that left the
    nodes as they were."""
    kept, nodes = kept.clone(), nodes.clone()
    while True:
        new = kept.any(1) & entered(kept, owner)
        same = bool(torch.equal(new, nodes))
        nodes = new
        recv_in = torch.ones(kept.shape[1], dtype=torch.bool)
        real = owner >= 0
        recv_in[real] = nodes[owner[real]]
        kept &= nodes[:, None] & recv_in[None, :]
        if same:
            return kept, nodes


def mib_circuit(kept: torch.Tensor, owner: torch.Tensor) -> torch.Tensor:
    """The edges MIB scores for a top-n selection ``kept``: ``apply_topn`` marks the nodes with a kept edge out and
    one in, prunes, and ``evaluate_graph`` prunes again."""
    nodes = kept.any(1) & entered(kept, owner)
    kept, nodes = mib_prune(kept, nodes, owner)
    return mib_prune(kept, nodes, owner)[0]


def _logits(model, batch, keep, kind, positions):
    L, H = model.cfg.n_layers, model.cfg.n_heads
    sites = AblationMasks(torch.zeros(len(keep), L, H, dtype=torch.bool), torch.zeros(len(keep), L, dtype=torch.bool),
                          edges=edge_valid(model)[None] & ~keep)
    run = run_ablation(model, batch, AblationSpec(kind, sites, positions))
    return end_logits(model, run.resid.flatten(0, 1)).float().reshape(len(keep), len(batch), -1)


@pytest.fixture(scope="module")
def settings(family_models, tokenizer):
    """``settings(arch)``: the model, four pairs (few-shot and mixed), MIB's sizes of three random rankings (MIB's
    count, ``int(p * n)``) and each circuit as MIB prunes it."""
    made = {}

    def get(arch):
        if arch not in made:
            model = family_models(arch)
            batch = PairBatch.from_pairs(aligned_pairs(tokenizer, 2, few_shot=True) + mixed_pairs(tokenizer, 2, seed=4),
                                         0)
            valid = edge_valid(model)
            owner = receiver_node(model)
            keep = torch.cat([edge_masks(valid, torch.rand(valid.shape, generator=torch.Generator().manual_seed(seed)),
                                         MIB_SIZES, "floor")[0] for seed in range(3)])
            pruned = torch.stack([mib_circuit(k, owner) for k in keep])
            made[arch] = model, batch, keep, pruned, owner
        return made[arch]

    return get


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_prune_as_mib_runs_it_reaches_the_fixed_point_and_drops_edges(settings, arch):
    """MIB's two calls leave a graph a third call does not change (every node kept has an edge in and out), and they
    drop edges from most of these circuits (the comparisons below are not vacuous)."""
    model, _, keep, pruned, owner = settings(arch)
    assert bool((pruned <= keep).all())
    for k in pruned:
        nodes = k.any(1) & entered(k, owner)
        assert torch.equal(mib_prune(k, nodes, owner)[0], k)
    dropped = (keep.sum((1, 2)) - pruned.sum((1, 2)))
    assert int((dropped > 0).sum()) >= len(keep) // 2 and int(dropped.max()) > 10


@pytest.mark.parametrize("arch,kind", [("llama", "counterfactual"), ("qwen2", "counterfactual"), ("llama", "zero")])
def test_prune_changes_nothing_at_every_position(settings, arch, kind):
    """MIB's setting (counterfactual patching, every position): the END logits of every circuit equal those of its
    pruned circuit (float rounding). Zero values too on a model without biases (Llama, SmolLM2): a node no kept edge
    enters reads a zero residual, and with no bias and a norm that maps 0 to 0 its output is 0, its zero value."""
    model, batch, keep, pruned, _ = settings(arch)
    a = _logits(model, batch, keep, kind, "all")
    b = _logits(model, batch, pruned, kind, "all")
    torch.testing.assert_close(b, a, atol=2e-5 * float(a.abs().max()), rtol=0)


@pytest.mark.parametrize("arch,kind,positions", [("llama", "counterfactual", "end"), ("llama", "end_mean", "all"),
                                                 ("qwen2", "zero", "all")])
def test_prune_moves_the_logits_where_the_argument_does_not_hold(settings, arch, kind, positions):
    """At END only (a node no kept edge enters still reads the clean keys and values before END), with mean values
    (it reads the mean residual, and its output on it is not its mean output) and with zero values on a model with
    biases (Qwen2's q, k, v biases: a zero input still gives an output) pruning moves the END logits."""
    model, batch, keep, pruned, _ = settings(arch)
    a = _logits(model, batch, keep, kind, positions)
    b = _logits(model, batch, pruned, kind, positions)
    assert float((a - b).abs().max()) > 1e-3 * float(a.abs().max())
