"""Edges: path patching from a sender to a receiver's q/k/v or MLP input at END equals the plain two-run loop of the
original algorithm; ``circuits identify --receivers`` keeps them with the identify result."""

import pytest
import torch
from helpers import mixed_pairs

from circuits.data.pairs import PairBatch
from circuits.identify import IdentifyConfig, IdentifyResult, identify
from circuits.patching.engines.edge_sweep import sweep_edges
from circuits.patching.engines.plain import cf_answer_plain, edge_caches, edge_plain
from circuits.types import Component, Receiver


@pytest.mark.parametrize("arch", ["llama", "mistral"])
def test_edges_equal_the_plain_loop(request, tokenizer, arch):
    model = request.getfixturevalue(f"tiny_{arch}")
    batch = PairBatch.from_pairs(mixed_pairs(tokenizer, 4), 0)
    senders = ["0.1", "MLP0", "1.2", "1.0"]
    ours = sweep_edges(model, batch, "2.1,1.3.k,MLP1", senders=senders, memory_mb=0.05, progress=False)
    cf_answer, caches = cf_answer_plain(model, batch), edge_caches(model, batch)
    checked = 0
    for i, s in enumerate(ours.senders):
        for j, r in enumerate(ours.receivers):
            if ours.readouts.logit[i, j].isnan().all():
                assert not (s.layer < r.layer or (r.channel is None and s.layer == r.layer and s.kind == "head"))
                continue
            plain = edge_plain(model, batch, s, r, cf_answer, caches)
            for k in ("logit", "logit_diff"):
                torch.testing.assert_close(getattr(ours.readouts, k)[i, j], plain[k], atol=1e-4, rtol=0)
            checked += 1
    assert checked == 3 * 4 + 2 + 4  # 2.1's q, k, v <- all four; 1.3.k <- layer 0; MLP1 <- layer 0 and heads of layer 1
    assert (ours.readouts.logit - ours.baseline.logit).nan_to_num().abs().max() > 1e-3


def test_receiver_upstream_of_its_sender_is_one_clear_line(tiny_llama, tokenizer):
    pairs = mixed_pairs(tokenizer, 2)
    with pytest.raises(ValueError, match="upstream of"):
        sweep_edges(tiny_llama, pairs, "1.0.q", senders=[Component("head", 2, 1)], progress=False)
    with pytest.raises(ValueError, match="outside this model"):
        sweep_edges(tiny_llama, pairs, "MLP9", progress=False)
    with pytest.raises(ValueError, match="Bad receiver"):
        Receiver.parse_many("20.x")


def test_identify_with_receivers_saves_edges_and_the_graph(tiny_llama, tokenizer, tmp_path):
    pairs = mixed_pairs(tokenizer, 4)
    r = identify(tiny_llama, pairs, IdentifyConfig(model="tiny", receivers="top2", bootstrap=50), progress=False)
    assert r.edges is not None and len({x.component for x in r.edges.receivers}) == 2
    r.save(tmp_path / "i")
    assert (tmp_path / "i" / "circuit.html").is_file()
    back = IdentifyResult.load(tmp_path / "i")
    torch.testing.assert_close(back.edges.effects("fraction"), r.edges.effects("fraction"), equal_nan=True)
    assert set(back.summary()["edges"]) == {str(x) for x in r.edges.receivers}
