"""MIB interchange: EAP-IG's graph JSON written and read exactly (names, order, cfg, flags), a hand-written file in
MIB's form read, the submission layout, and bad files refused with one line."""

import json

import pytest
import torch
from helpers import mixed_pairs

from circuits.data.pairs import PairBatch
from circuits.patching.interchange.mib import (
    MIBGraph,
    edge_name,
    edge_order,
    parse_edge,
    parse_node,
    read,
    submission_folder,
    write_submission,
)
from circuits.patching.core.metrics import MIB_METRIC
from circuits.patching.engines.eap_ig import INPUT, LOGITS, eap_ig, eap_receivers, eap_senders
from circuits.types import Component, Receiver

# A minimal graph in MIB's form, written by hand for 1 layer x 2 heads after the example MIB ships
# (MIB-circuit-track/circuits/ioi-eap-ig.json, GPT-2), whose file opens:
#   {"cfg": {"n_layers": 12, "n_heads": 12, "parallel_attn_mlp": false, "d_model": 768},
#    "nodes": {"input": {"in_graph": true}, "a0.h0": {"in_graph": false}, "a0.h1": {"in_graph": true}, ...
#    "edges": {"input->a0.h0<q>": {"score": -0.0002955848758574575, "in_graph": false},
#              "input->a0.h0<k>": {"score": -3.661245955299819e-06, "in_graph": false}, ...
# and lists 158 nodes (input, a0.h0 ... m11, logits) and 32491 edges in EAP-IG's Graph.from_model order.
MINIMAL = """{"cfg": {"n_layers": 1, "n_heads": 2, "parallel_attn_mlp": false, "d_model": 8},
 "nodes": {"input": {"in_graph": true}, "a0.h0": {"in_graph": false}, "a0.h1": {"in_graph": true},
           "m0": {"in_graph": true}, "logits": {"in_graph": true}},
 "edges": {"input->a0.h0<q>": {"score": -0.25, "in_graph": false},
           "input->a0.h0<k>": {"score": 0.5, "in_graph": false},
           "input->a0.h0<v>": {"score": 0.125, "in_graph": false},
           "input->a0.h1<q>": {"score": 1.5, "in_graph": true},
           "input->a0.h1<k>": {"score": 0.0, "in_graph": false},
           "input->a0.h1<v>": {"score": 2.0, "in_graph": true},
           "input->m0": {"score": 3.0, "in_graph": true},
           "a0.h0->m0": {"score": -1.0, "in_graph": false},
           "a0.h1->m0": {"score": 0.75, "in_graph": true},
           "input->logits": {"score": 0.5, "in_graph": true},
           "a0.h0->logits": {"score": 0.25, "in_graph": false},
           "a0.h1->logits": {"score": 0.0625, "in_graph": false},
           "m0->logits": {"score": 4.0, "in_graph": true}}}"""


def test_reads_a_hand_written_file_in_mibs_form(tmp_path):
    path = tmp_path / "importances.json"
    path.write_text(MINIMAL)
    g = read(path)
    assert (g.n_layers, g.n_heads, g.d_model) == (1, 2, 8) and g.node_scores is None
    S, R = g.senders, g.receivers
    assert S == [INPUT, Component("head", 0, 0), Component("head", 0, 1), Component.mlp(0)]
    h0, h1, m0 = Component("head", 0, 0), Component("head", 0, 1), Component.mlp(0)
    assert R == [Receiver(h0, "q"), Receiver(h1, "q"), Receiver(h0, "k"), Receiver(h1, "k"), Receiver(h0, "v"),
                 Receiver(h1, "v"), Receiver(m0), LOGITS]
    assert float(g.edges[0, 1]) == 1.5 and float(g.edges[0, 5]) == 2.0 and float(g.edges[3, 7]) == 4.0
    assert float(g.edges[1, 6]) == -1.0 and torch.isnan(g.edges[3, :7]).all()  # no edge m0 -> its own layer's heads
    assert g.circuit_nodes() == [INPUT, h1, m0]
    assert set(g.circuit_edges()) == {(INPUT, Receiver(h1, "q")), (INPUT, Receiver(h1, "v")), (INPUT, Receiver(m0)),
                                      (h1, Receiver(m0)), (INPUT, LOGITS), (m0, LOGITS)}
    # Node scores from edges (no node scores in the file): each node's outgoing edges summed.
    assert g.heads.tolist() == [[-1.0 + 0.25, 0.75 + 0.0625]] and g.mlps.tolist() == [4.0]
    # Written back, it is the same file.
    assert g.to_json() == json.loads(MINIMAL)


def test_export_import_round_trips_exactly(tiny_llama, tokenizer, tmp_path):
    batch = PairBatch.from_pairs(mixed_pairs(tokenizer, 3), 0)
    s = eap_ig(tiny_llama, batch, MIB_METRIC, steps=2, level="edge", progress=False)
    cfg = tiny_llama.cfg
    g = s.to_mib(cfg.d_model, top=0.2)
    path = write_submission(g, tmp_path, "addition", "llama3")
    assert path == tmp_path / "arithmetic-addition_llama3" / "importances.json"
    back = read(path)
    assert back == g
    assert torch.equal(back.heads, (-s.heads).float())  # logit_diff: MIB's score is -effect
    assert torch.equal(back.mlps, (-s.mlps).float())
    real = ~torch.isnan(s["edges"])
    assert torch.equal(back.edges[real], -s["edges"][real]) and torch.isnan(back.edges[~real]).all()
    # The chosen size: 20% of the real edges, the best by score, and the nodes they connect.
    n_real = int(real.sum())
    assert int(back.edges_in_graph.sum()) == int(0.2 * n_real + 0.5)
    kept = back.edges[back.edges_in_graph]
    assert float(kept.min()) >= float(back.edges[real & ~back.edges_in_graph].max())
    d = json.loads(path.read_text())
    assert list(d["cfg"]) == ["n_layers", "n_heads", "parallel_attn_mlp", "d_model"]
    assert d["cfg"]["d_model"] == cfg.d_model and list(d["nodes"])[:2] == ["input", "a0.h0"]
    assert list(d["nodes"])[-1] == "logits" and list(d["edges"])[0] == "input->a0.h0<q>"
    assert list(d["edges"])[-1] == f"m{cfg.n_layers - 1}->logits"
    # Node level: node scores, edges unscored (0) and in the graph where both ends are.
    gn = eap_ig(tiny_llama, batch, MIB_METRIC, steps=2, progress=False).to_mib(cfg.d_model, top=3)
    back = read(gn.write(tmp_path / "nodes.json"))
    assert back == gn and int(back.nodes_in_graph[1:].sum()) == 3 and bool(back.nodes_in_graph[0])


def test_names_and_order():
    assert parse_edge("a0.h1->a2.h3<q>") == (Component("head", 0, 1), Receiver(Component("head", 2, 3), "q"))
    assert parse_edge("input->m0") == (INPUT, Receiver(Component.mlp(0)))
    assert parse_edge("m3->logits") == (Component.mlp(3), LOGITS)
    assert parse_node("a10.h2") == Component("head", 10, 2) and parse_node("logits") == LOGITS
    S, R = eap_senders(2, 3), eap_receivers(2, 3)
    names = [edge_name(S[i], R[j]) for i, j in edge_order(2, 3)]
    assert len(names) == len(set(names))
    # Every edge EAP-IG's graph has (input and every head/MLP to later nodes and the logits) and no other.
    n_edges = 0
    for l in range(2):
        before = 1 + l * 4  # input + earlier layers' heads and MLPs
        n_edges += before * 3 * 3 + (before + 3)
    n_edges += 1 + 2 * 4
    assert len(names) == n_edges
    assert names[:4] == ["input->a0.h0<q>", "input->a0.h0<k>", "input->a0.h0<v>", "input->a0.h1<q>"]
    assert submission_folder("subtraction", "llama3") == "arithmetic-subtraction_llama3"


def test_bad_files_and_names(tmp_path):
    with pytest.raises(ValueError, match="missing edges"):
        MIBGraph.from_json({"cfg": {"n_layers": 1, "n_heads": 2, "d_model": 8}, "nodes": {}})
    with pytest.raises(ValueError, match="Bad MIB edge name|Bad MIB node name"):
        parse_edge("a0.h1=>m0")
    with pytest.raises(ValueError, match="names its input"):
        parse_edge("input->a0.h1")
    with pytest.raises(ValueError, match="goes backwards"):
        MIBGraph.from_json({"cfg": {"n_layers": 2, "n_heads": 1, "d_model": 8}, "nodes": {},
                            "edges": {"m1->a0.h0<q>": {"score": 1.0, "in_graph": False}}})
    with pytest.raises(ValueError, match="not in a graph of 1 layers"):
        MIBGraph.from_json({"cfg": {"n_layers": 1, "n_heads": 2, "d_model": 8}, "nodes": {"a3.h0": {"in_graph": True}},
                            "edges": {}})
    bad = tmp_path / "x.json"
    bad.write_text("{not json")
    with pytest.raises(ValueError, match="x.json is not valid JSON"):
        read(bad)
    with pytest.raises(ValueError, match="Unknown MIB model"):
        submission_folder("addition", "smollm2")
    with pytest.raises(ValueError, match="top must be"):
        MIBGraph.from_tensors(1, 2, 8, heads=torch.zeros(1, 2), mlps=torch.zeros(1), top=1.5)
