"""Scores, the one type every engine returns: one sign convention (importance: larger is more important), the one
ranking (ties by flat index, NaN left out), a saved file that reads back the same, MIB's graph, and every engine
result's ``.scores()`` agreeing with the result's own effects and rankings."""

from __future__ import annotations

import pytest
import torch
from helpers import mixed_pairs

from circuits.data.pairs import PairBatch
from circuits.patching import sweep
from circuits.patching.core.metrics import DEFAULT_METRIC, MIB_METRIC, get_metric
from circuits.patching.core.ranking import rank, rank_mlps
from circuits.patching.core.scores import Scores
from circuits.types import Component, Head, Neuron, Receiver


def _scores(sign: int = -1) -> Scores:
    heads = torch.tensor([[0.3, -0.5], [float("nan"), -0.5]])
    mlps = torch.tensor([-0.1, 0.7])
    return Scores({"heads": heads, "mlps": mlps}, "logit_diff", sign)


def test_importance_is_one_convention_and_ranked_follows_it():
    s = _scores(-1)
    torch.testing.assert_close(s.importance("heads"), -s.heads, equal_nan=True)
    assert s.ranked(part="heads") == [(Head(0, 1), -0.5), (Head(1, 1), -0.5), (Head(0, 0), pytest.approx(0.3))]
    assert s.ranked(part="heads") == rank(s.heads, -1) and [c.layer for c, _ in s.ranked(part="mlps")] == [
        l for l, _ in rank_mlps(s.mlps, -1)]
    # every part together, in the metric's units; ties in the order of the parts, then the flat index
    assert s.top(4) == [Head(0, 1), Head(1, 1), Component.mlp(0), Head(0, 0)]
    assert _scores(1).top(1) == [Component.mlp(1)]
    assert "logit_diff (sign -1)" in repr(s) and "heads [2, 2]" in repr(s)


def test_offsets_label_and_reduce():
    heads = torch.tensor([[[0.1, -0.9]]])  # [layer, head, offset]
    s = Scores({"heads": heads, "mlps": torch.tensor([[0.2, float("nan")]])}, "fraction", 1, offsets=True)
    assert s.ranked(1) == [((Component.mlp(0), 0), pytest.approx(0.2))]
    flat = s.over_positions()
    assert not flat.offsets and flat.sign == 1 and float(flat.heads[0, 0]) == pytest.approx(0.9)
    assert float(flat.mlps[0]) == pytest.approx(0.2)
    with pytest.raises(ValueError, match="expected axes"):
        Scores({"heads": heads}, "fraction", 1)


def test_save_and_load_round_trip(tmp_path):
    n = [Neuron(0, 3), Neuron(1, 7)]
    senders, receivers = [Component("head", 0, 1), "input"], [Receiver.parse_many("1.0.q")[0], "logits"]
    s = Scores({"neurons": torch.tensor([0.5, -0.2]), "edges": torch.tensor([[1.0, 2.0], [3.0, float("nan")]])},
               "prob", -1, labels={"neurons": n, "edges": (senders, receivers)}, engine="test")
    back = Scores.load(s.save(tmp_path / "s.pt"))
    assert back.labels == s.labels and (back.metric, back.sign, back.engine) == ("prob", -1, "test")
    for k in s.parts:
        torch.testing.assert_close(back.parts[k], s.parts[k], equal_nan=True)
    assert back.ranked() == s.ranked()
    assert s.top(1, "edges") == [(Component("head", 0, 1), Receiver.parse_many("1.0.q")[0])]


def test_one_default_metric_named_once():
    """Two named defaults, the toolkit's and MIB's; every engine defaults to the toolkit's, through the registry and
    called directly alike; no other module declares a metric default of its own, as a parameter, a field, a constant,
    or a fallback (``.get("metric", ...)``, ``or "<metric>"``) but one: a per_operation folder saved before its
    data.json named the metric reads as the metric it was written in."""
    import inspect
    import re
    from pathlib import Path

    import circuits
    from circuits.beyond.faithfulness.config import FaithfulnessConfig
    from circuits.beyond.positions.config import PositionConfig
    from circuits.patching.engines.position_sweep import sweep_positions
    from circuits.patching.engines.attribution import attribute
    from circuits.patching.engines.eap_ig import eap_ig
    from circuits.patching.engines.registry import Engine
    from circuits.types import DEFAULT_KEY_RULE, METRIC_NAMES

    assert DEFAULT_METRIC == "fraction" and DEFAULT_KEY_RULE.startswith(DEFAULT_METRIC)
    assert MIB_METRIC == "logit_diff" == FaithfulnessConfig.__dataclass_fields__["metric"].default
    assert PositionConfig.__dataclass_fields__["metric"].default == MIB_METRIC
    for fn in (eap_ig, attribute, Engine.run, Engine.reference):
        assert inspect.signature(fn).parameters["metric"].default == DEFAULT_METRIC, fn
    assert inspect.signature(sweep_positions).parameters.get("metric") is None  # it keeps every readout
    root = Path(circuits.__file__).parent
    literal = re.compile(r'metric(: [^=,()\n]+)? ?= ?"|METRIC = "|\.get\("metric", "|\bor "(' + "|".join(METRIC_NAMES)
                         + ')"')
    found = [f"{p.relative_to(root)}: {line.strip()}" for p in root.rglob("*.py") if p.name != "types.py"
             for line in p.read_text().splitlines() if literal.search(line)]
    assert found == ['identify/result.py: d.get("metric", "relative_logit"), d.get("pairs", {}))'], found


def test_every_end_result_gives_scores(tiny_llama, tokenizer):
    batch = PairBatch.from_pairs(mixed_pairs(tokenizer, 3), 0)
    r = sweep(tiny_llama, batch, "path", progress=False)
    s, m = r.scores(), get_metric(DEFAULT_METRIC)
    assert s.metric == DEFAULT_METRIC and s.engine == "exact-path"
    torch.testing.assert_close(s.heads, m.effect(r.heads, r.baseline), equal_nan=True)
    torch.testing.assert_close(s.mlps, m.effect(r.mlps, r.baseline), equal_nan=True)
    rel = get_metric("relative_logit")
    assert r.scores(rel).ranked(part="heads") == rank(rel.effect(r.heads, r.baseline), rel.sign)
    assert s.per_pair["heads"].shape[-1] == 3


def test_eap_ig_scores_are_mibs_graph(tiny_llama, tokenizer):
    from circuits.patching.interchange.mib import MIBGraph
    from circuits.patching.engines.eap_ig import eap_ig

    batch = PairBatch.from_pairs(mixed_pairs(tokenizer, 2), 0)
    ig = eap_ig(tiny_llama, batch, MIB_METRIC, steps=1, level="edge", progress=False)
    assert isinstance(ig, Scores) and ig.scores() is ig and ig.engine == "eap-ig"
    d = tiny_llama.cfg.d_model
    g = ig.to_mib(d)
    assert isinstance(g, MIBGraph) and g == ig.to_mib(d)
    torch.testing.assert_close(g.edges, ig.importance("edges").float(), equal_nan=True)
    assert [(a, b) for (a, b), _ in ig.ranked(5, "edges")] == ig.top(5, "edges")


def test_one_size_count_rule_per_setting():
    """Issue 38: a circuit of size s counts its nodes one way per setting, named once in circuits.types: round(s * n)
    in the toolkit's own functions (DEFAULT_COUNT), int(s * n) in the MIB-style faithfulness job (MIB_COUNT), and no
    literal count default anywhere else."""
    import inspect
    import re
    from pathlib import Path

    import circuits
    from circuits.beyond.faithfulness.config import FaithfulnessConfig
    from circuits.patching.circuit_curves import circuit_curve, circuit_masks
    from circuits.patching.circuit_curves.curve import n_kept_at
    from circuits.patching.circuit_curves.edge_curves import edge_masks
    from circuits.types import DEFAULT_COUNT, MIB_COUNT

    assert (DEFAULT_COUNT, MIB_COUNT) == ("round", "floor")
    assert FaithfulnessConfig.__dataclass_fields__["count"].default == MIB_COUNT
    for fn in (n_kept_at, circuit_masks, edge_masks, circuit_curve):
        assert inspect.signature(fn).parameters["count"].default == DEFAULT_COUNT, fn
    assert n_kept_at(0.05, 30, DEFAULT_COUNT) == 2 and n_kept_at(0.05, 30, MIB_COUNT) == 1  # 1.5 nodes: up, down
    root = Path(circuits.__file__).parent
    literal = re.compile(r'(?<!`)\bcount(: [^=,()\n]+)? ?= ?(option\()?"|_COUNT = "')  # code, not ``docs``
    found = [f"{p.relative_to(root)}:{i}" for p in root.rglob("*.py") if p.name != "types.py"
             for i, line in enumerate(p.read_text().splitlines(), 1) if literal.search(line)]
    assert found == [], found


def test_top_first_by_layer_and_into_read_by_hand():
    """top(k, first=rule): the rule's components first, then the ranking; by_layer: neurons laid out per MLP layer;
    ranked(into=r): the edges into r alone. Against values worked by hand."""
    # fraction (+1): ranking 1.1 (0.4), 0.0 (0.3), 0.1 (0.2), 1.0 (-0.1); a rule "fraction<=-0.05" keeps 1.0 alone
    s = Scores({"heads": torch.tensor([[0.3, 0.2], [-0.1, 0.4]]), "mlps": torch.tensor([0.1, float("nan")])},
               "fraction", 1)
    assert s.top(3, "heads") == [Head(1, 1), Head(0, 0), Head(0, 1)]
    assert s.top(3, "heads", first="fraction<=-0.05") == [Head(1, 0), Head(1, 1), Head(0, 0)]
    assert s.top(1, "mlps", first="top1") == [Component.mlp(0)]
    with pytest.raises(ValueError, match="ranks only 1 mlps, fewer than 2"):  # the NaN MLP is not ranked
        s.top(2, "mlps", first="top1")
    with pytest.raises(ValueError, match="reads relative_logit"):
        s.top(2, "heads", first="relative_logit<-0.05")
    n = Scores({"neurons": torch.tensor([0.5, -0.2, 0.7])}, "fraction", 1,
               labels={"neurons": [Neuron(0, 2), Neuron(3, 0), Neuron(3, 1)]})
    layers = n.by_layer()
    assert sorted(layers) == [0, 3] and layers[3][:2].tolist() == pytest.approx([-0.2, 0.7])
    assert layers[0][2] == pytest.approx(0.5) and torch.isnan(layers[0][:2]).all() and torch.isnan(layers[3][2])
    senders, receivers = [Component.mlp(0), Component("head", 0, 1)], Receiver.parse_many("1.0.q,MLP1")
    e = Scores({"edges": torch.tensor([[0.1, 0.9], [0.6, float("nan")]])}, "fraction", 1,
               labels={"edges": (senders, receivers)})
    assert e.ranked(into=receivers[0]) == [(senders[1], pytest.approx(0.6)), (senders[0], pytest.approx(0.1))]
    assert e.ranked(1, into=receivers[1]) == [(senders[0], pytest.approx(0.9))]
