"""Key rules and the one ranking."""

import math

import pytest
import torch

from circuits.patching.ranking import DEFAULT_KEY_RULE, KeyRule, rank
from circuits.types import Head


def test_parse_rules():
    assert KeyRule.parse("relative_logit<-0.05") == KeyRule("relative_logit", "<", -0.05)
    assert KeyRule.parse("fraction >= 0.05") == KeyRule("fraction", ">=", 0.05)
    assert KeyRule.parse("top10") == KeyRule("fraction", top_k=10)
    assert KeyRule.parse("top:3:prob") == KeyRule("prob", top_k=3)
    assert str(KeyRule.parse(DEFAULT_KEY_RULE)) == "fraction>=0.05"
    assert KeyRule.parse("mine>1", custom=("mine",)).metric == "mine"


@pytest.mark.parametrize("bad, message", [
    ("fraction", "Cannot read key rule"), ("top", "Cannot read key rule"), ("speed<3", "Unknown metric 'speed'"),
    ("relative_logit<<1", "Cannot read the threshold '<1'"), ("fraction>=0.0.5", "Cannot read the threshold '0.0.5'"),
    ("fraction>=nan", "finite number"), ("top0", "selects no heads"),
])
def test_bad_rules_say_what_is_accepted(bad, message):
    with pytest.raises(ValueError, match=message):
        KeyRule.parse(bad)


def test_select_threshold_and_top_k():
    effects = torch.tensor([[-0.10, 0.02], [-0.06, -0.01]])
    sel = KeyRule.parse("relative_logit<-0.05").select(effects)
    assert [idx for idx, _ in sel] == [(0, 0), (1, 0)]  # most negative first
    assert KeyRule.parse("top1:relative_logit").select(effects)[0][0] == (0, 0)
    frac = torch.tensor([[0.3, 0.01], [0.06, -0.2]])
    assert [idx for idx, _ in KeyRule.parse("fraction>=0.05").select(frac)] == [(0, 0), (1, 0)]


def test_rank_returns_every_head_and_skips_unswept():
    frac = torch.tensor([[0.3, 0.01, float("nan")], [0.06, -0.2, 0.0]])
    ranked = rank(frac, sign=1)
    assert [h for h, _ in ranked] == [Head(0, 0), Head(1, 0), Head(0, 1), Head(1, 2), Head(1, 1)]
    assert all(not math.isnan(e) for _, e in ranked)
    assert [h for h, _ in rank(frac, sign=-1)][0] == Head(1, 1)
