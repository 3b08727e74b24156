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
    torch.testing.assert_close(back.edges.scores("fraction")["edges"], r.edges.scores("fraction")["edges"], equal_nan=True)
    assert set(back.summary()["edges"]) == {str(x) for x in r.edges.receivers}


def test_the_circuit_graph_draws_every_summary_edge_layered_with_a_scale(tiny_llama, tokenizer, tmp_path):
    """The saved graph (``circuit.html``'s figure) draws each edge ``summary.json`` lists as its own trace, places each
    node at its layer (heads by head index, MLPs one row below), marks receivers with another symbol than senders,
    and carries a colour bar on the importance scale and a hover with each edge's bootstrap interval."""
    import json

    from circuits.beyond.edges.result import EdgeResult
    from circuits.patching.core.uncertainty import _Resample, resample_pairs
    from circuits.viz.figures import importance_scale

    pairs = mixed_pairs(tokenizer, 6)
    r = identify(tiny_llama, pairs, IdentifyConfig(model="tiny", receivers="2.1,MLP2", bootstrap=50), progress=False)
    r.save(tmp_path / "i")
    summary = json.loads((tmp_path / "i" / "summary.json").read_text())["edges"]
    e = EdgeResult.of_identify(r)
    fig = e.figure()
    names = [t.name for t in fig.data if t.mode == "lines"]
    wanted = [f"{s} → {rec}" for rec, senders in summary.items() for s, _ in senders]
    assert len(wanted) > 10 and set(wanted) <= set(names)
    assert {"2.1 → logits", "MLP2 → logits"} <= set(names)
    # where the nodes sit: x = layer, y = head index, MLPs at -1.5, receivers diamonds, senders circles
    nodes = {t.name: t for t in fig.data if t.mode in ("markers", "markers+text") and t.name}
    recv, send = next(t for n, t in nodes.items() if n.startswith("receiver")), nodes["sender"]
    assert recv.marker.symbol == "diamond" and send.marker.symbol == "circle"
    assert set(recv.text) == {"2.1", "MLP2"} and "1.3" in send.text and "2.1" not in send.text
    # a receiver's name on a white box drawn above the edges (those it sends to the logits covered it)
    boxed = {a.text: (a.x, a.y) for a in fig.layout.annotations if a.bgcolor}
    assert boxed == {n: (x, y) for n, x, y in zip(recv.text, recv.x, recv.y)}
    at = dict(zip(send.text, zip(send.x, send.y)))
    assert at["1.3"] == (1, 3) and at["MLP0"] == (0, -1.5)
    # the edge 1.3 -> 2.1.q ends at the q port of 2.1's node, (2, 1.22)
    q = next(t for t in fig.data if t.name == "1.3 → 2.1.q")
    assert (q.x[0], q.y[0]) == (1, 3) and q.x[-1] == pytest.approx(2) and q.y[-1] == pytest.approx(1.22)
    # one colour bar, on the metric's diverging importance scale, symmetric about 0
    bars = [t for t in fig.data if getattr(t.marker, "showscale", None)]
    assert len(bars) == 1 and bars[0].marker.cmin == -bars[0].marker.cmax
    import plotly.colors
    assert [list(c) for c in bars[0].marker.colorscale] == [list(c) for c in plotly.colors.get_colorscale(importance_scale(1))]
    # the strongest edge is the widest; hover shows the value and the interval a plain bootstrap gives
    lines = [t for t in fig.data if t.mode == "lines" and "→" in (t.name or "")]
    data = list(fig.data)  # each edge lies on a grey rim 1.5 px wider: an edge near 0 (white) stays visible
    for t in lines:
        rim = data[data.index(t) - 1]
        assert rim.line.color == "#8c8c8c" and rim.line.width == pytest.approx(t.line.width + 1.5) and rim.x == t.x
    assert max(lines, key=lambda t: t.line.width).name == max(
        (f"{s} → {rec}" for rec, ss in summary.items() for s, _ in ss), key=lambda n: abs(dict(
            (f"{s} → {rec}", v) for rec, ss in summary.items() for s, v in ss)[n]))
    s_i, r_j = r.edges.senders.index(Component.parse("1.3")), r.edges.receivers.index(Receiver.parse_many("2.1.q")[0])
    idx = resample_pairs(6, 200, 0)
    m = r.edges.metric("fraction")
    draws = torch.stack([m.effect(_Resample(r.edges.readouts, row), _Resample(r.edges.baseline, row))[s_i, r_j]
                         for row in idx])
    lo, hi = torch.nanquantile(draws.double(), torch.tensor([0.025, 0.975], dtype=torch.float64))
    assert f"95% interval [{float(lo):+.4g}, {float(hi):+.4g}] over 6 pairs" in q.text[0]
