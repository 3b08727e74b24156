import pytest
import torch

from circuits.key_components import DEFAULT_KEY_RULE, KeyRule, rank_heads


def test_parse_rules():
    assert KeyRule.parse("relative_logit<-0.05") == KeyRule("relative_logit", "<", -0.05)
    assert KeyRule.parse("fraction >= 0.05") == KeyRule("fraction", ">=", 0.05)
    assert KeyRule.parse("top10") == KeyRule("fraction", top_k=10)
    assert KeyRule.parse("top:3:prob") == KeyRule("prob", top_k=3)
    assert str(KeyRule.parse(DEFAULT_KEY_RULE)) == "fraction>=0.05"


@pytest.mark.parametrize("bad", ["fraction", "top", "speed<3", "relative_logit<<1"])
def test_bad_rules(bad):
    with pytest.raises(ValueError, match="key rule|Unknown metric"):
        KeyRule.parse(bad)


def test_select_threshold_and_top_k():
    effects = torch.tensor([[-0.10, 0.02], [-0.06, -0.01]])
    sel = KeyRule.parse("relative_logit<-0.05").select(effects)
    assert [idx for idx, _ in sel] == [(0, 0), (1, 0)]  # most negative first
    assert KeyRule.parse("top1:relative_logit").select(effects)[0][0] == (0, 0)
    frac = torch.tensor([[0.3, 0.01], [0.06, -0.2]])
    assert [idx for idx, _ in KeyRule.parse("fraction>=0.05").select(frac)] == [(0, 0), (1, 0)]
    assert [(l, h) for l, h, _ in rank_heads(frac, "fraction")][:2] == [(0, 0), (1, 0)]
