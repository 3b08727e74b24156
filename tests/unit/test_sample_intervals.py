"""Issue 40, "no intervals where numbers come from a sample": transfer's accuracies carry Wilson intervals over each
set's items (equal to SciPy's), the logit lens's curves and attention's role shares carry bootstrap intervals over
pairs / prompts (equal to a plain resampling loop); each is saved, drawn as error bars with n in the title, printed by
the command, and a result saved before them still loads and draws."""

import argparse
import json

import numpy as np
import pytest
import torch
from scipy.stats import binomtest

from result_cases import IDENTIFY, SOURCE

from circuits.explain.attention import AttentionRoles, RoleAttention, attention_roles, role_attention
from circuits.explain.config import LensConfig, RolesConfig
from circuits.explain.job import print_attention, print_lens
from circuits.explain.logit_lens import LogitLens, logit_lens, mlp_lens
from circuits.identify import identify
from circuits.patching.core.uncertainty import mean_interval, resample_pairs, wilson_interval
from circuits.results import load_result
from circuits.validate.config import TransferSets
from circuits.validate.job import print_transfer, transfer_result
from circuits.validate.transfer import ACCURACIES


@pytest.mark.parametrize("k,n", [(0, 8), (1, 6), (5, 8), (8, 8), (31, 64), (2, 3)])
def test_wilson_interval_equals_scipys(k, n):
    ours = wilson_interval(k / n, n, 0.95)
    ref = binomtest(k, n).proportion_ci(confidence_level=0.95, method="wilson")
    assert ours == pytest.approx((ref.low, ref.high), abs=1e-12)
    assert wilson_interval(k / n, n, 0.8)[1] - wilson_interval(k / n, n, 0.8)[0] < ours[1] - ours[0]
    assert wilson_interval(0.5, 0) != wilson_interval(0.5, 0)  # (NaN, NaN): no items, no interval


def test_mean_interval_equals_a_plain_resampling_loop():
    values = torch.randn(7, 3, 2, generator=torch.Generator().manual_seed(1))
    low, high = mean_interval(values, n_boot=40, level=0.9, seed=5)
    idx = resample_pairs(7, 40, 5)
    means = np.stack([np.mean([values[int(i)].numpy() for i in row], axis=0) for row in idx])  # by hand
    np.testing.assert_allclose(low.numpy(), np.percentile(means, 5, axis=0), rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(high.numpy(), np.percentile(means, 95, axis=0), rtol=1e-6, atol=1e-9)
    one_low, one_high = mean_interval(values[:1])
    assert torch.equal(one_low, one_high)  # one sample: nothing to resample


@pytest.fixture(scope="module")
def made(tiny_llama):
    with pytest.warns(Warning):  # the tiny model answers none of them: identify says so
        return identify(tiny_llama, config=IDENTIFY, progress=False)


def test_transfer_saves_draws_and_prints_wilson_intervals_over_items(tiny_llama, made, tmp_path, capsys):
    config = TransferSets(**SOURCE, n_key_heads=2, n=5, n_mmlu=4, svamp_shots=1)
    r = transfer_result(tiny_llama, made, config)
    assert set(r.results) == {"svamp", "multi_digit", "decimal", "time_span", "mmlu_humanities"}
    for name, row in r.results.items():
        n = row["n"]
        assert n > 0 and row["ci_level"] == 0.95
        for k in ACCURACIES:
            correct = round(row[k] * n)
            assert correct == pytest.approx(row[k] * n)  # a count of items
            ref = binomtest(correct, n).proportion_ci(method="wilson")
            assert row[f"ci_{k}"] == pytest.approx([ref.low, ref.high], abs=1e-12), (name, k)
    r.save(tmp_path / "t")
    loaded = load_result(tmp_path / "t")
    assert loaded.results == r.results and loaded.intervals() == r.intervals()
    fig = loaded.figure()
    assert "n = " in fig.layout.title.subtitle.text and "95% Wilson intervals" in fig.layout.title.subtitle.text
    for j, tr in enumerate(fig.data):  # each bar's error bar spans its saved interval
        key = ACCURACIES[j]
        for i, name in enumerate(r.results):
            low, high = r.results[name][f"ci_{key}"]
            assert tr.y[i] + tr.error_y.array[i] == pytest.approx(high)
            assert tr.y[i] - tr.error_y.arrayminus[i] == pytest.approx(low)
            assert f"(n={r.results[name]['n']})" in tr.x[i]
    print_transfer(argparse.Namespace(out=str(tmp_path / "t")), config, loaded, 1.0)
    out = capsys.readouterr().out
    svamp = r.results["svamp"]
    lo, hi = svamp["ci_accuracy_before"]
    assert f"{100 * svamp['accuracy_before']:.0f}% [{100 * lo:.0f}-{100 * hi:.0f}]" in out and "Wilson" in out

    # a result saved before the intervals: it loads, and draws the same Wilson intervals from n and the accuracy
    data = json.loads((tmp_path / "t" / "data.json").read_text())
    data["results"] = {k: {f: v for f, v in row.items() if not f.startswith("ci_")} for k, row in data["results"].items()}
    (tmp_path / "t" / "data.json").write_text(json.dumps(data))
    old = load_result(tmp_path / "t")
    assert "ci_level" not in old.results["svamp"]
    for name, ivs in r.intervals().items():
        for k, iv in ivs.items():
            assert old.intervals()[name][k] == pytest.approx(iv, abs=1e-12)
    assert list(old.figure().data[0].error_y.array) == pytest.approx(list(fig.data[0].error_y.array))


def test_lens_curves_carry_bootstrap_intervals_over_pairs(tiny_llama, made, tmp_path, capsys):
    pairs = made.pairs
    r = logit_lens(tiny_llama, pairs, k=3, config=LensConfig(**SOURCE, top_k=3))
    lens = mlp_lens(tiny_llama, pairs)
    idx = resample_pairs(len(pairs), 1000, 0)
    for key in ("in_A", "in_B", "delta_C", "delta_other"):
        per = getattr(lens, key).double().numpy()  # [pair, layer]
        boot = np.stack([per[row.numpy()].mean(0) for row in idx])  # the plain loop
        want = np.stack([np.percentile(boot, 2.5, axis=0), np.percentile(boot, 97.5, axis=0)], -1)
        np.testing.assert_allclose(np.array(r.intervals[key]), want, rtol=1e-5, atol=1e-7)
        assert all(lo <= m + 1e-9 and m <= hi + 1e-9 for (lo, hi), m in zip(r.intervals[key], r.means[key]))
    r.save(tmp_path / "lens")
    loaded = load_result(tmp_path / "lens")
    assert loaded == r and loaded.intervals == r.intervals
    fig = loaded.figure()
    assert f"{len(pairs)} pairs" in fig.layout.title.text and "bootstrap intervals over pairs" in fig.layout.title.subtitle.text
    first = fig.data[0]  # cos(MLP_in, W_U[A])
    assert [y + e for y, e in zip(first.y, first.error_y.array)] == pytest.approx([h for _, h in r.intervals["in_A"]])
    print_lens(argparse.Namespace(out="x"), r.config, loaded, 1.0)
    out = capsys.readouterr().out
    lo, hi = r.intervals["in_A"][r.peak("in_A")]
    assert f"[{lo:.3f}, {hi:.3f}]" in out and "write the answer from no layer" not in out

    data = json.loads((tmp_path / "lens" / "data.json").read_text())
    del data["intervals"], data["ci_level"]
    (tmp_path / "lens" / "data.json").write_text(json.dumps(data))
    old = load_result(tmp_path / "lens")  # saved before the intervals: loads, draws without error bars and says so
    assert isinstance(old, LogitLens) and old.intervals == {} and old.figure().data[0].error_y.array is None
    assert "no intervals saved" in old.figure().layout.title.subtitle.text


def test_attention_role_shares_carry_bootstrap_intervals_over_prompts(tiny_llama, made, tmp_path, capsys):
    heads = made.scores().top(2, "heads")
    ra = role_attention(tiny_llama, made.pairs, heads)
    d = ra.to_json()
    per = ra.per_prompt.double().numpy()  # [prompt, head, role]
    boot = np.stack([per[row.numpy()].mean(0) for row in resample_pairs(per.shape[0], 1000, 0)])
    np.testing.assert_allclose(np.array(d["ci_low"]), np.percentile(boot, 2.5, axis=0), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(np.array(d["ci_high"]), np.percentile(boot, 97.5, axis=0), rtol=1e-5, atol=1e-7)
    r = attention_roles(tiny_llama, made.pairs, heads, config=RolesConfig(**SOURCE, n_key_heads=2, operations=("addition",)))
    r.save(tmp_path / "att")
    loaded = load_result(tmp_path / "att")
    assert loaded == r
    fig = loaded.figure()
    n = loaded.by_operation["addition"]["n_prompts"]
    assert f"addition (n = {n} prompts)" in [a.text for a in fig.layout.annotations]
    assert "bootstrap intervals over prompts" in fig.layout.title.subtitle.text
    saved = loaded.by_operation["addition"]
    for j, tr in enumerate(fig.data):  # one bar trace per role, its error bars the saved interval of each head
        assert tr.name == saved["roles"][j]
        assert [y + e for y, e in zip(tr.y, tr.error_y.array)] == pytest.approx([row[j] for row in saved["ci_high"]])
    print_attention(argparse.Namespace(out="x"), r.config, loaded, 1.0)
    out = capsys.readouterr().out
    assert f"addition ({n} prompts)" in out and "bootstrap interval over prompts" in out

    data = json.loads((tmp_path / "att" / "data.json").read_text())
    for v in data["by_operation"].values():
        for f in ("ci_low", "ci_high", "ci_level"):
            del v[f]
    (tmp_path / "att" / "data.json").write_text(json.dumps(data))
    old = load_result(tmp_path / "att")
    assert isinstance(old, AttentionRoles) and old.figure().data[0].error_y.array is None
    assert isinstance(ra, RoleAttention)


def test_the_cross_model_transfer_bars_carry_wilson_intervals():
    from circuits.validate.cross_model import CrossModelConfig, CrossModelResult

    models = {"tiny": {"operations": {"addition": {"share_key_heads": 0.25}},
                       "knockout": {"ks": [0, 1], "effect_accuracy": [1, 0.5], "random_accuracy": [[1, 0.9]]},
                       "transfer": {"svamp": {"n": 8, "accuracy_before": 5 / 8, "accuracy_after": 2 / 8,
                                              "accuracy_random_heads": 4 / 8}},
                       "logit_lens": {"delta_C": [0.0, 1.0], "delta_other": [0.0, 0.5]}}}
    bar = [t for t in CrossModelResult(CrossModelConfig(models=("tiny",)), models).figure().data if t.type == "bar"][1]
    for y, up, down, k in zip(bar.y, bar.error_y.array, bar.error_y.arrayminus, (5, 2, 4)):
        ref = binomtest(k, 8).proportion_ci(method="wilson")
        assert (y - down, y + up) == pytest.approx((ref.low, ref.high), abs=1e-12)


def test_the_lens_says_plainly_when_no_layer_writes_the_answer(capsys):
    """Issue 40: the lens printed "the MLPs write the answer from no layer"."""
    means = {"in_A": [0.1, 0.2], "in_B": [0.2, 0.1], "delta_C": [0.0, 0.01], "delta_other": [0.05, 0.05]}
    r = LogitLens(LensConfig(), means, 4, intervals={k: [[v - 0.01, v + 0.01] for v in vs] for k, vs in means.items()})
    assert r.writing_start is None
    print_lens(argparse.Namespace(out="x"), r.config, r, 1.0)
    out = capsys.readouterr().out
    assert "no layer's MLP writes the answer above the other numbers" in out and "from no layer" not in out
    assert "at A most at layer 1 (cos 0.200 [0.190, 0.210])" in out
