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


def test_weighted_interval_and_difference_against_a_plain_ratio_bootstrap():
    """Perplexity's intervals: each resample's total negative log-likelihood over its total words (lm-eval's word
    perplexity, on the log), by the study's interval code with weights, against a plain loop."""
    g = torch.Generator().manual_seed(1)
    n_words = torch.randint(3, 40, (30,), generator=g).double()
    nll_a = torch.rand(3, 30, generator=g) * n_words * 2  # [run, document] total negative log-likelihood
    nll_b = torch.rand(2, 30, generator=g) * n_words * 3
    mean, lo, hi = interval(nll_a / n_words, 400, seed=5, weights=n_words)
    assert mean == pytest.approx(float(nll_a.sum() / (3 * n_words.sum())))
    from circuits.patching.core.uncertainty import resample_pairs

    r, i = resample_pairs(3, 400, 5), resample_pairs(30, 400, 6)
    plain = torch.tensor([float(nll_a[r[k]][:, i[k]].sum() / (3 * n_words[i[k]].sum())) for k in range(400)],
                         dtype=torch.float64)
    assert (lo, hi) == pytest.approx((float(plain.quantile(0.025)), float(plain.quantile(0.975))))
    d, dlo, dhi, p = difference(nll_a / n_words, nll_b / n_words, 400, seed=5, weights=n_words)
    ra, rb = resample_pairs(3, 400, 5), resample_pairs(2, 400, 7)
    plain_d = torch.tensor([float(nll_a[ra[k]][:, i[k]].sum() / (3 * n_words[i[k]].sum())
                                  - nll_b[rb[k]][:, i[k]].sum() / (2 * n_words[i[k]].sum())) for k in range(400)],
                           dtype=torch.float64)
    assert d == pytest.approx(float(nll_a.sum() / (3 * n_words.sum()) - nll_b.sum() / (2 * n_words.sum())))
    assert (dlo, dhi) == pytest.approx((float(plain_d.quantile(0.025)), float(plain_d.quantile(0.975))))
    assert 0 < p <= 1
    # weights of one: the unweighted numbers exactly
    assert interval(nll_a, 100, weights=torch.ones(30)) == pytest.approx(interval(nll_a, 100))
    with pytest.raises(ValueError, match="30 positive numbers"):
        interval(nll_a, 10, weights=torch.zeros(30))


def test_word_problems_are_scored_as_circuits_evaluate_scores_them(monkeypatch):
    """A word problem's answer is generated through the evaluator's generate_until with the evaluate job's stop
    strings and token cap, and checked by its process_numeric; a perplexity document's logp is its rolling
    log-likelihood; the choice items keep their scores."""
    from circuits.evaluation import lm_eval as le
    from circuits.evaluation.study_items import general_items, score_items, words
    from circuits.evaluation.tasks import MATH_UNTIL

    items = general_items(2, 2, ("gsm8k",))
    assert [it.kind for it in items] == ["generate", "generate", "text", "text"]
    answers = [float(it.choices[0]) for it in items[:2]]
    asked = []

    def generate_until(self, requests, disable_tqdm=False):
        asked.extend(r.args for r in requests)
        return [f" So the answer is {answers[0]:g}.", f" It is {answers[1] + 1:g}"]

    def rolling(self, requests, disable_tqdm=False):
        return [-float(len(r.args[0])) for r in requests]

    monkeypatch.setattr(le.HookedTransformerLM, "generate_until", generate_until)
    monkeypatch.setattr(le.HookedTransformerLM, "loglikelihood_rolling", rolling)

    class Fake:
        tokenizer = __import__("helpers").smollm2_tokenizer()
        cfg = type("cfg", (), {"n_ctx": 64, "device": "cpu"})()

    scores = score_items(Fake(), items, 4, max_gen_toks=33)
    assert [a[0] for a in asked] == [it.context for it in items[:2]]
    assert all(a[1] == {"until": list(MATH_UNTIL), "max_gen_toks": 33} for a in asked)
    assert scores["correct"] == [1.0, 0.0, 0.0, 0.0]
    assert scores["logp"] == [0.0, 0.0, -float(len(items[2].context)), -float(len(items[3].context))]
    assert words(items) == [0, 0, len(items[2].context.split()), len(items[3].context.split())]


def test_new_evaluation_flags_refuse_bad_values_in_one_line():
    for kw, match in ((dict(perplexity=-1), "--perplexity -1"), (dict(word_problems=-2), "--word-problems"),
                      (dict(word_tasks=("gsm8k", "mathqa")), "unknown 'mathqa'"), (dict(word_tasks=()), "is empty"),
                      (dict(max_gen_toks=0), "--max-gen-toks"), (dict(math_shots=9), "--math-shots 9"),
                      (dict(save_weights="some"), "--save-weights")):
        with pytest.raises(ValueError, match=match) as err:
            StudyConfig(**kw)
        assert "\n" not in str(err.value)
    from circuits.evaluation.study_items import general_items

    with pytest.raises(ValueError, match=r"^--word-problems 500: addsub holds 79 items") as err:
        general_items(0, 500, ("addsub",))
    with pytest.raises(ValueError, match=r"^--perplexity 5000: perplexity holds 1531 items"):
        general_items(5000)


def test_the_command_line_refuses_a_bad_new_flag_in_one_line():
    import subprocess
    import sys

    for flags, match in ((["--perplexity", "-1"], "--perplexity -1: must be at least 0"),
                         (["--word-tasks", "gsm8k,nope"], "nope"), (["--save-weights", "half"], "half")):
        run = subprocess.run([sys.executable, "-m", "circuits", "sft-study", *flags, "--out", "/nonexistent/x"],
                             capture_output=True, text=True, timeout=300)
        assert run.returncode == 2 and match in run.stderr, run.stderr
        assert len([line for line in run.stderr.splitlines() if "error" in line]) == 1


def test_a_study_with_perplexity_tabulates_word_perplexity_and_loads_back(tmp_path):
    """Perplexity cells by hand: the mean is the total negative log-likelihood over the total words of the runs (the
    log of word perplexity), printed as the perplexity; the difference from Precise SFT as the % change; the report's table prints the same
    cells; the result round-trips with its words."""
    import math

    from circuits.evaluation.study_config import STUDY_TRAIN
    from circuits.evaluation.study_result import SFTStudyResult
    from circuits.viz.sections import Found, sft_section

    config = StudyConfig(train=STUDY_TRAIN.replace(model="tiny"), key_heads=(Head(1, 2),), arms=("precise", "full"),
                         seeds=(0, 1), lrs=(1e-3,), n_boot=200)
    variants = [{"name": "Precise SFT (key heads)", "arm": "precise", "heads": [[1, 2]], "mlps": [], "draw": None,
                 "lora_rank": None, "lr": 1e-3, "tuned_parameters": 10},
                {"name": "full SFT", "arm": "full", "heads": [], "mlps": [], "draw": None, "lora_rank": None,
                 "lr": 1e-3, "tuned_parameters": 99}]
    logp = {"Precise SFT (key heads)": [[-20.0, -60.0], [-24.0, -56.0]], "full SFT": [[-10.0, -40.0], [-12.0, -44.0]]}
    runs = [{"variant": v["name"], "seed": s, "lr": 1e-3, "correct": [1.0, 0.0, 0.0], "logp": [-0.5, *logp[v["name"]][s]],
             "tuned_parameters": v["tuned_parameters"], "train_seconds": 1.0, "steps": 1, "samples": 2,
             "losses": [1.0]} for v in variants for s in (0, 1)]
    result = SFTStudyResult(config, variants, runs, [], ["two_digit", "perplexity", "perplexity"],
                            {"correct": [0.0, 0.0, 0.0], "logp": [-1.0, -30.0, -90.0]}, {}, 0, [0, 10, 30])
    rows = result.table()
    precise, full = (row["tasks"]["perplexity"] for row in rows)
    assert precise["mean"] == pytest.approx((20 + 60 + 24 + 56) / (2 * 40))
    assert full["mean"] == pytest.approx((10 + 40 + 12 + 44) / (2 * 40))
    assert precise["base"] == pytest.approx(120 / 40)
    assert full["vs_precise"]["diff"] == pytest.approx(full["mean"] - precise["mean"])
    assert precise["low"] <= precise["mean"] <= precise["high"]
    assert rows[0]["tasks"]["two_digit"]["mean"] == 1.0  # the accuracy columns as before
    text = result.markdown()
    ppl_full, change = math.exp(full["mean"]), 100 * (math.exp(full["vs_precise"]["diff"]) - 1)
    assert f"{ppl_full:.2f} [" in text and f"({change:+.1f}% [" in text and f"| base | - | - | {math.exp(3):.2f} | 0.0 |" in text
    result.save(tmp_path / "s")
    again = SFTStudyResult.load(tmp_path / "s")
    assert again == result and again.words == [0, 10, 30]
    page = sft_section(None, [Found(again, tmp_path / "s")])
    assert f"{ppl_full:.2f} [" in page and f"({change:+.1f}% [" in page and "% change" in page


def test_a_count_past_a_benchmark_is_one_line_before_any_model_loads(tmp_path, monkeypatch):
    from circuits.evaluation import study
    from circuits.models import loading

    def no_model(*args, **kwargs):
        raise AssertionError("a model was loaded before the counts were checked")

    monkeypatch.setattr(loading, "load_model", no_model)
    for kw, match in ((dict(word_problems=80), r"^--word-problems 80: addsub holds 79 items"),
                      (dict(perplexity=2000), r"^--perplexity 2000: perplexity holds 1531 items")):
        config = StudyConfig(key_heads=KEY, arms=("precise",), **kw)
        with pytest.raises(ValueError, match=match) as err:
            study.run(config, tmp_path / "study", progress=False)
        assert "\n" not in str(err.value)
    assert not (tmp_path / "study").exists()
