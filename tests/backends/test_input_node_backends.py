"""MIB's node graph (issue 43): the input node (the embeddings, ``blocks.0.hook_resid_pre``) ranked, counted and
ablated with the heads and MLPs. On whichever TransformerLens line this environment has (3.9 in ``.venv``, 4.3's
TransformerBridge in ``.venv-tl4``), every point of the engine's curve, with and without the input node, equals a
plain reference: one ``run_with_hooks`` per circuit, the ablated heads' ``hook_z``, MLPs' ``hook_mlp_out`` and (where
the circuit leaves it out) the embedding output replaced by their values (:func:`~circuits.patching.engines.plain.ablate_plain`),
for each strategy the executor runs (END-only layers, the counterfactual run in the circuits' own passes, the masked
forward)."""

from __future__ import annotations

import math

import pytest
import torch
from helpers import aligned_pairs, mixed_pairs, spy_on_strategy

from circuits.data.pairs import PairBatch
from circuits.patching.circuit_curves import circuit_curve, metric_of
from circuits.patching.core.ranking import order
from circuits.patching.engines.plain import _run_end, ablate_plain, ablation_values_plain, cf_answer_plain

SIZES = (0.0, 0.05, 0.1, 0.3, 0.6, 1.0)


def _pairs(tokenizer):
    return PairBatch.from_pairs(aligned_pairs(tokenizer, 2, few_shot=True) + mixed_pairs(tokenizer, 2, seed=0), 0)


def _scores(model, seed=0):
    g = torch.Generator().manual_seed(seed)
    L, H = model.cfg.n_layers, model.cfg.n_heads
    heads, mlps = torch.rand(L, H, generator=g), torch.rand(L, generator=g)
    # the input between the 2nd and 3rd best node: kept from 3 nodes on, left out of the smaller circuits
    top = torch.cat([heads.flatten(), mlps]).sort(descending=True).values
    return heads, mlps, float((top[1] + top[2]) / 2)


def _circuit(heads, mlps, input_score, size):
    """What a circuit of ``size`` ablates, written out: the nodes in MIB's order (the input first, when it is a
    node), the top ``int(size * n)`` kept (MIB's count), ties by index."""
    L, H = heads.shape
    nodes = ([("input", None)] if input_score is not None else []) + \
        [("head", (l, h)) for l in range(L) for h in range(H)] + [("mlp", l) for l in range(L)]
    flat = torch.cat(([torch.tensor([input_score])] if input_score is not None else []) + [heads.flatten(), mlps])
    kept = {nodes[i] for i in order(flat, +1)[: math.floor(size * len(nodes))].tolist()}
    gone = [n for n in nodes if n not in kept]
    return ([x for k, x in gone if k == "head"], [x for k, x in gone if k == "mlp"],
            ("input", None) in gone)


def _plain(model, batch, heads, mlps, input_score, ablation, positions):
    """m per size, of N and of the empty circuit: one run_with_hooks each."""
    cf_answer = cf_answer_plain(model, batch)
    values = ablation_values_plain(model, batch, ablation)

    def m(hs, ms, inp):
        return metric_of(ablate_plain(model, batch, hs, ms, {}, values, positions, input=inp), batch.answer,
                         cf_answer, "logit_diff")

    L, H = heads.shape
    everything = ([(l, h) for l in range(L) for h in range(H)], list(range(L)), input_score is not None)
    return (torch.stack([m(*_circuit(heads, mlps, input_score, s)) for s in SIZES]), m([], [], False),
            m(*everything))


@pytest.mark.parametrize("ablation,positions,strategy", [
    ("counterfactual", "end", "end"), ("mean", "end", "end"), ("counterfactual", "all", "counterfactual"),
    ("counterfactual", "all", "masked"), ("mean", "all", "masked"), ("zero", "end", "masked")])
@pytest.mark.parametrize("with_input", [True, False])
def test_input_node_curve_equals_the_plain_loop(family_models, tokenizer, monkeypatch, ablation, positions, strategy,
                                               with_input):
    from circuits.patching.circuit_curves import node_curves

    seen = spy_on_strategy(monkeypatch, node_curves, strategy)
    model = family_models("llama")  # grouped-query attention: 4 heads, 2 key/value heads
    batch = _pairs(tokenizer)
    heads, mlps, input_score = _scores(model)
    inp = input_score if with_input else None
    ours = circuit_curve(model, batch, heads, mlps, input=inp, sizes=SIZES, ablation=ablation, positions=positions,
                         n_boot=0, memory_mb=0.05, count="floor")
    assert seen == [strategy]
    per_size, full, empty = _plain(model, batch, heads, mlps, inp, ablation, positions)
    torch.testing.assert_close(ours.m, per_size, atol=1e-5, rtol=0)
    torch.testing.assert_close(ours.m_full, full, atol=1e-5, rtol=0)
    torch.testing.assert_close(ours.m_empty, empty, atol=1e-5, rtol=0)
    L, H = heads.shape
    assert ours.n_nodes == L * (H + 1) + (1 if with_input else 0)
    if with_input:  # the input is kept at some sizes and ablated at others: both paths are exercised
        dropped = [_circuit(heads, mlps, inp, s)[2] for s in SIZES]
        assert any(dropped) and not all(dropped)
        if ablation == "counterfactual":  # everything ablated, the input too: the counterfactual run itself (MIB's
            # m(empty)); at END too, the END residual being the sum of the input's and every node's END outputs
            cf_m = metric_of(_run_end(model, batch.counterfactual, [], batch), batch.answer,
                             cf_answer_plain(model, batch), "logit_diff")
            torch.testing.assert_close(ours.m_empty, cf_m, atol=1e-4, rtol=0)
    # the input alone ablated, every node kept: at every position that changes m (the reference is not blind to
    # it); at END alone a counterfactual (or END-mean) patch cannot where every prompt ends in the same token ("="
    # in these pairs: the input node changes nothing at END but takes one place of each circuit's count)
    values = ablation_values_plain(model, batch, ablation)
    only_input = metric_of(ablate_plain(model, batch, [], [], {}, values, positions, input=True), batch.answer,
                           cf_answer_plain(model, batch), "logit_diff")
    rows = torch.arange(len(batch))
    ends = torch.cat([batch.reference[rows, batch.end], batch.counterfactual[rows, batch.end]])
    assert bool((ends == ends[0]).all())
    if positions == "all" or ablation == "zero":
        assert (only_input - full).abs().max() > 1e-3
    else:
        torch.testing.assert_close(only_input, full, atol=1e-5, rtol=0)
