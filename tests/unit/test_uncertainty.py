"""How sure a ranking is: bootstrap intervals equal a plain resampling loop, uncertain key components are the ones
whose interval crosses the rule's threshold, the summary and the heatmap hover carry the intervals, and key-head
stability is a Jaccard overlap (forms from the saved per-pair values equal a sweep of those pairs alone)."""

import pytest
import torch
from helpers import mixed_pairs

from circuits.identify import IdentifyConfig, identify
from circuits.patching import sweep
from circuits.beyond.stability.config import StabilityConfig
from circuits.beyond.stability.result import StabilityResult, jaccard, jaccard_matrix
from circuits.beyond.stability.job import form_key_heads, stability
from circuits.patching.core.uncertainty import bootstrap, crosses, rule_threshold
from circuits.patching.core.ranking import KeyRule


@pytest.fixture(scope="module")
def tiny_identify(tiny_llama, tokenizer):
    return identify(tiny_llama, mixed_pairs(tokenizer, 9), IdentifyConfig(model="tiny", key_rule="top4", bootstrap=200),
                    progress=False)


def test_bootstrap_equals_a_plain_resampling_loop(tiny_identify):
    s = tiny_identify.sweep
    ci = bootstrap(s, "fraction", n_boot=50, level=0.9, seed=3)
    g = torch.Generator().manual_seed(3)
    idx = torch.randint(0, s.head_logit.shape[-1], (50, s.head_logit.shape[-1]), generator=g)
    vals = []
    for row in idx:  # the ratio of means on each resample, by hand
        b = s.baseline.select(row)
        vals.append((s.head_logit[..., row] - b.logit).mean(-1) / b.full_effect.mean())
    expected = torch.quantile(torch.stack(vals), torch.tensor([0.05, 0.95]), dim=0)
    torch.testing.assert_close(ci.head_low, expected[0])
    torch.testing.assert_close(ci.head_high, expected[1])
    assert (ci.head_low <= ci.head_high).all() and (ci.head_high - ci.head_low).max() > 0
    diff = bootstrap(s, "logit_diff", n_boot=200)  # a mean: the estimate sits inside its interval
    est = s.scores("logit_diff").heads
    assert ((diff.head_low <= est) & (est <= diff.head_high)).float().mean() > 0.9


@pytest.mark.parametrize("name", ["fraction", "relative_logit", "logit_diff", "prob"])
def test_resamples_in_chunks_equal_one_at_a_time(tiny_identify, name):
    """Built-in metrics run many resamples per call ([..., resample, pair]); a copy of the metric (which the
    bootstrap treats as a user's own) runs them one at a time: the intervals are the same."""
    from dataclasses import replace

    from circuits.patching.core.metrics import METRICS

    s = tiny_identify.sweep
    fast = bootstrap(s, name, n_boot=300, seed=1)  # 300: more than one chunk, and not a multiple of it
    slow = bootstrap(s, replace(METRICS[name]), n_boot=300, seed=1)
    for a, b in [(fast.head_low, slow.head_low), (fast.head_high, slow.head_high), (fast.mlp_low, slow.mlp_low),
                 (fast.mlp_high, slow.mlp_high)]:
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-6, equal_nan=True)


def test_uncertain_keys_cross_the_threshold(tiny_identify):
    r = tiny_identify
    heads = r.scores().heads
    rule = r.key_rule
    th = rule_threshold(rule, heads, 1)
    keys = [h for h, _ in r.key_heads()]
    assert th == pytest.approx(float(heads.flatten().sort(descending=True).values[4]))
    ci = r.intervals()
    unsure, _ = r.uncertain()
    assert unsure == [h for h in keys if crosses(float(ci.head_low[h]), float(ci.head_high[h]), th)]
    assert rule_threshold(KeyRule.parse("fraction>=0.05"), heads, 1) == 0.05
    s = r.summary()
    assert "uncertain_key_heads" in s and len(s["metrics"]["fraction"]["head_ci_low"]) == heads.shape[0]
    fig = r.figure()
    assert fig.data[0].customdata is not None and "CI" in fig.data[0].hovertemplate


def test_form_subsets_equal_sweeping_those_pairs_alone(tiny_llama, tiny_identify):
    r = tiny_identify
    idx = [0, 2, 5]
    alone = sweep(tiny_llama, [r.pairs[i] for i in idx], "path", progress=False)
    torch.testing.assert_close(r.sweep.select(idx).scores("fraction").heads, alone.scores("fraction").heads, atol=1e-5, rtol=1e-4)  # a ratio of sums over other batch shapes
    forms = form_key_heads(r)
    assert set(forms) <= {"equation", "statement", "question", "time_span", "accumulation"} and len(forms) >= 2


def test_jaccard_and_stability_result(tiny_identify, tmp_path):
    assert jaccard({1, 2}, {2, 3}) == pytest.approx(1 / 3) and jaccard(set(), set()) == 1.0
    assert jaccard_matrix([{1}, {1}, {2}]) == [[1, 1, 0], [1, 1, 0], [0, 0, 1]]
    res = stability({"addition": {0: tiny_identify, 1: tiny_identify}}, StabilityConfig(IdentifyConfig(model="tiny", key_rule="top4")))
    s = res.summary()["per_operation"]["addition"]
    assert s["mean_jaccard_seeds"] == 1.0 and s["jaccard_seeds"] == [[1.0, 1.0], [1.0, 1.0]]
    res.save(tmp_path / "st")
    back = StabilityResult.load(tmp_path / "st")
    assert back == res and back.config.key_rule == "top4"
