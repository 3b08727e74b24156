"""The engines beyond heads at END on SmolLM2: per-position patching equals TransformerLens's own by-position
patcher, neurons and edges equal their plain loops, the attribution screen equals plain attribution patching."""

import pandas as pd
import pytest
import torch
from helpers import aligned_pairs

from circuits.data.pairs import PairBatch
from circuits.patching.engines.attribution import attribute
from circuits.patching.engines.edge_sweep import sweep_edges
from circuits.patching.core.metrics import get_metric
from circuits.patching.engines.neuron_sweep import sweep_neurons
from circuits.patching.engines.plain import attribute_plain, cf_answer_plain, edge_caches, edge_plain, patch_at_plain
from circuits.patching.engines.position_sweep import sweep_positions
from circuits.types import Component, Neuron


@pytest.fixture(scope="module")
def batch(tokenizer):
    return PairBatch.from_pairs(aligned_pairs(tokenizer, 3), 0)


def test_positions_equal_transformer_lens(smollm2, batch):
    from transformer_lens import patching

    end, answer = int(batch.end[0]), batch.answer
    L, H = smollm2.cfg.n_layers, smollm2.cfg.n_heads

    def metric(logits):
        return logits[torch.arange(len(answer)), end, answer].mean()

    _, cf_cache = smollm2.run_with_cache(batch.counterfactual)
    heads = pd.DataFrame([(l, p, h) for l, p, h in [(0, 1, 0), (5, end - 1, 4), (14, end, 2), (20, end, 8), (21, end - 2, 3),
                                                   (29, end, 8), (10, end - 3, 1)]], columns=["layer", "pos", "head_index"])
    mlps = pd.DataFrame([(0, end - 3), (14, end - 2), (19, end), (29, end)], columns=["layer", "pos"])
    # The patcher get_act_patch_attn_head_out_by_pos and get_act_patch_mlp_out call, at a sample of their indices.
    th = patching.generic_activation_patch(smollm2, batch.reference, cf_cache, metric,
                                           patching.layer_pos_head_vector_patch_setter, "z", index_df=heads)
    tm = patching.generic_activation_patch(smollm2, batch.reference, cf_cache, metric, patching.layer_pos_patch_setter,
                                           "mlp_out", index_df=mlps)
    nodes = [(Component("head", r.layer, r.head_index), end - r.pos) for r in heads.itertuples()]
    nodes += [(Component.mlp(r.layer), end - r.pos) for r in mlps.itertuples()]
    ours = sweep_positions(smollm2, batch, nodes=nodes, progress=False)
    got_h = torch.stack([ours.heads.logit[r.layer, r.head_index, end - r.pos].mean() for r in heads.itertuples()])
    got_m = torch.stack([ours.mlps.logit[r.layer, end - r.pos].mean() for r in mlps.itertuples()])
    torch.testing.assert_close(got_h, th.float(), atol=1e-4, rtol=0)
    torch.testing.assert_close(got_m, tm.float(), atol=1e-4, rtol=0)
    assert L == 30 and H == 9 and (tm - tm[0]).abs().max() > 1e-2


def test_neurons_and_edges_equal_their_plain_loops(smollm2, batch):
    cf_answer = cf_answer_plain(smollm2, batch)
    neurons = [Neuron(19, 345), Neuron(24, 164), Neuron(29, 232)]
    ours = sweep_neurons(smollm2, batch, "path", neurons=neurons, progress=False)
    for j, n in enumerate(ours.neurons):
        plain = patch_at_plain(smollm2, batch, n, 0, cf_answer, "path")
        torch.testing.assert_close(ours.readouts.logit_diff[j], plain["logit_diff"], atol=1e-4, rtol=0)
    edges = sweep_edges(smollm2, batch, "20.8.q,MLP19", senders=["14.2", "18.5"], progress=False)
    caches = edge_caches(smollm2, batch)
    for i, s in enumerate(edges.senders):
        for j, r in enumerate(edges.receivers):
            plain = edge_plain(smollm2, batch, s, r, cf_answer, caches)
            torch.testing.assert_close(edges.readouts.logit[i, j], plain["logit"], atol=1e-4, rtol=0)


def test_attribution_equals_plain_attribution_patching(smollm2, batch):
    m = get_metric("fraction")
    ours = attribute(smollm2, batch, m, progress=False)
    plain = attribute_plain(smollm2, batch, m, "logit")
    for i in range(len(batch)):
        e = int(batch.end[i])
        for k in range(e + 1):
            torch.testing.assert_close(ours.head[:, :, k, i], plain["head"][:, i, e - k], atol=1e-4, rtol=0)
            torch.testing.assert_close(ours.mlp[:, k, i], plain["mlp"][:, i, e - k], atol=1e-4, rtol=0)
