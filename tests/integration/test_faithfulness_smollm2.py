"""Faithfulness on SmolLM2 (issue 24): the batched engine (END-only layers with shared few-shot prefixes at END, one
forward of every circuit at every position, edges at END) equals the plain one-circuit-at-a-time loop."""

import pytest
import torch
from helpers import aligned_pairs, mixed_pairs

from circuits.data.pairs import PairBatch
from circuits.patching.circuit_curves import (
    circuit_masks,
    edge_masks,
    edge_receivers,
    edge_senders,
    edge_valid,
    circuit_curve,
    metric_of,
)
from circuits.patching.engines.plain import ablate_edges_plain, ablate_plain, ablation_values_plain, cf_answer_plain

SIZES = (0.02, 0.3)


@pytest.fixture(scope="module")
def batch(tokenizer):
    return PairBatch.from_pairs(aligned_pairs(tokenizer, 2, few_shot=True) + mixed_pairs(tokenizer, 1), 0)


@pytest.mark.parametrize("positions", ["end", "all"])
def test_nodes_equal_the_plain_loop(smollm2, batch, positions):
    L, H = smollm2.cfg.n_layers, smollm2.cfg.n_heads
    g = torch.Generator().manual_seed(0)
    heads, mlps = torch.rand(L, H, generator=g), torch.rand(L, generator=g)
    ours = circuit_curve(smollm2, batch, heads, mlps, sizes=SIZES, positions=positions, n_boot=0)
    masks = circuit_masks(heads, mlps, None, SIZES)
    cf_answer, values = cf_answer_plain(smollm2, batch), ablation_values_plain(smollm2, batch, "counterfactual")
    for i in range(len(SIZES)):
        gone_heads = [(l, h) for l in range(L) for h in range(H) if not masks.heads[i, l, h]]
        gone_mlps = [l for l in range(L) if not masks.mlps[i, l]]
        logits = ablate_plain(smollm2, batch, gone_heads, gone_mlps, {}, values, positions)
        plain = metric_of(logits, batch.answer, cf_answer, "logit_diff")
        torch.testing.assert_close(ours.m[i], plain, atol=1e-4, rtol=1e-5)
    empty = ablate_plain(smollm2, batch, [(l, h) for l in range(L) for h in range(H)], list(range(L)), {}, values,
                         positions)
    torch.testing.assert_close(ours.m_empty, metric_of(empty, batch.answer, cf_answer, "logit_diff"), atol=1e-4,
                               rtol=1e-5)
    assert (ours.m_full - ours.m_empty).abs().min() > 0.1


def test_edges_equal_the_plain_loop(smollm2, batch):
    valid = edge_valid(smollm2)
    scores = torch.rand(valid.shape, generator=torch.Generator().manual_seed(1))
    ours = circuit_curve(smollm2, batch, edges=scores, sizes=(0.01,), n_boot=0)
    keep, _, _ = edge_masks(valid, scores, (0.01,))
    senders, receivers = [str(s) for s in edge_senders(smollm2)], [str(r) for r in edge_receivers(smollm2)]
    gone = [(senders[i], receivers[j]) for i, j in (valid & ~keep[0]).nonzero().tolist()]
    cf_answer = cf_answer_plain(smollm2, batch)
    plain = metric_of(ablate_edges_plain(smollm2, batch, gone, "counterfactual"), batch.answer, cf_answer, "logit_diff")
    torch.testing.assert_close(ours.m[0], plain, atol=1e-4, rtol=1e-5)
    assert ours.n_nodes == int(valid.sum())
