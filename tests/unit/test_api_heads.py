"""What one call returns, the next takes: ``key_heads()`` into ``knockout`` and ``sweep(components=...)``; a key rule
that selects nothing says why."""

import warnings

import pytest
import torch

from circuits.data.pairs import build_pairs
from circuits.patching.engines.end_sweep import sweep
from circuits.patching.core.ranking import KeyRule, KeyRuleWarning
from circuits.types import Component, Head, as_components
from circuits.validate import knockout, knockout_curve, replacement_values


@pytest.fixture(scope="module")
def pairs(tiny_llama):
    return build_pairs(tiny_llama, "addition", n_pairs=6, filter_correct=False, few_shot="on", progress=False).pairs


@pytest.fixture(scope="module")
def swept(tiny_llama, pairs):
    return sweep(tiny_llama, pairs, progress=False)


def test_head_parse_reads_what_ranking_returns():
    assert Head.parse((Head(2, 1), 0.17)) == Head(2, 1)
    assert Head.parse(Component("head", 2, 1)) == Head(2, 1)
    assert Head.parse([2, 1, 0.3]) == Head(2, 1)
    with pytest.raises(ValueError, match="Bad head"):
        Head.parse((19, 0.05))  # an MLP's ranked pair is not head 19.0


def test_as_components_reads_heads_mlps_and_ranked_pairs():
    got = as_components([Head(1, 2), (Head(0, 3), 0.2), "MLP1", Component.mlp(2), "2.0", ("mlp", 0)])
    assert got == [Component("head", 1, 2), Component("head", 0, 3), Component.mlp(1), Component.mlp(2),
                   Component("head", 2, 0), Component.mlp(0)]
    with pytest.raises(ValueError, match="Bad component 'attn'.*MLP19"):
        as_components(["attn"])


def test_sweep_of_heads_and_mlps_equals_the_full_sweep_there(tiny_llama, pairs, swept):
    part = sweep(tiny_llama, pairs, components=[Head(1, 2), (Head(0, 3), 0.2), Component.mlp(2)], progress=False)
    torch.testing.assert_close(part.head_logit[1, 2], swept.head_logit[1, 2])
    torch.testing.assert_close(part.head_logit[0, 3], swept.head_logit[0, 3])
    torch.testing.assert_close(part.mlp_logit[2], swept.mlp_logit[2])
    assert torch.isnan(part.head_logit[2, 0]).all() and torch.isnan(part.mlp_logit[0]).all()


def test_knockout_takes_what_key_heads_returns(tiny_llama, pairs, swept):
    key = swept.scores().key("top3")
    means = replacement_values(tiny_llama, pairs)
    assert knockout(tiny_llama, pairs, key, means=means) == knockout(tiny_llama, pairs, [h for h, _ in key], means=means)
    mlps = [(c.layer, e) for c, e in swept.scores().key("top1", "mlps")]
    assert (knockout(tiny_llama, pairs, (), mlps, means=means)
            == knockout(tiny_llama, pairs, (), [mlps[0][0]], means=means)
            == knockout(tiny_llama, pairs, (), [f"MLP{mlps[0][0]}"], means=means))
    curve = knockout_curve(tiny_llama, pairs, swept.scores().ranked(part="heads"), ks=[0, 2], seeds=(0,), means=means)
    assert curve.ranking[:2] == swept.scores().top(2, "heads")


def test_a_bad_head_fails_before_any_work(tiny_llama, pairs, monkeypatch):
    import importlib

    ko = importlib.import_module("circuits.validate.knockout")  # the module (the package exports the function)

    def no_work(*args, **kwargs):
        raise AssertionError("the ablation means were computed before the bad head was refused")

    monkeypatch.setattr(ko, "replacement_values", no_work)  # no means computed first
    with pytest.raises(ValueError, match="Head 9.0 is outside"):
        knockout(tiny_llama, pairs * 50, [(Head(9, 0), 0.1)])


def test_a_rule_that_selects_nothing_says_why(swept):
    heads = swept.scores("relative_logit").heads
    top = float(heads.min())
    rule = f"relative_logit<{top - 1:.3f}"
    with pytest.warns(KeyRuleWarning, match=r"selects no heads.*largest effect.*relative_logit") as rec:
        assert swept.scores(KeyRule.parse(rule).metric).key(rule) == []
    assert f"{top:+.4f}" in str(rec[0].message) and rule.split("<")[1] in str(rec[0].message)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert swept.scores().key("top2") and KeyRule.parse("fraction>=1e9").select(heads.new_zeros(3)) == []


def test_fewer_pairs_than_asked_says_so(tiny_llama):
    from circuits.data.pairs import FewerPairsWarning

    with pytest.warns(FewerPairsWarning, match=r"2 of the 5 pairs asked.*at most 2 candidates"):
        got = build_pairs(tiny_llama, "addition", n_pairs=5, max_candidates=2, filter_correct=False, progress=False)
    assert len(got) == 2
