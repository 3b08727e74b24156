"""``key_heads()`` from Python carries the interval the command's output does (issue 29): each key head's bootstrap
interval over pairs is ``summary.json``'s ``head_ci_low``/``head_ci_high``, and its ``uncertain`` flag is the
summary's ``uncertain_key_heads``; the heads still unpack and compare as ``(head, effect)`` pairs."""

from __future__ import annotations

import pickle

import pytest

from circuits.identify import IdentifyConfig, IdentifyResult, KeyHead, identify

CONFIG = IdentifyConfig(model="tiny", task="addition", n_pairs=6, few_shot="on", filter_correct=False,
                        key_rule="top4", bootstrap=50)


@pytest.fixture(scope="module")
def result(tiny_llama):
    return identify(tiny_llama, config=CONFIG, progress=False)


def test_key_heads_carry_the_summarys_intervals_and_uncertain_flags(result):
    s = result.summary()
    key = result.key_heads()
    assert len(key) == 4 and all(isinstance(k, KeyHead) for k in key)
    low = s["metrics"][result.key_rule.metric]["head_ci_low"]
    high = s["metrics"][result.key_rule.metric]["head_ci_high"]
    for k in key:
        (layer, head), effect = k  # still the (head, effect) pair
        assert (k.low, k.high) == (low[layer][head], high[layer][head]) and k.low <= effect <= k.high
        assert k.head == k[0] and k.effect == effect and "CI [" in repr(k)
    assert [list(k.head) for k in key if k.uncertain] == s["uncertain_key_heads"]
    assert key == [(h, e) for h, e in key] and pickle.loads(pickle.dumps(key)) == key
    assert pickle.loads(pickle.dumps(key[0])).low == key[0].low


def test_a_loaded_result_gives_the_same_intervals(result, tmp_path):
    back = IdentifyResult.load(result.save(tmp_path / "r"))
    assert [(k.low, k.high, k.uncertain) for k in back.key_heads()] == \
        [(k.low, k.high, k.uncertain) for k in result.key_heads()]


def test_without_a_bootstrap_the_key_heads_are_plain_pairs(tiny_llama):
    r = identify(tiny_llama, config=CONFIG.replace(bootstrap=0), progress=False)
    assert all(type(k) is tuple for k in r.key_heads())
