"""Heuristic neurons (Nikankin et al., ICLR 2025): the classifier recovers rules planted in synthetic grids and finds
none in noise; the grid's activations and the class knockout equal plain run_with_cache / run_with_hooks loops on a
tiny model; the job runs end to end, saves and loads back equal; bad input is one line."""

from __future__ import annotations

import pytest
import torch
from transformer_lens.utils import get_act_name

from circuits.beyond.heuristics.config import HeuristicsConfig
from circuits.beyond.heuristics.job import run
from circuits.data.grid import operand_grid
from circuits.explain.heuristics.activations import grid_activations, output_logits, promotion
from circuits.explain.heuristics.causal_check import answer_probs, class_knockout, grid_means, random_like
from circuits.explain.heuristics.rules import Rule, classify, tail_probability
from circuits.results import load_result
from circuits.types import Neuron

V = torch.arange(10)
A, B = V.repeat_interleave(10), V.repeat(10)
C = A + B


def _planted(noise: float = 0.2, seed: int = 0) -> tuple[torch.Tensor, list[str]]:
    g = torch.Generator().manual_seed(seed)
    rules = [("b mod 2 == 1", (B % 2 == 1)), ("a + b in [10, 14]", (C >= 10) & (C <= 14)), ("a == b", A == B),
             ("a in [2, 4]", (A >= 2) & (A <= 4)), ("a + b == 7", C == 7), ("(a + b) mod 10 == 3", C % 10 == 3),
             ("a mod 3 == 0", A % 3 == 0), ("a > b", A > B)]
    acts = torch.stack([m.float() for _, m in rules]) + noise * torch.randn(len(rules), 100, generator=g)
    return acts, [t for t, _ in rules]


def test_the_classifier_recovers_planted_rules():
    acts, texts = _planted()
    fitted = classify(acts, A, B, C)
    kinds = ["modulo", "range", "pattern", "range", "identity", "modulo", "modulo", "pattern"]
    for f, text, kind in zip(fitted, texts, kinds):
        rule, score, polarity = f.primary
        assert rule.text("addition") == text and f.classes[0] == kind and polarity == 1 and score > 0.8


def test_a_rule_the_neuron_is_silent_on_has_polarity_minus_one():
    acts, _ = _planted()
    (f,) = classify(-acts[3:4], A, B, C)  # lowest where a in [2, 4]
    rule, _, polarity = f.primary
    assert rule.text() == "a in [2, 4]" and polarity == -1


def test_noise_is_none():
    noise = torch.randn(300, 100, generator=torch.Generator().manual_seed(1))
    fitted = classify(noise, A, B, C)
    assert all(f.classes == ["none"] and f.primary is None for f in fitted)
    # at a lower score threshold the chance bound is what keeps small rules out: without it noise passes
    assert all(f.classes == ["none"] for f in classify(noise, A, B, C, threshold=0.5))
    assert any(f.classes != ["none"] for f in classify(noise, A, B, C, threshold=0.5, alpha=1.0))


def test_the_score_is_chance_corrected_and_the_tail_exact():
    # a rule on half the grid matched at half its cells is chance: 0
    acts = torch.zeros(1, 100)
    (f,) = classify(acts + torch.arange(100.0)[None], A, B, C)  # rises with a: "a in [5, 9]" perfectly
    assert f.primary[0].text() == "a in [5, 9]" and f.primary[1] == pytest.approx(1.0)
    assert tail_probability(10, 2, 2) == pytest.approx(1 / 45)
    assert tail_probability(10, 2, 0) == pytest.approx(1.0)


def test_rule_texts_and_round_trip():
    assert Rule("modulo", "c", (10, 3)).text("subtraction") == "(a - b) mod 10 == 3"
    assert Rule("range", "c", (10, 14)).text() == "a + b in [10, 14]"
    r = Rule("identity", "c", (12,))
    assert Rule.from_json(r.to_json()) == r and bool(r.holds(torch.tensor(5), torch.tensor(7), torch.tensor(12)))


def test_bad_classifier_input_is_one_line():
    with pytest.raises(ValueError, match=r"acts must be \[neuron, cell\]"):
        classify(torch.zeros(3), A, B, C)
    with pytest.raises(ValueError, match="threshold must lie"):
        classify(torch.zeros(1, 100), A, B, C, threshold=2)


def test_promotion_reads_the_covered_answers():
    logits = torch.tensor([[3.0, 3.0, 0.0, 0.0], [0.0, 0.0, 3.0, 3.0]])
    covered = torch.tensor([[True, True, False, False]] * 2)
    p = promotion(logits, covered, torch.tensor([1, 1]))
    assert p[0] > 0 > p[1]
    assert promotion(logits, covered, torch.tensor([-1, -1]))[0] < 0


def test_the_grid(tokenizer):
    g = operand_grid(tokenizer, "addition", 0, 9)
    assert len(g) == 100 and g.mask().all() and len({p.prefix_length for p in g.prompts}) == 1
    assert g.prompts[0].prefix_length > 0 and g.prompts[0].reference.endswith("0 + 0 = ")
    assert tokenizer.decode([g.prompts[-1].answer_token_id]) == "1"  # 9 + 9 = 18: the leading digit at END
    sub = operand_grid(tokenizer, "subtraction", 1, 5, few_shot=False)
    assert len(sub) == 15 and not sub.mask()[0, 1] and sub.prompts[0].prefix_length == 0
    two = operand_grid(tokenizer, "addition", 1, 3, templates=("addition/0", "addition/6"))
    assert len(two) == 18
    grid_vals = two.to_grid(torch.arange(18.0)[:, None])[..., 0]
    assert grid_vals[0, 0] == pytest.approx((0 + 9) / 2)  # the cell's two templates averaged
    for bad, msg in (((tokenizer, "addition", 5, 2), "0 <= lo <= hi"), ((tokenizer, "all", 0, 9), "one operation"),
                     ((tokenizer, "addition", 0, 200), "at most 100")):
        with pytest.raises(ValueError, match=msg):
            operand_grid(*bad)
    with pytest.raises(ValueError, match="Unknown template"):
        operand_grid(tokenizer, "addition", 0, 2, templates=("addition/42",))


def test_grid_activations_equal_run_with_cache(tiny_llama, tokenizer):
    g = operand_grid(tokenizer, "addition", 0, 4, templates=("addition/0", "addition/2"))
    neurons = [Neuron(2, 5), Neuron(0, 3), Neuron(2, 1)]
    ours = grid_activations(tiny_llama, g, neurons, batch_size=7, progress=False)
    for j, p in enumerate(g.prompts):
        _, cache = tiny_llama.run_with_cache(torch.tensor([p.reference_token_ids]))
        for i, n in enumerate(neurons):
            assert ours[i, j] == pytest.approx(float(cache[get_act_name("post", n.layer)][0, -1, n.index]), abs=1e-5)
    with pytest.raises(ValueError, match="outside"):
        grid_activations(tiny_llama, g, [Neuron(9, 0)], progress=False)


def test_output_logits_are_w_out_times_w_u(tiny_llama):
    toks = torch.tensor([5, 17])
    ours = output_logits(tiny_llama, [Neuron(1, 4)], toks)
    ref = tiny_llama.blocks[1].mlp.W_out[4] @ tiny_llama.W_U[:, toks]
    torch.testing.assert_close(ours[0], ref.float(), atol=1e-5, rtol=0)


def _plain_probs(model, grid, neurons, means):
    """One run_with_hooks per prompt, hook_post of the knocked-out neurons replaced by the grid means there."""
    out = []
    for p in grid.prompts:
        g = means.source_of(p)
        hooks = []
        for layer, idx in neurons.items():
            ix = torch.tensor(idx)

            def hook(post, hook, layer=layer, ix=ix, g=g):
                post[:, :, ix] = means.post[layer][g, : post.shape[1]][:, ix].to(post)
                return post

            hooks.append((get_act_name("post", layer), hook))
        logits = model.run_with_hooks(torch.tensor([p.reference_token_ids]), fwd_hooks=hooks)
        out.append(logits[0, -1].float().softmax(-1)[p.answer_token_id])
    return torch.stack(out)


def test_class_knockout_equals_the_plain_loop(tiny_llama, tokenizer):
    g = operand_grid(tokenizer, "addition", 0, 3, templates=("addition/0", "addition/5"))
    means = grid_means(tiny_llama, g, [0, 2])
    sets = [{}, {0: [3, 17, 40]}, {0: [1], 2: [7, 8]}]
    probs, top = answer_probs(tiny_llama, g, sets, means, rows_per_batch=5)
    for s, neurons in enumerate(sets):
        torch.testing.assert_close(probs[s], _plain_probs(tiny_llama, g, neurons, means), atol=1e-6, rtol=1e-4)
    assert (probs[1] - probs[0]).abs().max() > 0  # the knockout moves something
    covered = torch.tensor([p.operands[0] == 1 for p in g.prompts])
    k = class_knockout(tiny_llama, g, {"a in [1, 1]": ({0: [3, 17, 40]}, covered)}, n_random=2, n_boot=50, means=means)
    c = k["classes"]["a in [1, 1]"]
    drop = torch.tensor(c["drop"])
    torch.testing.assert_close(drop, probs[0] - probs[1], atol=1e-6, rtol=1e-4)
    assert c["covered_drop"]["n"] == 8 and c["uncovered_drop"]["n"] == 24
    assert c["covered_drop"]["mean"] == pytest.approx(float(drop[covered].mean()), abs=1e-7)
    assert c["covered_drop"]["low"] <= c["covered_drop"]["mean"] <= c["covered_drop"]["high"]
    with pytest.raises(ValueError, match="outside d_mlp"):
        answer_probs(tiny_llama, g, [{0: [10_000]}], means)
    with pytest.raises(ValueError, match="No grid means for MLP layer 1"):
        answer_probs(tiny_llama, g, [{1: [0]}], means)


def test_random_neurons_match_the_class_per_layer():
    import random

    r = random_like({3: [1, 2, 5], 7: [0]}, 16, random.Random(0))
    assert {l: len(v) for l, v in r.items()} == {3: 3, 7: 1} and not set(r[3]) & {1, 2, 5} and r[7] != [0]


CFG = dict(model="tiny", task="addition", n_pairs=3, few_shot="on", filter_correct=False, layers=(1, 2),
           neurons_per_mlp=6, operands=(0, 6), n_boot=50, n_random=2, knockout_classes=3)


def test_the_job_end_to_end(tiny_llama, tmp_path):
    # tiny random models have no arithmetic heuristics: a loose threshold makes classes to knock out
    r = run(HeuristicsConfig(**CFG, threshold=0.3, alpha=1.0), tmp_path / "h", model=tiny_llama, progress=False)
    assert len(r.neurons) == 12 and r.activations.shape == (12, 49) and len(r.grid_prompts) == 49
    assert r.classified() and r.knockout["classes"] and 0 <= r.share_carried() <= 1
    assert load_result(tmp_path / "h") == r
    import circuits as cc

    same = cc.heuristics(tiny_llama, HeuristicsConfig(**CFG, threshold=0.3, alpha=1.0), progress=False)
    assert same.classes == r.classes and torch.equal(same.activations, r.activations)
    for name in ("figure.html", "knockout.html", "classes.json", "grid.jsonl", "heuristics.pt"):
        assert (tmp_path / "h" / name).is_file()
    # the top neurons are the sweep's largest effects of each layer
    from circuits.patching.engines.neuron_sweep import sweep_neurons

    e = sweep_neurons(tiny_llama, r.pairs, layers=[1], progress=False).scores("fraction").by_layer()[1]
    top = [n.index for n in r.neurons if n.layer == 1]
    assert sorted(top) == sorted(e.argsort(descending=True)[:6].tolist())
    # strict defaults on a random model: rules may or may not pass, but every neuron has a class list
    s = run(HeuristicsConfig(**{**CFG, "knockout_classes": 0}), tmp_path / "s", model=tiny_llama, progress=False)
    assert all(c["classes"] for c in s.classes) and s.knockout == {}


@pytest.mark.parametrize("fields, msg", [
    ({"task": "all"}, "takes one operation"),
    ({"operands": (5, 2)}, "--operands must be LO,HI"),
    ({"threshold": 0.0}, "threshold must lie"),
    ({"neurons_per_mlp": 0}, "--neurons-per-mlp 0: must be at least 1"),
    ({"knockout_classes": -1}, "--knockout-classes -1: must be at least 0"),
    ({"operands": (0, 3000)}, "the grid would have 9006001 cells"),
    ({"templates": ("nosuch/9",)}, "unknown template 'nosuch/9'"),
])
def test_bad_config_is_one_line(fields, msg):
    with pytest.raises(ValueError, match=msg):
        HeuristicsConfig(**fields)


def test_bad_sources_are_one_line(tiny_llama, tmp_path):
    with pytest.raises(ValueError, match="outside this model"):
        run(HeuristicsConfig(**{**CFG, "layers": (7,)}), tmp_path / "x", model=tiny_llama, progress=False)
    with pytest.raises(ValueError, match="--neurons-from"):
        run(HeuristicsConfig(**{**CFG, "neurons_from": str(tmp_path)}), tmp_path / "y", model=tiny_llama,
            progress=False)


def test_key_mlps_from_a_saved_identify_result(tiny_llama, tmp_path):
    from circuits.identify.config import IdentifyConfig
    from circuits.identify.job import identify

    made = identify(tiny_llama, config=IdentifyConfig(model="tiny", n_pairs=3, few_shot="on", filter_correct=False,
                                                      bootstrap=0), progress=False)
    made.save(tmp_path / "id")
    cfg = {k: v for k, v in CFG.items() if k not in ("layers", "knockout_classes")}
    r = run(HeuristicsConfig(**cfg, pairs_from=str(tmp_path / "id"), top_mlps=2, knockout_classes=0),
            tmp_path / "h", model=tiny_llama, progress=False)
    assert sorted({n.layer for n in r.neurons}) == sorted(c.layer for c in made.scores(None).top(2, "mlps", first=made.key_rule))
    assert [p.reference_token_ids for p in r.pairs] == [p.reference_token_ids for p in made.pairs]


def test_figures_geometry(tiny_llama, tmp_path):
    from circuits.viz.heuristics_figures import grid_heatmaps, knockout_bars

    acts = [torch.randn(4, 4).numpy(), torch.randn(4, 4).numpy()]
    rules = [torch.eye(4).numpy(), torch.ones(4, 4).numpy()]
    fig = grid_heatmaps(acts, rules, ["MLP1.2: highest where a == b", "MLP2.3: lowest where b == 0"], range(4))
    heat = [t for t in fig.data if t.type == "heatmap"]
    assert len(heat) == 4 and all(t.colorbar.title.text for t in heat)  # every colour scale has its bar
    assert all("%{z" in t.hovertemplate for t in heat) and heat[0].zmid == 0  # diverging, centred, hoverable
    titles = [a.text for a in fig.layout.annotations]
    assert titles[0].startswith("MLP1.2") and titles[1] == "where its rule holds" and fig.layout.width <= 1280
    ys = sorted({round(a.y, 3) for a in fig.layout.annotations})
    assert len(ys) == 2 and ys[1] - ys[0] > 0.3  # the two rows' titles apart
    ci = {"mean": 0.01, "low": 0.0, "high": 0.02, "n": 5}
    bars = knockout_bars({"b == 0": {"n_neurons": 3, "covered_drop": ci, "uncovered_drop": ci,
                                     "random_covered_drop": ci, "random_uncovered_drop": ci}}, "drop of p(answer)")
    assert len(bars.data) == 4 and all(b.error_y.visible for b in bars.data)
    from circuits.viz import colours

    assert bars.data[0].marker.color == colours.category(3) and bars.data[2].marker.color == colours.RANDOM
    assert bars.layout.yaxis.title.text == "drop of p(answer)"
    empty = grid_heatmaps([], [], [], range(4))
    assert "No classified neurons" in empty.layout.title.text


def test_a_stopped_run_resumes_from_its_parts(tiny_llama, tmp_path, monkeypatch):
    import shutil

    import circuits.beyond.heuristics.job as J

    cfg = HeuristicsConfig(**CFG, threshold=0.3, alpha=1.0)
    first = run(cfg, tmp_path / "h", model=tiny_llama, progress=False)
    assert sorted(p.name for p in (tmp_path / "h" / "parts").iterdir()) == ["knockout.pt", "prompt_knockout.pt",
                                                                            "sweep.pt"]
    for p in (tmp_path / "h").iterdir():  # as a run killed after its parts were written leaves the folder
        if p.name != "parts":
            p.unlink() if p.is_file() else shutil.rmtree(p)

    def fail(*a, **k):
        raise AssertionError("recomputed a finished part")

    monkeypatch.setattr(J, "sweep_neurons", fail)
    monkeypatch.setattr(J, "class_knockout", fail)
    monkeypatch.setattr(J, "prompt_knockout", fail)
    again = run(cfg, tmp_path / "h", model=tiny_llama, progress=False)
    again.seconds = first.seconds
    assert again == first
    with pytest.raises(AssertionError, match="recomputed"):  # another knockout config: that part is made again
        run(cfg.replace(n_random=3), tmp_path / "h", model=tiny_llama, progress=False)


def test_without_a_source_identify_runs_first(tiny_llama, tmp_path):
    from circuits.identify.config import IdentifyConfig
    from circuits.identify.job import identify

    cfg = {k: v for k, v in CFG.items() if k not in ("layers", "knockout_classes")}
    r = run(HeuristicsConfig(**cfg, top_mlps=1, knockout_classes=0), tmp_path / "h", model=tiny_llama, progress=False)
    made = identify(tiny_llama, config=IdentifyConfig(model="tiny", n_pairs=3, few_shot="on", filter_correct=False),
                    progress=False)
    assert {n.layer for n in r.neurons} == {c.layer for c in made.scores(None).top(1, "mlps", first=made.key_rule)}


def test_a_run_killed_in_its_final_save_is_unfinished_not_foreign(tmp_path):
    """A SIGKILL while the final save writes summary.json, classes.json, ... beside parts/ leaves a folder the same
    command resumes (found by tests/integration/test_kill_every_step.py: the rerun refused "holds files circuits did
    not write"); a user's file beside them, or a marker, is not an unfinished run."""
    from circuits.beyond.heuristics.result import HeuristicsResult
    from circuits.results import MARKER, check_output

    out = tmp_path / "h"
    (out / "parts").mkdir(parents=True)
    (out / "parts" / "sweep.pt").write_bytes(b"")
    assert HeuristicsResult.unfinished(out)
    (out / "summary.json").write_text("{}")
    (out / ".classes.json.circuits-tmp-abcd1234").write_text("{")
    assert HeuristicsResult.unfinished(out) and check_output(out, "heuristics") == out
    (out / "notes.txt").write_text("mine")
    assert not HeuristicsResult.unfinished(out)
    (out / "notes.txt").unlink()
    (out / MARKER).write_text("{}")
    assert not HeuristicsResult.unfinished(out)


# -- the nulls of "X% classified" and the corrected causal check (issue 43) -----------------------------------------

def test_null_neurons_leave_out_the_top_ones_and_take_the_smallest_effects():
    from circuits.explain.heuristics.nulls import null_neurons

    e = {1: torch.tensor([0.5, -0.01, 0.2, 0.0, float("nan"), -0.3, 0.02, 0.001]), 2: torch.tensor([0.1, -0.2, 0.05])}
    top = [Neuron(1, 0), Neuron(1, 5), Neuron(2, 1)]
    got = null_neurons(e, [1, 2], top, 3, seed=4)
    assert got["low_effect"] == [Neuron(1, 1), Neuron(1, 3), Neuron(1, 7), Neuron(2, 0), Neuron(2, 2)]  # |e| smallest
    assert len(got["random"]) == 5 and not set(got["random"]) & set(top)  # layer 2 has two left: both taken
    assert {n for n in got["random"] if n.layer == 2} == {Neuron(2, 0), Neuron(2, 2)}
    assert null_neurons(e, [1, 2], top, 3, seed=4) == got and null_neurons(e, [1, 2], top, 3, seed=5) != got
    with pytest.raises(ValueError, match="k must be at least 0"):
        null_neurons(e, [1], top, -1)


def test_the_wilson_interval_against_its_closed_forms():
    from circuits.explain.heuristics.nulls import rate

    r = rate(5, 10)  # the textbook 95% Wilson interval of 5/10
    assert r["rate"] == 0.5 and r["low"] == pytest.approx(0.2366, abs=1e-4) and r["high"] == pytest.approx(0.7634, abs=1e-4)
    z2 = 1.959964 ** 2
    r = rate(0, 10)  # 0 of n: [0, z^2 / (n + z^2)]
    assert r["low"] == 0.0 and r["high"] == pytest.approx(z2 / (10 + z2))
    assert rate(0, 0)["rate"] != rate(0, 0)["rate"]  # NaN
    with pytest.raises(ValueError, match="n_classified must lie"):
        rate(11, 10)


def test_fisher_exact_against_known_tables():
    from circuits.explain.heuristics.nulls import fisher_p

    assert fisher_p(3, 4, 1, 4) == pytest.approx(34 / 70)  # Fisher's tea tasting: 3 of 4 right, two-sided 0.4857
    assert fisher_p(4, 4, 0, 4) == pytest.approx(2 / 70)
    assert fisher_p(2, 4, 2, 4) == pytest.approx(1.0)
    assert fisher_p(92, 150, 66, 150) < 0.01 and fisher_p(92, 150, 66, 150) == pytest.approx(fisher_p(66, 150, 92, 150))
    with pytest.raises(ValueError, match="counts must lie"):
        fisher_p(5, 4, 0, 4)


def test_knockout_vs_random_is_paired_and_holm_corrected():
    from circuits.explain.heuristics.nulls import knockout_vs_random
    from circuits.patching.core.uncertainty import bootstrap_p, percentile_interval, resample_pairs

    g = torch.Generator().manual_seed(0)
    noise = (0.01 * torch.randn(40, generator=g)).tolist()
    covered = [True] * 20 + [False] * 20
    classes = {
        "strong": {"drop": [0.1 + x for x in noise], "random_drop": [0.0] * 40, "covered": covered},
        # a random draw that moves the same prompts as much: no difference, though the drop itself is large
        "same as random": {"drop": [0.1 + x for x in noise], "random_drop": [0.1 + x for x in noise[::-1]],
                           "covered": covered},
        "covers nothing": {"drop": [0.0] * 40, "random_drop": [0.0] * 40, "covered": [False] * 40},
    }
    got = knockout_vs_random(classes, n_boot=500, seed=3)
    assert got["strong"]["holm_apart"] and got["strong"]["level"] == pytest.approx(1 - 0.05 / 2)  # smallest p first
    assert not got["same as random"]["holm_apart"] and got["same as random"]["level"] == pytest.approx(0.95)
    assert got["covers nothing"]["p"] != got["covers nothing"]["p"] and not got["covers nothing"]["holm_apart"]
    # the reference: the paired difference on the covered prompts, resampled as uncertainty's helpers do
    d = torch.tensor(classes["same as random"]["drop"], dtype=torch.float64)[:20] - torch.tensor(
        classes["same as random"]["random_drop"], dtype=torch.float64)[:20]
    draws = d[resample_pairs(20, 500, 3)].mean(1)
    low, high = percentile_interval(draws, 0.95)
    assert got["same as random"]["p"] == bootstrap_p(draws) and got["same as random"]["mean"] == pytest.approx(float(d.mean()))
    assert (got["same as random"]["low"], got["same as random"]["high"]) == (float(low), float(high))


def test_the_job_classifies_null_neurons_with_the_top_neurons_test(tiny_llama, tmp_path):
    import json

    from circuits.beyond.heuristics.job import classify_nulls
    from circuits.beyond.heuristics.result import HeuristicsResult
    from circuits.data.pairs import use_few_shot

    cfg = HeuristicsConfig(**{**CFG, "knockout_classes": 2, "null_neurons": 5}, threshold=0.3, alpha=1.0)
    r = run(cfg, tmp_path / "h", model=tiny_llama, progress=False)
    assert set(r.nulls) == {"random", "low_effect"}
    top = {(n.layer, n.index) for n in r.neurons}
    for g in r.nulls.values():
        assert len(g["neurons"]) == 10 and not {tuple(n) for n in g["neurons"]} & top  # 5 per MLP, none of the top
    grid = operand_grid(tiny_llama.tokenizer, "addition", 0, 6, few_shot=use_few_shot(tiny_llama, "on"), seed=cfg.seed)
    # the null path on the top neurons themselves gives the top neurons' own classes
    same = classify_nulls(tiny_llama, grid, {"top": r.neurons}, cfg)["top"]["classified"]
    assert same == [c["classes"][0] != "none" for c in r.classes]
    # and on the null neurons, each classified as the top neurons' path classifies it alone
    low = [Neuron(*n) for n in r.nulls["low_effect"]["neurons"]]
    from circuits.beyond.heuristics.job import fit_classes

    alone = fit_classes(tiny_llama, grid, low, grid_activations(tiny_llama, grid, low, progress=False), cfg)
    assert r.nulls["low_effect"]["classified"] == [c["classes"][0] != "none" for c in alone]
    s = r.summary()
    rates = s["classified_rates"]
    assert rates["top"]["n_classified"] == len(r.classified()) and rates["random"]["n"] == 10
    assert rates["low_effect"]["n_classified"] == sum(r.nulls["low_effect"]["classified"])
    from circuits.explain.heuristics.nulls import fisher_p

    assert rates["random"]["p_vs_top"] == fisher_p(len(r.classified()), 12, rates["random"]["n_classified"], 10)
    assert set(s["knockout"]) and all("covered_vs_random" in k for k in s["knockout"].values())
    back = load_result(tmp_path / "h")
    assert back == r and back.nulls == r.nulls and back.summary()["classified_rates"] == rates
    # a result saved before issue 43 (no nulls in classes.json) still loads, with no null groups
    path = tmp_path / "h" / "classes.json"
    d = json.loads(path.read_text())
    del d["nulls"]
    path.write_text(json.dumps(d))
    old = HeuristicsResult.load(tmp_path / "h")
    assert old.nulls == {} and list(old.summary()["classified_rates"]) == ["top"]
    d["nulls"] = {"random": {"neurons": [[1, 2]], "classified": [], "class_counts": {}}}
    path.write_text(json.dumps(d))
    with pytest.raises(Exception, match="field 'nulls' must map"):
        HeuristicsResult.load(tmp_path / "h")
