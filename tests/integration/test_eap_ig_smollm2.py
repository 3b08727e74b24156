"""EAP-IG on SmolLM2: node scores equal the plain full-prompt loop, one step equals attribution patching, edge
scores sum to node scores, and the edge graph written in MIB's format reads back exactly with SmolLM2's shape."""

import pytest
import torch
from helpers import aligned_pairs

from circuits.patching.interchange import mib
from circuits.data.pairs import PairBatch
from circuits.patching.engines.attribution import attribute
from circuits.patching.engines.eap_ig import eap_ig
from circuits.patching.core.metrics import get_metric
from circuits.patching.engines.plain import eap_ig_plain


@pytest.fixture(scope="module")
def batch(tokenizer):
    return PairBatch.from_pairs(aligned_pairs(tokenizer, 3, few_shot=True), 0)


def test_nodes_equal_plain_and_one_step_is_attribution(smollm2, batch):
    m = get_metric("logit_diff")
    s = eap_ig(smollm2, batch, m, steps=3, progress=False)
    plain = eap_ig_plain(smollm2, batch, m, s.readout, 3)
    torch.testing.assert_close(s.head, plain["head"], atol=1e-4, rtol=0)
    torch.testing.assert_close(s.mlp, plain["mlp"], atol=1e-4, rtol=0)
    one = eap_ig(smollm2, batch, m, steps=1, grid="right", progress=False)  # alpha = 1: at the reference run
    a = attribute(smollm2, batch, m, neurons=False, qk_fix=False, progress=False)
    torch.testing.assert_close(one.head, a.head.nansum(2), atol=1e-4, rtol=0)
    torch.testing.assert_close(one.mlp, a.mlp.nansum(1), atol=1e-4, rtol=0)
    assert s.head.abs().max() > 1e-2


def test_edges_sum_to_nodes_and_export(smollm2, batch, tmp_path):
    nodes = eap_ig(smollm2, batch, steps=2, progress=False)
    edges = eap_ig(smollm2, batch, steps=2, level="edge", progress=False)
    torch.testing.assert_close(edges.head, nodes.head, atol=1e-4, rtol=0)
    torch.testing.assert_close(edges.mlp, nodes.mlp, atol=1e-4, rtol=0)
    g = edges.to_mib(smollm2.cfg.d_model, top=0.05)
    path = mib.write_submission(g, tmp_path, "addition", "llama3")
    back = mib.read(path)
    assert back == g and (back.n_layers, back.n_heads, back.d_model) == (30, 9, 576)
    assert back.edges.shape == (1 + 30 * 10, 30 * 28 + 1)
    n_real = int((~back.edges.isnan()).sum())
    assert int(back.edges_in_graph.sum()) == int(0.05 * n_real + 0.5)
