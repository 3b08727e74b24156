"""Knockout curves keep each pair's outcome and carry bootstrap intervals over pairs (issue 29): the per-pair outcomes
equal plain knockouts, save and load back equal, the intervals equal a plain bootstrap loop, the figure draws them on
axes from 0 under a title naming the operation, and the report's text says whether the key-vs-random gap is outside
its interval."""

from __future__ import annotations

import json

import numpy as np
import pytest

from circuits.data.pairs import build_pairs
from circuits.results import ResultError, load_result
from circuits.types import Head
from circuits.validate.config import KnockoutConfig
from circuits.validate.knockout import KnockoutCurve, KnockoutResult, knockout, knockout_curve


@pytest.fixture(scope="module")
def pairs(tiny_llama):
    return build_pairs(tiny_llama, "addition", n_pairs=10, filter_correct=False, few_shot="on").pairs


@pytest.fixture(scope="module")
def curve(tiny_llama, pairs):
    ranking = [Head(1, 2), Head(2, 1), Head(0, 3), Head(2, 0)]
    return knockout_curve(tiny_llama, pairs, ranking, [0, 1, 4], (0, 1, 2))


def test_each_pairs_outcome_equals_a_plain_knockout(tiny_llama, pairs, curve):
    from circuits.validate.knockout import random_order

    assert curve.n_pairs == len(pairs)
    for i, k in enumerate(curve.ks):
        plain = knockout(tiny_llama, pairs, curve.ranking[:k])
        assert curve.effect_correct[i] == plain.correct
        np.testing.assert_allclose(curve.effect_pair_prob[i], plain.probs, atol=1e-6)
        assert np.mean(curve.effect_pair_prob[i]) == pytest.approx(curve.effect_prob[i], abs=1e-6)
    order = random_order(tiny_llama.cfg.n_layers, tiny_llama.cfg.n_heads, 2)
    plain = knockout(tiny_llama, pairs, order[:4])
    assert curve.random_correct[2][2] == plain.correct
    np.testing.assert_allclose(curve.random_pair_prob[2][2], plain.probs, atol=1e-6)


def test_the_per_pair_outcomes_save_and_load_back_equal(curve, pairs, tmp_path):
    made = KnockoutResult(KnockoutConfig(task="addition", ks=(0, 1, 4), seeds=(0, 1, 2)), curve, "addition", len(pairs))
    back = load_result(made.save(tmp_path / "ko"))
    assert back == made and back.curve.random_pair_prob == curve.random_pair_prob
    assert back.curve.gap() == curve.gap() and back.curve.intervals() == curve.intervals()
    data = json.loads((tmp_path / "ko" / "data.json").read_text())
    assert len(data["curve"]["random_correct"][1][2]) == len(pairs)


def _plain_bootstrap(key, rnd, n_boot, seed):
    """The intervals of KnockoutCurve.interval and .gap as a loop: one resample of the pairs at a time."""
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, key.shape[-1], size=(n_boot, key.shape[-1]))
    key_b, rnd_b, gap_b = [], [], []
    for draw in idx:
        key_b.append([np.mean([key[k][j] for j in draw]) for k in range(key.shape[0])])
        rnd_b.append([np.mean([np.mean([rnd[s][k][j] for s in range(rnd.shape[0])]) for j in draw])
                      for k in range(key.shape[0])])
        gap_b.append(rnd_b[-1][-1] - key_b[-1][-1])
    q = [2.5, 97.5]
    return (np.percentile(np.array(key_b), q, axis=0).T, np.percentile(np.array(rnd_b), q, axis=0).T,
            np.percentile(gap_b, q))


@pytest.mark.parametrize("what", ["accuracy", "answer_prob"])
def test_intervals_equal_a_plain_bootstrap_loop(curve, what):
    key, rnd = curve.per_pair(what)
    want_key, want_rnd, want_gap = _plain_bootstrap(key, rnd, 200, 7)
    got = curve.interval(what, n_boot=200, seed=7)
    np.testing.assert_allclose(got["key"], want_key, atol=1e-12)
    np.testing.assert_allclose(got["random"], want_rnd, atol=1e-12)
    gap = curve.gap(what=what, n_boot=200, seed=7)
    np.testing.assert_allclose([gap["low"], gap["high"]], want_gap, atol=1e-12)
    assert gap["gap"] == pytest.approx(np.mean(rnd[:, -1]) - np.mean(key[-1]))
    for (lo, hi), mean in zip(got["key"], key.mean(-1)):
        assert lo <= mean + 1e-12 and mean <= hi + 1e-12


def _hand_curve(key_correct, rnd_correct):
    """A curve with the given 0/1 outcomes at k = 0 and k = 2 (every pair correct at k = 0)."""
    n = len(key_correct)
    ks = [0, 2]
    eff = [[True] * n, key_correct]
    rnd = [[[True] * n, r] for r in rnd_correct]
    probs = [[float(x) for x in row] for row in eff]
    return KnockoutCurve(ks, [Head(0, 0), Head(0, 1)], [float(np.mean(r)) for r in eff], [float(np.mean(r)) for r in probs],
                         [[Head(1, 0), Head(1, 1)]] * len(rnd), [[float(np.mean(r)) for r in s] for s in rnd],
                         [[float(np.mean(r)) for r in s] for s in rnd], eff, probs, rnd,
                         [[[float(x) for x in r] for r in s] for s in rnd])


def test_the_report_says_whether_the_gap_is_outside_its_interval():
    from circuits.viz.sections import _knockout_text

    n = 40
    clear = _hand_curve([False] * n, [[True] * n] * 5)  # key heads knock out every pair, random heads none
    same = _hand_curve([i % 2 == 0 for i in range(n)], [[i % 2 == 0 for i in range(n)]] * 5)
    unsure = _hand_curve([i != 0 for i in range(n)], [[True] * n] * 5)  # 1 of 40 pairs apart
    say = lambda c: _knockout_text(KnockoutResult(KnockoutConfig(task="multiplication"), c, "multiplication", n))  # noqa: E731
    assert clear.gap()["low"] > 0 and "lies above 0, so on these pairs the gap is outside chance" in say(clear)
    assert "heads knock out no more than random ones here" in say(same) and same.gap()["gap"] == 0
    assert unsure.gap()["low"] <= 0 < unsure.gap()["gap"]
    assert "not outside its interval" in say(unsure) and "bootstrap interval over the 40 pairs" in say(unsure)


def test_the_figure_draws_the_intervals_from_zero_under_a_title_naming_the_operation(curve, pairs):
    r = KnockoutResult(KnockoutConfig(task="division"), curve, "division", len(pairs))
    fig = r.figure()
    assert "division" in fig.layout.title.text and "bootstrap" in fig.layout.title.text
    names = [t.name for t in fig.data if t.name]
    assert any("top-k heads: 95% bootstrap" in n for n in names) and any("random heads: 95%" in n for n in names)
    assert fig.layout.yaxis.range[0] == 0 and fig.layout.yaxis2.range[0] == 0
    bands = curve.intervals()
    lows = [t for t in fig.data if t.name and t.name.startswith("top-k heads: 95%")]
    np.testing.assert_allclose(lows[0].y, [b[0] for b in bands["accuracy"]["key"]])
    top = max(max(b[1] for b in bands[w]["key"] + bands[w]["random"]) for w in bands)
    assert fig.layout.yaxis.range[1] >= min(top, 1.0)


def test_a_curve_saved_before_per_pair_outcomes_still_loads_and_draws_min_max(tmp_path, curve):
    old = {k: v for k, v in curve.to_json().items() if k in ("ks", "ranking", "effect_accuracy", "effect_prob",
                                                               "random_orders", "random_accuracy", "random_prob")}
    c = KnockoutCurve.from_json(old)
    assert c.n_pairs == 0 and c.gap() is None and c.intervals() is None
    assert any("min-max" in (t.name or "") for t in c.figure().data)


@pytest.mark.parametrize("field, value, message", [
    ("random_correct", "yes", "field 'random_correct' is 'yes' (str)"),
    ("effect_pair_prob", [[0.5]], "field 'effect_pair_prob' has shape (1, 1)"),
    ("effect_accuracy", ["high", 0.5, 0.1], "field 'effect_accuracy'"),
])
def test_a_damaged_curve_is_one_result_error_naming_the_field(curve, field, value, message, tmp_path):
    made = KnockoutResult(KnockoutConfig(task="addition", ks=(0, 1, 4), seeds=(0, 1, 2)), curve, "addition", 10)
    folder = made.save(tmp_path / "ko")
    data = json.loads((folder / "data.json").read_text())
    data["curve"][field] = value
    (folder / "data.json").write_text(json.dumps(data))
    with pytest.raises(ResultError, match="data.json: " + message.replace("(", r"\(").replace(")", r"\)")
                       .replace("[", r"\[")):
        KnockoutResult.load(folder)
