"""MIB's node graph in the faithfulness job (issue 43): the input node (the embeddings) ranked and counted with the
heads and MLPs as MIB counts it, ablated where a circuit leaves it out, a named config value (``input_node``, MIB's
value the default) recorded in the result. The curve points themselves are checked against a plain
``run_with_hooks`` loop on both TransformerLens lines in ``tests/backends/test_input_node_backends.py``."""

from __future__ import annotations

import json

import pytest
import torch
from helpers import tiny_dir

from circuits.beyond.faithfulness.config import FaithfulnessConfig
from circuits.patching.circuit_curves import MIB_SIZES, circuit_masks


# MIB's counting rule, from its code (not copied; read at hannamw/MIB-circuit-track b759df3 and its EAP-IG submodule
# 7af394a):
# - EAP-IG's Graph.from_model makes n_forward = 1 + n_layers * (n_heads + 1) source nodes, the input first
#   (forward index 0), then per layer its heads and its MLP; node scores are one per source node (the logits have
#   none). A 3-layer, 2-head model has 1 + 3 * 3 = 10 nodes; SmolLM2 (30 layers, 9 heads) 1 + 30 * 10 = 301.
# - evaluate_area_under_curve (MIB_circuit_track/evaluation.py) counts the node scores that are not NaN and keeps
#   int(pct * that count) nodes at each of its percentages (.001, .002, .005, .01, .02, .05, .1, .2, .5, 1).
# - Graph.apply_topn at node level keeps every node whose score is NaN in the graph, whatever the size.
def test_sizes_count_the_input_node_as_mib_does():
    L, H = 3, 2
    heads = torch.tensor([[0.9, 0.1], [0.5, 0.3], [0.8, 0.2]])
    mlps = torch.tensor([0.7, 0.4, 0.6])
    sizes = (0.1, 0.2, 0.5)
    # scored input (the best node): 10 nodes, int(0.1 * 10) = 1, int(0.2 * 10) = 2, int(0.5 * 10) = 5
    m = circuit_masks(heads, mlps, None, sizes, "floor", input=2.0)
    assert m.n_nodes == 1 + L * (H + 1) == 10 and m.n_kept.tolist() == [1, 2, 5]
    assert m.input.tolist() == [True, True, True]
    assert m.heads[0].sum() == 0 and m.mlps[0].sum() == 0  # 1 node kept: the input alone
    assert m.heads[1].nonzero().tolist() == [[0, 0]] and m.mlps[1].sum() == 0  # then the 0.9 head
    # kept at 0.5: the input, heads 0.9 and 0.8, MLPs 0.7 and 0.6 (5 of 10)
    assert m.heads[2].nonzero().tolist() == [[0, 0], [2, 0]] and m.mlps[2].nonzero().flatten().tolist() == [0, 2]
    # scored input (the worst node): ranked last, left out of every circuit here, the sizes counting it the same
    low = circuit_masks(heads, mlps, None, sizes, "floor", input=-1.0)
    assert low.n_kept.tolist() == [1, 2, 5] and low.input.tolist() == [False, False, False]
    assert low.heads[0].nonzero().tolist() == [[0, 0]]
    # no score for the input (MIB's NaN): kept in every circuit and not counted: 9 nodes, int(0.9) = 0, int(1.8) = 1,
    # int(4.5) = 4 -- what the job does for a ranking that does not score it, or with --no-input-node
    none = circuit_masks(heads, mlps, None, sizes, "floor")
    assert none.input is None and none.n_nodes == 9 and none.n_kept.tolist() == [0, 1, 4]
    # SmolLM2's shape at MIB's nine sizes: 301 nodes, int(p * 301) = 0, 0, 1, 3, 6, 15, 30, 60, 150 (issue 43's peer
    # check: MIB's 1% node circuit is 3 of 301, {input, m0, m18}, where EAP-IG ranks the input first)
    g = torch.Generator().manual_seed(0)
    smol = circuit_masks(torch.rand(30, 9, generator=g), torch.rand(30, generator=g), None, MIB_SIZES, "floor",
                         input=5.0)
    assert smol.n_nodes == 301 and smol.n_kept.tolist() == [0, 0, 1, 3, 6, 15, 30, 60, 150]
    assert smol.input.tolist() == [False, False, True, True, True, True, True, True, True]
    assert [int(smol.heads[i].sum() + smol.mlps[i].sum()) for i in range(9)] == [0, 0, 0, 2, 5, 14, 29, 59, 149]


def test_bad_input_score_is_one_line():
    with pytest.raises(ValueError, match="input node's score must be one number") as err:
        circuit_masks(torch.rand(2, 2), torch.rand(2), None, (0.5,), input=torch.rand(3))
    assert "\n" not in str(err.value)
    with pytest.raises(ValueError, match="Node scores contain NaN"):
        circuit_masks(torch.rand(2, 2), torch.rand(2), None, (0.5,), input=float("nan"))


def test_input_node_is_mib_s_default_and_named_when_turned_off():
    c = FaithfulnessConfig()
    assert c.input_node is True and "input_node" not in c.mib()["fixed"] and "input_node" not in c.mib()["departs"]
    off = c.replace(input_node=False)  # edges at every position by default: MIB's, no departure
    assert off.mib()["departs"] == {"input_node": {"here": False, "mib": True}}
    assert FaithfulnessConfig.from_json(json.loads(json.dumps(off.to_json()))) == off


def test_job_ranks_the_input_where_the_ranking_scores_it(tmp_path):
    """Every ranking scores the input node by its own method (EAP-IG by its estimate, exact activation patching by
    patching the embeddings at END, position patching at every position, summed as its heads are): the job ranks it
    (its importance, |.| and signed), its node curves count 1 + L (H + 1) nodes and equal the engine's curve given that
    score. With input_node off, no ranking has it. Recorded in summary.json."""
    from circuits.beyond.faithfulness.job import faithfulness, signed_importance
    from circuits.models.loading import load_model
    from circuits.patching.circuit_curves import circuit_curve
    from circuits.patching.engines.eap_ig import eap_ig
    from circuits.patching.engines.registry import ENGINES
    from circuits.data.pairs import build_pairs

    model = load_model(str(tiny_dir("llama")), dtype="float32", device="cpu")
    L, H = model.cfg.n_layers, model.cfg.n_heads
    built = build_pairs(model, "addition", n_pairs=6, filter_correct=False, few_shot="on", counterfactual="random",
                        second_logit="label", progress=False)
    pairs, scoring = built.pairs[:3], built.pairs[3:6]
    rankings = ("eap-ig", "exact-activation", "positions")
    cfg = FaithfulnessConfig(model=str(tiny_dir("llama")), rankings=rankings,
                             sizes=(0.05, 0.2, 0.5), edges=False, n_boot=0, in_sample=False)
    r = faithfulness(model, pairs, cfg, progress=False, scoring_pairs=scoring)
    ig = eap_ig(model, pairs, "logit_diff", steps=5, level="node", progress=False)
    want = {"eap-ig": ig.importance("input").reshape(())}
    for name in ("exact-activation", "positions"):  # the engine's own input score, summed over positions as its heads
        want[name] = signed_importance(ENGINES[name].run(model, pairs, metric="logit_diff"), "sum")["input"]
    # both prompts of a pair end in the same token here: patching the embeddings at END alone changes nothing, at
    # every position it does
    assert want["exact-activation"] == 0 and want["positions"].abs() > 1e-4 and want["eap-ig"].abs() > 0
    for name in rankings:
        assert torch.allclose(r.scores[name]["input_signed"], want[name], atol=1e-6), name
        assert torch.equal(r.scores[name]["input"], r.scores[name]["input_signed"].abs())
    for setting in ("nodes@end", "nodes@all"):
        for name in rankings:
            got = r.curves[name][setting]
            assert got.n_nodes == 1 + L * (H + 1)
            c = circuit_curve(model, scoring, r.scores[name]["heads"], r.scores[name]["mlps"],
                              input=r.scores[name]["input"], sizes=cfg.sizes, positions=setting[6:], n_boot=0,
                              count="floor")
            assert torch.equal(got.f, c.f) and torch.equal(got.n_kept, c.n_kept)
    out = tmp_path / "r"
    r.save(out)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["input_node"] is True and summary["input_ranked"] == list(rankings)
    assert summary["curves"]["exact-activation"]["nodes@end"]["n_nodes"] == 1 + L * (H + 1)
    from circuits.results import load_result
    assert torch.equal(load_result(out).scores["eap-ig"]["input"], r.scores["eap-ig"]["input"])

    off = faithfulness(model, pairs, cfg.replace(input_node=False, rankings=("eap-ig", "positions")), progress=False,
                       scoring_pairs=scoring)
    for name in ("eap-ig", "positions"):
        assert "input" not in off.scores[name] and off.curves[name]["nodes@all"].n_nodes == L * (H + 1)
