"""The carry study (issue 42): each measurement against a plain computation written here (Python sets and sorts, a
Monte Carlo of random sets, one ``run_with_hooks`` per patched prompt), its nulls present, and the result loading back
equal."""

from __future__ import annotations

import random

import pytest
import torch

from circuits.beyond.carry.config import CarryConfig
from circuits.beyond.carry.job import carry_pairs, circuits_across, grid_prompts, run
from circuits.beyond.carry.measures import (carry_directions, component_names, end_residuals, flip_tops, overlap, p_at_least, random_directions, random_jaccard)
from circuits.beyond.carry.result import POSITIONS, CarryResult
from circuits.data.answers import at_answer_position
from circuits.models.backend import act_name
from circuits.patching.circuit_curves import circuit_curve
from circuits.patching.core.uncertainty import resample_pairs
from circuits.results import load_result

FAST = dict(filter_correct=False, n_boot=20, n_splits=10, n_random=3)


def _plain_top(mean: list[float], k: int) -> set[int]:
    return set(sorted(range(len(mean)), key=lambda i: (-abs(mean[i]), i))[:k])


def _plain_jaccard(a: set[int], b: set[int]) -> float:
    return len(a & b) / len(a | b)


def test_overlap_equals_plain_sets_and_its_bootstrap():
    g = torch.Generator().manual_seed(1)
    at0, at1 = torch.randn(30, 12, generator=g), torch.randn(30, 12, generator=g)
    at1[:5] += 3.0  # five components strong at END + 1 only
    at0[3:8] -= 3.0  # five strong at END (two of them shared)
    o = overlap(at0, at1, 6, n_boot=50, n_splits=20, seed=4)
    m0, m1 = at0.mean(1).tolist(), at1.mean(1).tolist()
    assert set(o["top_end"]) == _plain_top(m0, 6) and set(o["top_next"]) == _plain_top(m1, 6)
    assert o["jaccard"] == pytest.approx(_plain_jaccard(_plain_top(m0, 6), _plain_top(m1, 6)))
    draws = torch.tensor([_plain_jaccard(_plain_top(at0[:, i].mean(1).tolist(), 6),
                                         _plain_top(at1[:, i].mean(1).tolist(), 6))
                          for i in resample_pairs(12, 50, 4)], dtype=torch.float64)
    assert o["low"] == pytest.approx(float(draws.quantile(0.025)))
    assert o["high"] == pytest.approx(float(draws.quantile(0.975))) and o["low"] < o["high"]
    # The same effects at both positions: one set, and a split half agrees across as much as within.
    same = overlap(at0, at0.clone(), 6, n_boot=10, n_splits=20)
    assert same["jaccard"] == 1.0 and same["split_half"]["gap"] == pytest.approx(0.0)
    with pytest.raises(ValueError, match="one shape"):
        overlap(at0, at1[:, :5], 6)


def test_random_jaccard_is_the_monte_carlo_of_random_sets():
    n, k = 40, 8
    null = random_jaccard(n, k)
    rng = random.Random(0)
    mc = [_plain_jaccard(set(rng.sample(range(n), k)), set(rng.sample(range(n), k))) for _ in range(20000)]
    assert null["mean"] == pytest.approx(sum(mc) / len(mc), abs=0.004)
    assert sum(null["probs"]) == pytest.approx(1.0)
    obs = 3 / 13  # three shared of eight
    assert p_at_least(null, obs) == pytest.approx(sum(v >= obs - 1e-12 for v in mc) / len(mc), abs=0.01)
    assert null["low"] <= null["mean"] <= null["high"]
    with pytest.raises(ValueError, match="k must lie"):
        random_jaccard(5, 6)


def test_carry_directions_equal_plain_means_and_separation():
    g = torch.Generator().manual_seed(2)
    resid = torch.randn(3, 20, 6, generator=g)
    carry = torch.tensor([i % 3 == 0 for i in range(20)])
    resid[1, carry, 0] += 5.0  # layer 1 separates along axis 0
    dirs, sep = carry_directions(resid, carry)
    for l in range(3):
        ones = [resid[l, i] for i in range(20) if carry[i]]
        rest = [resid[l, i] for i in range(20) if not carry[i]]
        d = sum(ones) / len(ones) - sum(rest) / len(rest)
        assert torch.allclose(dirs[l], d, atol=1e-5)
        u = d / d.norm()
        p1, p0 = [float(x @ u) for x in ones], [float(x @ u) for x in rest]
        mean = lambda v: sum(v) / len(v)  # noqa: E731
        ss = sum((x - mean(p1)) ** 2 for x in p1) + sum((x - mean(p0)) ** 2 for x in p0)
        assert float(sep[l]) == pytest.approx((mean(p1) - mean(p0)) / (ss / (len(p1) + len(p0) - 2)) ** 0.5, rel=1e-4)
    assert int(sep.argmax()) == 1
    with pytest.raises(ValueError, match="both classes"):
        carry_directions(resid, torch.ones(20, dtype=torch.bool))


def _plain_top_after_adding(model, ids: list[int], layer: int, vector: torch.Tensor) -> int:
    """One prompt, unpadded, the vector added at its last position after block ``layer``: its top token there."""
    def hook(x, hook):
        x = x.clone()
        x[0, -1] += vector
        return x

    logits = model.run_with_hooks(torch.tensor([ids]), fwd_hooks=[(act_name("resid_post", layer), hook)])
    return int(logits[0, -1].argmax())


def test_flip_tops_equals_one_run_with_hooks_per_prompt_and_direction(tiny_llama, tokenizer):
    model = tiny_llama
    grid = grid_prompts(tokenizer, "3 + 5 = 8\n")
    chosen = [grid[i] for i in (3, 47, 88, 99, 10)]
    width = max(len(p.reference_token_ids) for p in chosen)
    tokens = torch.tensor([list(p.reference_token_ids) + [0] * (width - len(p.reference_token_ids)) for p in chosen])
    ends = torch.tensor([p.end for p in chosen])
    signs = torch.tensor([1.0, -1.0, 1.0, -1.0, 1.0])
    norm = float(model.W_E.norm(dim=-1).mean()) * 20  # large enough that some tops move
    dirs = torch.cat([torch.zeros(1, model.cfg.d_model), random_directions(3, model.cfg.d_model, norm, seed=5)])
    fast = flip_tops(model, tokens, ends, 1, dirs, signs, batch_size=7)
    plain = torch.tensor([[_plain_top_after_adding(model, list(p.reference_token_ids), 1, dirs[i] * signs[j])
                           for j, p in enumerate(chosen)] for i in range(len(dirs))])
    assert torch.equal(fast, plain)
    _, unpatched = end_residuals(model, tokens, ends)
    assert torch.equal(fast[0], unpatched)  # the zero direction changes nothing
    assert (fast[1:] != unpatched).any()  # and the others do move something: the comparison can fail
    assert torch.allclose(random_directions(3, 16, 2.5).norm(dim=-1), torch.full((3,), 2.5))


def test_end_residuals_equal_the_cache(tiny_llama, tokenizer):
    grid = grid_prompts(tokenizer, "")[:4]
    tokens = torch.tensor([list(p.reference_token_ids) for p in grid])
    resid, tops = end_residuals(tiny_llama, tokens, torch.tensor([p.end for p in grid]), batch_size=3)
    logits, cache = tiny_llama.run_with_cache(tokens)
    for l in range(tiny_llama.cfg.n_layers):
        assert torch.allclose(resid[l], cache[act_name("resid_post", l)][:, -1], atol=1e-5)
    assert torch.equal(tops, logits[:, -1].argmax(-1))


def test_carry_pairs_change_the_carry_and_keep_token_counts(tokenizer):
    grid = grid_prompts(tokenizer, "3 + 5 = 8\n")
    assert len(grid) == 100 and sum(len(p.answer_ids) == 2 for p in grid) == 45
    pairs = carry_pairs(tokenizer, grid, torch.ones(100, dtype=torch.bool), "3 + 5 = 8\n", 0)
    assert len(pairs) == 45
    for p in pairs:
        a, b, s = p.operands
        c = int(p.counterfactual.rsplit("+ ", 1)[1].split(" ")[0])
        assert s == a + b >= 10 and a + c <= 9 and len(p.answer_ids) == 2
        assert len(p.reference_token_ids) == len(p.counterfactual_token_ids)


@pytest.fixture(scope="module")
def study(tiny_llama, tmp_path_factory):
    out = tmp_path_factory.mktemp("carry") / "carry"
    return run(CarryConfig(model="tiny", **FAST), out, model=tiny_llama, progress=False), out


def test_the_study_loads_back_equal_with_its_nulls(study):
    r, out = study
    back = load_result(out)
    assert isinstance(back, CarryResult) and back == r
    o = r.overlap
    assert o["null"]["low"] <= o["null"]["mean"] <= o["null"]["high"] and 0 <= o["p_random"] <= 1
    assert o["low"] <= o["high"] and {"within_end", "within_next", "across", "gap_low"} <= set(o["split_half"])
    assert set(r.curves) == {f"{by}@{at}" for by in (*POSITIONS, "random") for at in POSITIONS}
    for at in POSITIONS:
        assert set(r.across["margins"][at]) == {next(p for p in POSITIONS if p != at), "random"}
    d = r.direction
    assert d["random"]["n"] == 3 and len(d["random"]["rates"]) == 3 and d["flip"]["n"] == len(d["eligible"])
    assert len(d["random"]["add_rates"]) == len(d["random"]["subtract_rates"]) == 3
    assert set(d["eligible"]) <= set(d["test_cells"]) and not set(d["fit_cells"]) & set(d["test_cells"])
    assert r.effects.shape == (2, 3 * 4 + 3, len(r.pairs)) and r.separation.shape == (2, 3)
    # measurement 2: a line and a row a position, and END + 1 on the two-digit cells alone
    assert len(r.lines()) == 9 and len(r.table_rows()) == 11
    fo = r.fourier  # the tiny Llama has no post-norms: the Fourier view is measured
    assert {"end", "next", "chance", "low", "high", "p"} <= set(fo) and len(fo["end"]["per_component"]) == r.config.top_k


def test_the_held_out_curves_equal_circuit_curve_on_the_other_half(study, tiny_llama, tokenizer):
    r, _ = study
    rank, score = r.across["rank_pairs"], r.across["score_pairs"]
    assert not set(rank) & set(score) and sorted(rank + score) == list(range(len(r.pairs)))
    L, H = 3, 4
    ranking = r.effects[0][:, rank].mean(1).abs()  # found at END on one half ...
    scored = at_answer_position([r.pairs[i] for i in score], 1, tokenizer)  # ... scored at END + 1 on the other
    c = circuit_curve(tiny_llama, scored, heads=ranking[: L * H].reshape(L, H), mlps=ranking[L * H:], n_boot=20,
                      count="floor")
    assert c.cmd == pytest.approx(r.curves["end@next"].cmd, abs=1e-6)
    assert torch.allclose(c.m, r.curves["end@next"].m, atol=1e-5)
    again, _ = circuits_across(tiny_llama, r.pairs, r.effects, r.config)
    assert again["end@end"].cmd == r.curves["end@end"].cmd and torch.equal(again["end@end"].m, r.curves["end@end"].m)


def test_the_direction_flip_rate_equals_a_plain_loop(study, tiny_llama):
    r, _ = study
    d, model = r.direction, tiny_llama
    grid = grid_prompts(model.tokenizer, r.config.prefix)
    one = next(p.answer_ids[0] for p in grid if p.operands[2] == 10)
    resid = {i: model.run_with_cache(torch.tensor([grid[i].reference_token_ids]))[1] for i in d["fit_cells"]}
    name = act_name("resid_post", d["layer"])
    carry = [i for i in d["fit_cells"] if grid[i].operands[2] >= 10]
    rest = [i for i in d["fit_cells"] if grid[i].operands[2] < 10]
    mean = lambda cells: sum(resid[i][name][0, -1] for i in cells) / len(cells)  # noqa: E731
    direction = mean(carry) - mean(rest)
    assert float(direction.norm()) == pytest.approx(d["norm"], rel=1e-4)
    flips = []
    for i in d["eligible"]:
        is_carry = grid[i].operands[2] >= 10
        top = _plain_top_after_adding(model, list(grid[i].reference_token_ids), d["layer"],
                                      -direction if is_carry else direction)
        flips.append((top == one) != is_carry)
    assert d["flip"]["n"] == len(flips)
    if flips:
        assert d["flip"]["rate"] == pytest.approx(sum(flips) / len(flips))


def test_the_fourier_view_reads_each_position_s_own_components_there(study, tiny_llama, tokenizer):
    from circuits.beyond.carry.job import components_of
    from circuits.beyond.carry.measures import beyond_trend_shares
    from circuits.explain.fourier import number_spectra

    r, _ = study
    names = component_names(3, 4)
    for k, (key, pos) in enumerate((("top_end", "end"), ("top_next", "next"))):
        comps = components_of(tiny_llama, r.overlap[key])
        assert [str(c) for c in comps] == [names[i] for i in r.overlap[key]]
        forced = at_answer_position(r.pairs, k, tokenizer)
        assert all(p.end == q.end + k for p, q in zip(forced, r.pairs))
        effects = number_spectra(tiny_llama, forced, comps, numbers=10).effects
        expected = beyond_trend_shares(effects).double().mean(1)
        assert torch.allclose(torch.tensor(r.fourier[pos]["per_component"], dtype=torch.float64), expected, atol=1e-6)


def _planted_grid(tokenizer):
    from circuits.beyond.carry.neurons import forced_grid

    return forced_grid(grid_prompts(tokenizer, "3 + 5 = 8\n"), 0)


def test_rule_families_and_shares_on_planted_neurons(tokenizer):
    """A neuron that is high where a + b >= 10 is a threshold, one high where (a + b) mod 10 == 3 a residue, one high
    where a == b another rule, noise none; the shares are the plain counts with their Wilson intervals."""
    from circuits.beyond.carry.neurons import classify_grid, family_shares, rule_family
    from circuits.explain.heuristics.nulls import fisher_p, rate
    from circuits.explain.heuristics.rules import classify

    grid = _planted_grid(tokenizer)
    a, b, c = grid.a, grid.b, grid.result
    g = torch.Generator().manual_seed(0)
    noise = lambda: 0.01 * torch.randn(100, generator=g)  # noqa: E731
    acts = torch.stack([(c >= 10).float() + noise(), (c % 10 == 3).float() + noise(), (a == b).float() + noise(),
                        torch.randn(100, generator=g), -(c >= 12).float() + noise()])
    fitted = classify_grid(acts, grid)
    fams = [rule_family(f) for f in fitted]
    assert fams == ["threshold", "residue", "other", "none", "threshold"]
    two = c >= 10  # on the two-digit cells a residue mod 10 is one value of the sum, named as an identity
    units = classify(((c % 10 == 3).float() + noise())[None, two], a[two], b[two], c[two])
    assert units[0].primary[0].kind == "identity" and rule_family(units[0]) == "other"
    assert rule_family(units[0], identity_is_residue=True) == "residue"
    shares = family_shares({"top": fams[:3] + fams[4:], "random": fams[2:4]})
    assert shares["threshold"]["top"] == rate(2, 4) and shares["residue"]["top"] == rate(1, 4)
    assert shares["threshold"]["random"] == rate(0, 2) and shares["classified"]["random"] == rate(1, 2)
    assert shares["threshold"]["p_top_vs_random"] == pytest.approx(fisher_p(2, 4, 0, 2))
    assert shares["residue"]["top"]["low"] < 0.25 < shares["residue"]["top"]["high"]


def test_measurement_2_equals_a_plain_computation(study, tiny_llama, tokenizer):
    """Per position: the key MLPs are the top by absolute mean effect, the top neurons those of the exact neuron sweep
    sorted plainly, the activations one run_with_cache per cell with the answer's first token appended at END + 1, and
    the families and shares those of the classifier on them."""
    from circuits.beyond.carry.neurons import rule_family
    from circuits.explain.heuristics.rules import classify
    from circuits.explain.heuristics.nulls import rate
    from circuits.patching.engines.neuron_sweep import sweep_neurons

    r, _ = study
    nu, model = r.neurons, tiny_llama
    grid = grid_prompts(tokenizer, r.config.prefix)
    for k, at in enumerate(POSITIONS):
        mlp_mean = r.effects[k][3 * 4:].mean(1).abs().tolist()
        assert nu[at]["mlps"] == sorted(range(3), key=lambda l: (-mlp_mean[l], l))[: r.config.neuron_mlps]
        s = sweep_neurons(model, at_answer_position(r.pairs, k, tokenizer), r.config.mode, layers=nu[at]["mlps"],
                          prob=False).scores("logit_diff").by_layer()
        top = []
        for l in nu[at]["mlps"]:  # logit_diff: a drop is important
            top += [[l, i] for i in sorted(range(len(s[l])), key=lambda i: (float(s[l][i]), i))[: r.config.neurons_per_mlp]]
        assert [e["neuron"] for e in nu[at]["top"]] == top
        everyone = [e["neuron"] for e in nu[at]["top"] + nu[at]["random"]]
        assert len(nu[at]["random"]) == r.config.null_neurons * len(nu[at]["mlps"])
        assert not {tuple(n) for n in top} & {tuple(e["neuron"]) for e in nu[at]["random"]}
        plain = torch.zeros(len(everyone), len(grid))
        for j, p in enumerate(grid):
            tokens = list(p.reference_token_ids) + list(p.answer_ids[:k])
            _, cache = model.run_with_cache(torch.tensor([tokens]))
            for i, (l, n) in enumerate(everyone):
                plain[i, j] = cache[act_name("post", l)][0, -1, n]
        assert torch.allclose(r.grid_activations[at], plain, atol=1e-5)
        a = torch.tensor([p.operands[0] for p in grid])
        b = torch.tensor([p.operands[1] for p in grid])
        fams = [rule_family(f) for f in classify(plain, a, b, a + b)]
        assert [e["family"] for e in nu[at]["top"] + nu[at]["random"]] == fams
        n_top = len(top)
        for fam in ("threshold", "residue"):
            assert nu[at]["shares"][fam]["top"] == rate(fams[:n_top].count(fam), n_top)
            assert nu[at]["shares"][fam]["random"] == rate(fams[n_top:].count(fam), len(fams) - n_top)
        if k == 1:  # the 45 two-digit cells alone, an identity of the sum counted as a residue there
            two = [j for j, p in enumerate(grid) if p.operands[2] >= 10]
            fams2 = [rule_family(f, identity_is_residue=True) for f in classify(plain[:, two], a[two], b[two], (a + b)[two])]
            assert nu[at]["two_digit"]["n_cells"] == 45
            assert nu[at]["two_digit"]["shares"]["residue"]["top"] == rate(fams2[:n_top].count("residue"), n_top)
            assert [e["two_digit"]["family"] for e in nu[at]["top"] + nu[at]["random"]] == fams2


def test_bad_input_is_one_line(tiny_llama, tmp_path, monkeypatch):
    with pytest.raises(ValueError, match="end it with a newline"):
        CarryConfig(prefix="3 + 5 = 8")
    with pytest.raises(ValueError, match="two-digit sums are answered"):  # a random model answers none
        run(CarryConfig(model="tiny", filter_correct=True), tmp_path / "c", model=tiny_llama, progress=False)
    assert not (tmp_path / "c").exists()
    # a layer past the model is refused before any patching (it was found only after the sweep, at the direction)
    import circuits.beyond.carry.job as job
    def no_work(*a, **k):
        raise AssertionError("the study ran")
    monkeypatch.setattr(job, "carry_study", no_work)
    n = tiny_llama.cfg.n_layers
    with pytest.raises(ValueError, match=rf"--direction-layer {n}: must be at most {n - 1} \(the model's last layer"):
        run(CarryConfig(model="tiny", direction_layer=n), tmp_path / "d", model=tiny_llama, progress=False)
    assert not (tmp_path / "d").exists()


def test_beyond_trend_shares_against_a_plain_least_squares_and_fft():
    from circuits.beyond.carry.measures import beyond_trend_chance, beyond_trend_shares

    t = torch.arange(10, dtype=torch.float64)
    assert float(beyond_trend_shares(3 * t + 2)) == pytest.approx(0.0, abs=1e-9)  # a straight line: nothing beyond
    wave = torch.cos(2 * torch.pi * (t - 4.5) / 5)  # period 5, symmetric about the middle (orthogonal to the trend)
    assert float(beyond_trend_shares(wave)) == pytest.approx(1.0, abs=1e-6)
    g = torch.Generator().manual_seed(3)
    x = torch.randn(7, 10, generator=g, dtype=torch.float64)
    for row, share in zip(x, beyond_trend_shares(x)):
        c = row - row.mean()
        A = torch.stack([torch.ones(10, dtype=torch.float64), t], 1)
        fit = A @ torch.linalg.lstsq(A, row[:, None]).solution[:, 0]
        rest = row - fit
        F = torch.fft.fft(rest)
        energy = sum(2 * float(F[k].abs() ** 2) / 10 for k in (1, 2))  # periods 10 and 5, both conjugate halves
        assert float(share) == pytest.approx(energy / float((c ** 2).sum()), rel=1e-4)
    chance = beyond_trend_chance(10)
    assert 0.3 < chance < 0.45  # about (4 - 0.6) / 9 of the degrees of freedom the mean leaves, minus the trend's
    with pytest.raises(ValueError, match="not periods"):
        beyond_trend_shares(x, periods=(3,))


def test_fourier_contrast_reads_a_planted_difference():
    from circuits.beyond.carry.measures import fourier_contrast

    t = torch.arange(10, dtype=torch.float64)
    g = torch.Generator().manual_seed(0)
    trend = t[None, None] + 0.1 * torch.randn(5, 8, 10, generator=g, dtype=torch.float64)
    waves = torch.cos(2 * torch.pi * t / 10)[None, None] + 0.1 * torch.randn(5, 8, 10, generator=g, dtype=torch.float64)
    c = fourier_contrast(trend.float(), waves.float(), n_boot=200)
    assert c["next"]["share"] > 0.5 > c["end"]["share"] and c["low"] > 0 and c["p"] < 0.05
    assert len(c["end"]["per_component"]) == 5 and 0 < c["chance"] < 1


def test_the_numbers_in_docs_results_are_the_saved_smollm2_result():
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    r = load_result(root / "docs" / "data" / "carry_smollm2")
    doc = (root / "docs" / "results.md").read_text()
    section = doc[doc.index("## The carry and the units digit"):doc.index("## What is missing")]
    o, sh, d, fo = r.overlap, r.overlap["split_half"], r.direction, r.fourier
    m = r.across["margins"]
    shown = [f"**{o['jaccard']:.2f}** [{o['low']:.2f}, {o['high']:.2f}]",
             f"{o['null']['mean']:.2f} [{o['null']['low']:.2f}, {o['null']['high']:.2f}], p = {o['p_random']:.1e}",
             f"**{sh['gap']:.2f}** [{sh['gap_low']:.2f}, {sh['gap_high']:.2f}]", f"across {sh['across']:.2f}",
             f"**{m['end']['next']['difference']:+.3f}** [{m['end']['next']['low']:+.3f}, {m['end']['next']['high']:+.3f}]",
             f"**{m['next']['end']['difference']:+.3f}** [{m['next']['end']['low']:+.3f}, {m['next']['end']['high']:+.3f}]",
             f"random ranking's circuit {r.curves['random@end'].cmd:.3f}",
             f"**{d['flip']['rate']:.0%}** [{d['flip']['low']:.0%}, {d['flip']['high']:.0%}] of {d['flip']['n']}",
             f"mean {d['random']['mean']:.0%}, max {d['random']['max']:.0%}", f"layer {d['layer']}, Cohen's d "
             f"{d['separation_fit']:.2f}", f"**{fo['difference']:+.2f}** [{fo['low']:+.2f}, {fo['high']:+.2f}]",
             f"white noise on ten points {fo['chance']:.2f}", f"{r.accuracy['n_pairs']} of the 45 two-digit sums",
             f"{r.seconds:.0f} s the study"]
    nu = r.neurons  # measurement 2, each share as the table prints it

    def share(x):
        return f"{x['rate']:.0%} [{x['low']:.0%}, {x['high']:.0%}] of {x['n']}"

    for at in POSITIONS:
        for fam in ("threshold", "residue"):
            sh = nu[at]["shares"][fam]
            shown += [f"{share(sh['top'])} | {share(sh['random'])}, p = {sh['p_top_vs_random']:.2g}"]
    two = nu["next"]["two_digit"]["shares"]
    shown += [f"{share(two[f]['top'])} | {share(two[f]['random'])}, p = {two[f]['p_top_vs_random']:.2g}"
              for f in ("threshold", "residue")]
    shown += [f"MLPs {nu['end']['mlps'][0]} and {nu['end']['mlps'][1]}", f"MLPs {nu['next']['mlps'][0]} and "
              f"{nu['next']['mlps'][1]}"]
    missing = [s for s in shown if s not in section]
    assert not missing, missing
    g = load_result(root / "docs" / "data" / "carry_gemma3_270m")
    o, sh, d, m = g.overlap, g.overlap["split_half"], g.direction, g.across["margins"]
    shown = [f"**{o['jaccard']:.2f}** [{o['low']:.2f}, {o['high']:.2f}]", f"**{sh['gap']:.2f}** [{sh['gap_low']:.2f}, "
             f"{sh['gap_high']:.2f}]", f"**{m['end']['next']['difference']:+.3f}** [{m['end']['next']['low']:+.3f}, "
             f"{m['end']['next']['high']:+.3f}]", f"**{m['next']['end']['difference']:+.3f}**",
             f"**{d['flip']['rate']:.0%}** [{d['flip']['low']:.0%}, {d['flip']['high']:.0%}] of {d['flip']['n']}",
             f"mean {d['random']['mean']:.0%}, max {d['random']['max']:.0%}", f"{g.seconds:.0f} s the study"]
    for at in POSITIONS:  # Gemma's measurement 2, each share as its table prints it
        for fam in ("threshold", "residue"):
            sh = g.neurons[at]["shares"][fam]
            shown += [f"{share(sh['top'])} | {share(sh['random'])}, p = {sh['p_top_vs_random']:.2g}"]
    two = g.neurons["next"]["two_digit"]["shares"]
    shown += [f"{share(two[f]['top'])} | {share(two[f]['random'])}, p = {two[f]['p_top_vs_random']:.2g}"
              for f in ("threshold", "residue")]
    shown += [f"key MLPs {g.neurons['end']['mlps'][0]} and {g.neurons['end']['mlps'][1]} at END, "
              f"{g.neurons['next']['mlps'][0]} and {g.neurons['next']['mlps'][1]} at END + 1"]
    assert "refused" in g.fourier and not [s for s in shown if s not in section]
