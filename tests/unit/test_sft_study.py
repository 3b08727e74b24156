"""The Precise SFT study's parts that need no training: the random-head draws, the LoRA rank rule, the items and
their splits, the intervals against plain references, and the config's one-line refusals (issue 39)."""

from __future__ import annotations

import pytest
import torch

from circuits.sft.arms import lora_rank, random_heads
from circuits.evaluation.study_config import StudyConfig
from circuits.evaluation.study_items import Item, check_disjoint, difference, interval, study_items, tasks_of, two_digit_items
from circuits.types import Head

# SmolLM2's 8 key heads for addition (docs/results_finetune.md), 9 heads per layer.
KEY = tuple(Head(l, h) for l, h in ((20, 8), (14, 2), (18, 5), (23, 3), (20, 2), (20, 1), (16, 4), (20, 5)))


def test_random_heads_lie_outside_the_key_set_in_its_layer_range_and_differ_per_draw():
    draws = [random_heads(KEY, 9, seed=0, draw=d) for d in range(3)]
    for drawn in draws:
        assert len(drawn) == len(set(drawn)) == len(KEY)
        assert not set(drawn) & set(KEY)
        assert all(14 <= h.layer <= 23 and 0 <= h.head < 9 for h in drawn)
    assert len({frozenset(d) for d in draws}) == 3  # another draw, other heads
    assert draws == [random_heads(KEY, 9, seed=0, draw=d) for d in range(3)]  # reproducible
    assert random_heads(KEY, 9, seed=1, draw=0) != draws[0]  # another seed, another draw
    # uniform over the pool: every head of the range outside the key set is drawn sometimes, none inside it
    seen = {h for d in range(300) for h in random_heads(KEY, 9, seed=0, draw=d)}
    assert seen == {Head(l, h) for l in range(14, 24) for h in range(9)} - set(KEY)


def test_random_heads_refuse_a_range_too_small_and_an_empty_key_set():
    with pytest.raises(ValueError, match="too few"):
        random_heads((Head(0, 0), Head(0, 1), Head(0, 2)), 4, 0, 0)
    with pytest.raises(ValueError, match="empty"):
        random_heads((), 4, 0, 0)


@pytest.mark.parametrize("target,per_rank", [(1_105_920, 115_200), (57_600, 115_200), (10, 115_200),
                                             (1000, 7), (7 * 5 + 3, 7), (7 * 5 + 4, 7)])
def test_lora_rank_is_the_nearest_count_within_half_a_rank(target, per_rank):
    r = lora_rank(target, per_rank)
    plain = min(range(1, target // per_rank + 3), key=lambda k: (abs(k * per_rank - target), k))  # brute force
    assert r == plain
    assert r == 1 or abs(r * per_rank - target) <= per_rank / 2


def test_items_split_test_and_validation_apart_from_each_other_and_from_training():
    train = {f"1 + 2 = 3\n4 + 4 = 8\n5 + 1 = 6\n{a} + {b} = " for a in range(10, 60) for b in range(10, 99)}
    test, val = study_items(5, 40, 4, train)
    assert {it.context for it in test}.isdisjoint({it.context for it in val})
    assert not {it.context for it in test + val} & train
    tasks = tasks_of(test)
    assert len(tasks["two_digit"]) == 40 and len(tasks["arithmetic"]) == 20
    assert sum(1 for it in val if it.task == "two_digit") == 4 and len(val) == 4 * 5
    assert study_items(5, 40, 4, train) == (test, val)  # the same items every time
    with pytest.raises(ValueError, match="also a test item"):
        check_disjoint(test, [test[0]], set())
    with pytest.raises(ValueError, match="left outside"):
        two_digit_items(5, 0, {f"1 + 2 = 3\n4 + 4 = 8\n5 + 1 = 6\n{a} + {b} = " for a in range(10, 100)
                               for b in range(10, 100)})


def test_two_digit_answers_are_the_sums():
    for it in two_digit_items(50, 3, set()):
        a, b = it.context.splitlines()[-1].removesuffix(" = ").split(" + ")
        assert it.choices == (f"{int(a) + int(b)}\n",) and 10 <= int(a) <= 99 and 10 <= int(b) <= 99


def test_interval_and_paired_difference_against_a_plain_bootstrap():
    g = torch.Generator().manual_seed(0)
    a = (torch.rand(3, 40, generator=g) < 0.6).double()
    b = (torch.rand(4, 40, generator=g) < 0.4).double()
    mean, lo, hi = interval(a, 500, seed=3)
    assert mean == pytest.approx(float(a.mean())) and lo <= mean <= hi
    # the plain loop: resample runs, then items, and take the mean (the same index draws)
    from circuits.patching.core.uncertainty import resample_pairs

    r, i = resample_pairs(3, 500, 3), resample_pairs(40, 500, 4)
    plain = torch.tensor([float(a[r[k]][:, i[k]].mean()) for k in range(500)], dtype=torch.float64)
    assert (lo, hi) == pytest.approx((float(plain.quantile(0.025)), float(plain.quantile(0.975))))
    d, dlo, dhi, p = difference(a, b, 500)
    assert d == pytest.approx(float(a.mean() - b.mean())) and dlo <= d <= dhi and 0 < p <= 1
    z = difference(a, a, 200)  # an arm against itself: 0, its interval around 0
    assert z[0] == 0.0 and z[1] <= 0 <= z[2]
    with pytest.raises(ValueError, match="same items"):
        difference(a, b[:, :10], 10)


def test_study_config_refuses_bad_values_in_one_line():
    for kw, match in ((dict(seeds=()), "--seeds is empty"), (dict(lrs=(1e-4, -1.0)), "--lrs"),
                      (dict(arms=("precise", "reft")), "unknown 'reft'"), (dict(random_draws=0), "--random-draws"),
                      (dict(seeds=(0, 0, 1)), "more than once")):
        with pytest.raises(ValueError, match=match) as err:
            StudyConfig(**kw)
        assert "\n" not in str(err.value)
    c = StudyConfig(key_heads=("20.8", "14.2"))
    assert c.key_heads == (Head(20, 8), Head(14, 2))
    run = c.run_config(lr=3e-4, seed=2, heads=c.key_heads)
    assert (run.lr, run.seed, run.heads, run.full, run.batch_size) == (3e-4, 2, c.key_heads, False, c.train.batch_size)
    assert StudyConfig.from_json(c.to_json()) == c


def test_tasks_pool_the_held_out_forms():
    items = [Item("arithmetic:single", "a", ("1\n",)), Item("two_digit", "b", ("2\n",)),
             Item("arithmetic:word", "c", ("3\n",))]
    assert tasks_of(items) == {"arithmetic": [0, 2], "arithmetic:single": [0], "arithmetic:word": [2],
                               "two_digit": [1]}


def test_key_components_without_an_identify_result_is_one_line_before_any_model(tmp_path):
    from circuits.evaluation.study import key_components

    with pytest.raises(ValueError, match="no identify result there") as err:
        key_components(StudyConfig(heads_from=str(tmp_path / "missing")))
    assert "\n" not in str(err.value)
    listed = StudyConfig(key_heads=KEY, key_mlps=(19, 24), heads_from=str(tmp_path / "missing"))
    assert key_components(listed) == (KEY, (19, 24))  # listed components need no identify result
    assert key_components(listed.replace(arms=("precise", "full"), key_mlps=())) == (KEY, ())
