"""The Fourier view (explain/fourier.py) and the digit-position patching (explain/digits.py): planted periods are
recovered, the direct number effects add up to the model's own number logits, and the batched digit patching equals
one run_with_hooks per neuron."""

import math
import random

import pytest
import torch
from helpers import mixed_pairs
from transformer_lens.utils import get_act_name

from circuits.data.arithmetic import EQUATION_PREFIX
from circuits.explain.digits import (DIGITS, change_digit, digit_effects, digit_labels, digit_problems, digit_scores,
                                     sample_problems, answer_accuracy)
from circuits.explain.fourier import (direct_number_effects, energy_shares, fourier_spectrum, number_spectra,
                                      number_tokens, periods)
from circuits.types import Component, Neuron


def planted(n: int, period: float, amp: float = 1.0, phase: float = 0.3) -> torch.Tensor:
    t = torch.arange(n, dtype=torch.float64)
    return amp * torch.cos(2 * math.pi * t / period + phase)


@pytest.mark.parametrize("n,period", [(10, 10), (10, 5), (10, 2), (100, 10), (100, 4)])
def test_a_planted_period_is_recovered(n, period):
    e = fourier_spectrum(planted(n, period))
    shares = energy_shares(e)
    assert periods(n)[int(shares.argmax())] == pytest.approx(period)
    assert float(shares.max()) == pytest.approx(1.0, abs=1e-5)


def test_a_planted_period_is_recovered_under_noise_and_an_offset():
    gen = torch.Generator().manual_seed(0)
    n, hits = 100, 0
    for _ in range(20):
        x = planted(n, 5, amp=1.0) + 7.0 + 0.5 * torch.randn(n, generator=gen, dtype=torch.float64)
        e = fourier_spectrum(x)
        hits += periods(n)[int(energy_shares(e).argmax())] == 5
        assert float(e[0]) > float(e[1:].sum())  # the offset is the mean's energy, left out of the shares
    assert hits == 20
    # two periods planted, 2 and 10: both carry their share, nothing else does
    x = planted(10, 10, amp=2.0) + planted(10, 2, amp=1.0, phase=0.0) + 3.0
    s = energy_shares(fourier_spectrum(x))
    assert float(s[0]) > 0.6 and float(s[4]) > 0.2 and float(s[0] + s[4]) == pytest.approx(1.0, abs=1e-5)


def test_energies_add_up_to_the_sum_of_squares():
    x = torch.randn(3, 7, 11)
    torch.testing.assert_close(fourier_spectrum(x).sum(-1), (x ** 2).sum(-1), rtol=1e-4, atol=1e-4)
    x = torch.randn(5, 10)
    torch.testing.assert_close(fourier_spectrum(x).sum(-1), (x ** 2).sum(-1), rtol=1e-4, atol=1e-4)
    assert energy_shares(fourier_spectrum(torch.full((10,), 4.0))).abs().max() < 1e-6  # a constant has no period
    with pytest.raises(ValueError, match="at least 2"):
        fourier_spectrum(torch.ones(1))


def test_number_tokens_of_a_digit_tokenizer(tokenizer):
    toks = number_tokens(tokenizer, "1 + 2 = ")
    assert len(toks) == 10 and toks == [tokenizer("1 + 2 = " + str(d)).input_ids[-1] for d in range(10)]


def test_direct_number_effects_add_up_to_the_number_logits(tiny_llama, tokenizer):
    """Every head, every MLP and the embedding's direct effects sum to the model's own logits of the number tokens
    (a plain forward pass), minus the unembedding bias."""
    model = tiny_llama
    pairs = mixed_pairs(tokenizer, 3)
    toks = number_tokens(tokenizer, pairs[0].reference)
    L, H = model.cfg.n_layers, model.cfg.n_heads
    comps = [Component("head", l, h) for l in range(L) for h in range(H)] + [Component.mlp(l) for l in range(L)]
    eff = direct_number_effects(model, pairs, comps, toks)
    assert eff.shape == (len(comps), 3, 10)
    for p, pair in enumerate(pairs):
        got = {}
        logits = model.run_with_hooks(torch.tensor([pair.reference_token_ids]), fwd_hooks=[
            ("hook_embed", lambda a, hook: got.__setitem__("embed", a[0, -1])),
            ("ln_final.hook_scale", lambda a, hook: got.__setitem__("scale", a[0, -1]))])[0, -1]
        embed = (got["embed"] / got["scale"]) @ model.W_U[:, toks]
        b_U = model.b_U[toks] if getattr(model, "b_U", None) is not None else 0
        torch.testing.assert_close(eff[:, p].sum(0) + embed + b_U, logits[toks], atol=1e-4, rtol=1e-4)
    # one head by hand: its z at END through W_O, over the final scale, on the number columns
    _, cache = model.run_with_cache(torch.tensor([pairs[1].reference_token_ids]))
    z = cache[get_act_name("z", 1)][0, -1, 2]
    by_hand = (z @ model.W_O[1, 2] / cache["ln_final.hook_scale"][0, -1]) @ model.W_U[:, toks]
    torch.testing.assert_close(eff[comps.index(Component("head", 1, 2)), 1], by_hand, atol=1e-5, rtol=1e-4)


def test_number_spectra_and_bad_input(tiny_llama, tokenizer):
    pairs = mixed_pairs(tokenizer, 2)
    view = number_spectra(tiny_llama, pairs, [Component.mlp(1), Component("head", 2, 0)])
    assert view.energy.shape == (2, 6) and view.numbers == list(range(10))
    torch.testing.assert_close(view.shares().sum(-1), torch.ones(2))
    assert all(set(p) <= set(view.periods) for p in view.dominant(0.9).values())
    with pytest.raises(ValueError, match="outside this model"):
        direct_number_effects(tiny_llama, pairs, [Component.mlp(9)], [1, 2])
    with pytest.raises(ValueError, match="numbers must lie"):
        number_spectra(tiny_llama, pairs, [Component.mlp(1)], numbers=11)


def test_change_digit_keeps_the_other_digit_of_the_sum():
    rng = random.Random(0)
    for a, b in sample_problems(200, seed=1):
        for d in DIGITS:
            a2, b2 = change_digit(a, b, d, rng)
            assert (a2 == a) != (b2 == b) and 10 <= a2 + b2 <= 99 and min(a2, b2) >= 10
            changed = (a, a2) if a2 != a else (b, b2)
            same = (lambda x: x // 10) if d == "units" else (lambda x: x % 10)
            assert same(changed[0]) == same(changed[1])  # the operand's other digit is kept
            other = (lambda s: s // 10) if d == "units" else (lambda s: s % 10)
            assert other(a + b) == other(a2 + b2) and a + b != a2 + b2
    with pytest.raises(ValueError, match="n_problems"):
        sample_problems(0)


def test_digit_effects_equal_the_plain_loop(tiny_llama, tokenizer):
    model = tiny_llama
    probs = digit_problems(tokenizer, sample_problems(5, seed=2), EQUATION_PREFIX, seed=0)
    assert probs.reference.shape[0] == 5 and probs.answer.shape == (5, 2)
    neurons = [Neuron(0, 3), Neuron(1, 50), Neuron(1, 7), Neuron(2, 90)]
    ours = digit_effects(model, probs, neurons, rows=10)  # 2 neurons per pass: chunks and layers mixed
    ref = probs.reference
    clean = model(ref)
    pos = probs.tens_pos
    rows = torch.arange(5)
    for j, n in enumerate(neurons):
        for d, digit in enumerate(DIGITS):
            _, cache = model.run_with_cache(probs.counterfactual[digit])
            cf = cache[get_act_name("post", n.layer)]

            def hook(act, hook):
                act[:, :, n.index] = cf[:, :, n.index]
                return act
            patched = model.run_with_hooks(ref, fwd_hooks=[(get_act_name("post", n.layer), hook)])
            diff = patched - clean
            units = diff[rows, pos + 1, probs.answer[:, 1]]
            tens = diff[rows, pos, probs.answer[:, 0]]
            torch.testing.assert_close(ours[j, d, 0], units, atol=1e-4, rtol=1e-4)
            torch.testing.assert_close(ours[j, d, 1], tens, atol=1e-4, rtol=1e-4)
    assert ours.abs().max() > 1e-3
    acc = answer_accuracy(model, probs)
    assert acc.shape == (5,) and set(acc.tolist()) <= {0.0, 1.0}


def test_digit_labels_on_planted_effects():
    e = torch.zeros(4, 2, 2, 3)
    e[0, 0, 0] = -2.0  # units changes move the units logit only
    e[1, 1, 1] = 1.5  # tens changes move the tens logit only
    e[2, 0, 0], e[2, 1, 1] = 1.0, 0.9  # both alike
    e[3, 0, 0] = 0.01  # almost nothing
    assert digit_labels(e) == ["units", "tens", "both", "none"]
    units, tens, score = digit_scores(e)
    assert float(score[0]) == 1.0 and float(score[1]) == -1.0 and abs(float(score[2])) < 0.1


def test_a_trend_and_a_wave_both_land_on_the_longest_period_and_the_ramp_share_tells_them_apart():
    from circuits.explain.fourier import NumberSpectra

    t = torch.arange(10, dtype=torch.float32)
    ramp, wave = t * 0.5 + 2.0, torch.cos(2 * math.pi * (t - 4.5) / 10)  # the wave is symmetric about the middle
    effects = torch.stack([ramp.expand(4, 10), wave.expand(4, 10)]) + 0.0
    view = NumberSpectra([Component.mlp(0), Component("head", 0, 1)], list(range(10)), list(range(10)), effects,
                         fourier_spectrum(effects).mean(1), [0, 3, -1, 9])
    assert view.dominant(0.5) == {"MLP0": [10.0], "0.1": [10.0]}
    r = view.ramp_share()
    assert float(r[0]) == pytest.approx(1.0, abs=1e-5) and float(r[1]) == pytest.approx(0.0, abs=1e-5)


def test_kind_intervals_hold_the_estimate(tiny_llama, tokenizer):
    view = number_spectra(tiny_llama, mixed_pairs(tokenizer, 4), [Component.mlp(1), Component.mlp(2),
                                                                   Component("head", 2, 0)])
    got = view.kind_share_intervals(n_boot=200)
    assert set(got) == {"mlp", "head"}
    for share, low, high in got.values():
        assert share.shape == low.shape == (5,) and bool((low <= high + 1e-6).all())
        assert float(share.sum()) == pytest.approx(1.0, abs=1e-5)


def test_numbers_config_refuses_bad_values_in_one_line():
    from circuits.explain.numbers.config import NumbersConfig

    for kw, msg in (({"n_heads": 0, "n_mlps": 0}, "no component"), ({"numbers": 1}, "numbers must be"),
                    ({"digit_floor": 1.5}, "--digit-floor 1.5: must be at most 1"),
                    ({"top_neurons": 0}, "--top-neurons 0: must be at least 1")):
        with pytest.raises(ValueError, match=msg):
            NumbersConfig(**kw)


def test_aligned_puts_each_pairs_answer_at_offset_zero():
    from circuits.explain.fourier import NumberSpectra

    effects = torch.zeros(1, 3, 10)
    for p, a in enumerate((2, 7, 4)):
        effects[0, p, a] = 1.0  # each pair raises its own answer only
    view = NumberSpectra([Component.mlp(0)], list(range(10)), list(range(10)), effects,
                         fourier_spectrum(effects).mean(1), [2, 7, -1])
    got = view.aligned()[0]
    assert int(got.argmax()) == 0 and float(got[0]) == pytest.approx(0.9) and float(got[1]) == pytest.approx(-0.1)


def test_the_figures_geometry():
    from circuits.viz.number_figures import digit_map_figure, fourier_figure

    aligned = torch.tensor([[1.0, -0.5, 0.0, 0.2], [0.01, 0.02, -0.03, 0.0]])
    shares = torch.tensor([[0.7, 0.3], [0.1, 0.9]])
    fig = fourier_figure(aligned, shares, ["20.8", "MLP19"], [0, 1, 2, 3], [4.0, 2.0], "t")
    line, spec = fig.data
    assert line.zmin == -1 and line.zmax == 1 and line.zmid == 0 and line.colorbar.title.text  # each row on its scale
    assert line.z[1][2] == pytest.approx(-1.0) and line.customdata[1][2] == pytest.approx(-0.03)  # hover: logits
    assert list(line.x) == ["answer", "+1", "+2", "+3"] and list(spec.x) == ["4", "2"]
    assert spec.zmin == 0 and spec.zmax == 1 and spec.colorbar.tickformat == ".0%" and "%{z:.1%}" in spec.hovertemplate
    assert line.colorbar.x < 0.5 < spec.colorbar.x  # two colour bars, apart
    titles = [a.text for a in fig.layout.annotations]
    assert len(titles) == 2 and titles[0] != titles[1]
    dm = digit_map_figure(torch.tensor([0.5, 0.0]), torch.tensor([0.1, 0.4]), ["L1 N2", "L1 N3"], ["units", "tens"], "d")
    (h,) = dm.data
    assert h.zmin == 0 and list(h.y) == ["L1 N2 (units)", "L1 N3 (tens)"] and h.colorbar.title.text
    assert h.z[0] == [0.5, pytest.approx(0.1)] and "%{z:.3f}" in h.hovertemplate


def test_greedy_answers_equal_a_plain_generation_loop(tiny_llama, tokenizer):
    import dataclasses

    from circuits.explain.digits import greedy_answers

    probs = digit_problems(tokenizer, sample_problems(5, seed=3), EQUATION_PREFIX)
    x, got = probs.reference[:, :-1], []
    for _ in range(2):
        nxt = tiny_llama(x)[:, -1].argmax(-1)
        got.append(nxt)
        x = torch.cat([x, nxt[:, None]], 1)
    plain = torch.stack(got, 1)
    assert torch.equal(greedy_answers(tiny_llama, probs, batch_size=2), plain)
    right = dataclasses.replace(probs, answer=plain.clone())
    right.answer[0, 1] += 1  # one problem's units digit wrong
    assert answer_accuracy(tiny_llama, right).tolist() == [0.0, 1.0, 1.0, 1.0, 1.0]


# -- the nulls a share is read against (issue 43) ---------------------------------------------------------------------

@pytest.mark.parametrize("n", [10, 7, 12])
def test_chance_shares_equal_a_monte_carlo_of_white_noise_on_the_same_line(n):
    from circuits.explain.fourier import chance_shares

    noise = torch.randn(20000, n, generator=torch.Generator().manual_seed(n), dtype=torch.float64)
    mc = energy_shares(fourier_spectrum(noise).double()).mean(0)  # each signal's own shares, averaged
    got = chance_shares(n)
    assert got.shape == (n // 2,) and float(got.sum()) == pytest.approx(1.0, abs=1e-6)
    assert torch.allclose(got.double(), mc, atol=0.006), (got, mc)
    if n == 10:  # the reviewer's numbers: 2/9 to periods 10, 5, 3.33, 2.5 and 1/9 to period 2 -- not 1/5 each
        assert [round(float(x), 4) for x in got] == [0.2222, 0.2222, 0.2222, 0.2222, 0.1111]


def _dft_energy(x: list[float]) -> list[float]:
    """The energy of ``x`` at k = 1 .. n // 2 by the DFT's definition, written out (conjugate pairs counted twice)."""
    n = len(x)
    out = []
    for k in range(1, n // 2 + 1):
        re = sum(v * math.cos(2 * math.pi * k * t / n) for t, v in enumerate(x))
        im = sum(v * math.sin(2 * math.pi * k * t / n) for t, v in enumerate(x))
        out.append((re * re + im * im) / n * (1 if 2 * k == n else 2))
    return out


@pytest.mark.parametrize("n", [10, 9])
def test_trend_shares_equal_a_hand_computed_dft_of_a_straight_line(n):
    from circuits.explain.fourier import trend_shares

    e = _dft_energy([3.0 - 0.7 * t for t in range(n)])  # any slope and offset: the same shares
    want = torch.tensor([v / sum(e) for v in e])
    got = trend_shares(n)
    assert torch.allclose(got, want.float(), atol=1e-6)
    if n == 10:
        assert f"{float(got[0]):.3f}" == "0.635"  # more than the key MLPs' 52% at period 10


def _view(shares_by_component: list[list[float]], kinds: list[str]):
    """A NumberSpectra whose components have exactly the given period shares on ten points (energy set directly)."""
    from circuits.explain.fourier import NumberSpectra

    comps = [Component("head", 0, i) if k == "head" else Component.mlp(i) for i, k in enumerate(kinds)]
    energy = torch.tensor([[1.0, *row] for row in shares_by_component])
    return NumberSpectra(comps, list(range(10)), list(range(10)), torch.zeros(len(comps), 1, 10), energy, [0])


def test_component_intervals_resample_the_components_not_the_pairs():
    heads = [[0.6, 0.1, 0.1, 0.1, 0.1], [0.2, 0.2, 0.2, 0.2, 0.2], [0.4, 0.3, 0.1, 0.1, 0.1]]
    mlps = [[0.7, 0.1, 0.1, 0.05, 0.05], [0.7, 0.1, 0.1, 0.05, 0.05]]
    view = _view(heads + mlps, ["head"] * 3 + ["mlp"] * 2)
    got = view.component_share_intervals(n_boot=2000)
    share, low, high = got["head"]
    assert float(share[0]) == pytest.approx(0.4) and float(low[0]) == pytest.approx(0.2, abs=1e-6)
    assert float(high[0]) == pytest.approx(0.6, abs=1e-6)  # all three draws of one head are among 2000 resamples
    share, low, high = got["mlp"]  # identical MLPs: no spread across them
    assert float(low[0]) == float(high[0]) == pytest.approx(0.7)
    diff, lo, hi, p = view.kind_difference(n_boot=2000)
    assert float(diff[0]) == pytest.approx(0.3) and float(lo[0]) == pytest.approx(0.1, abs=1e-6) and p[0] < 0.01
    assert float(diff[1]) == pytest.approx(-0.1) and p[1] > 0.05  # the heads' 0.1 .. 0.3 straddles the MLPs' 0.1
    assert _view(heads, ["head"] * 3).kind_difference() is None


def test_the_numbers_summary_and_table_carry_the_nulls(tiny_llama, tokenizer, tmp_path):
    import _tables as T
    import fig_fourier

    from circuits.explain.fourier import chance_shares, trend_shares
    from circuits.explain.numbers.config import NumbersConfig
    from circuits.explain.numbers.result import NumbersResult

    view = number_spectra(tiny_llama, mixed_pairs(tokenizer, 4), [Component.mlp(1), Component.mlp(2),
                                                                   Component("head", 2, 0), Component("head", 1, 1)])
    r = NumbersResult(NumbersConfig(model=tiny_llama.cfg.model_name, digits=False), view)
    s = r.summary()
    assert list(s["chance_shares"].values()) == pytest.approx(chance_shares(10).tolist())
    assert list(s["trend_shares"].values()) == pytest.approx(trend_shares(10).tolist())
    assert set(s["by_kind_component_ci"]) == {"head", "mlp"} and set(s["mlp_minus_head"]) == set(s["chance_shares"])
    r.save(tmp_path / "n")
    back = NumbersResult.load(tmp_path / "n")
    assert back.summary()["by_kind_component_ci"] == s["by_kind_component_ci"]
    header, rows = T.fourier_periods(fig_fourier.published(back)["fourier_periods"]["data"])
    assert rows[2] == ["white noise on the 10 numbers (chance)", "22.2%", "22.2%", "22.2%", "22.2%", "11.1%"]
    assert rows[3][0] == "a straight trend over 0..9" and rows[3][1] == "63.5%"
    assert rows[0][0] == "key heads (over pairs; over the 2 heads)" and rows[4][0].startswith("key MLPs minus key heads")
    from circuits.viz.analysis_sections import _numbers_text  # the report's section shows the same nulls

    html = _numbers_text(back)
    assert "<td>white noise (chance)</td><td>22.2%</td>" in html and "<td>a straight trend</td><td>63.5%</td>" in html
