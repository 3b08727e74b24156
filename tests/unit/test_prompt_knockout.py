"""Nikankin et al.'s per-prompt knockout in ``circuits heuristics`` (issue 43): the associated neurons are what the
classes say for each prompt, the random neurons leave every associated one out, the accuracy read equals a plain
``run_with_hooks`` loop, the statistics equal a direct bootstrap, and the result saves and loads."""

from __future__ import annotations

import dataclasses
import json
import random

import pytest
import torch

from circuits.beyond.heuristics.config import HeuristicsConfig
from circuits.beyond.heuristics.job import run
from circuits.data.grid import OperandGrid, operand_grid
from circuits.explain.heuristics.prompt_knockout import (associated_neurons, control_pools, prompt_knockout,
                                                         prompt_knockout_table, prompt_sets)
from circuits.explain.heuristics.rules import Rule
from circuits.models.backend import act_name
from circuits.patching.core.uncertainty import percentile_interval, resample_pairs
from circuits.results import ResultError, load_result
from circuits.types import Neuron


def _cls(*rules: tuple[str, Rule, float]) -> dict:
    """A neuron's classes entry as fit_classes writes it: passing kinds with their best rule and score."""
    if not rules:
        return {"classes": ["none"], "best": {}, "promotion": None}
    return {"classes": [k for k, _, _ in rules], "promotion": 0.0,
            "best": {k: {"rule": r.to_json(), "text": r.text(), "score": s, "polarity": 1, "chance": 0.0}
                     for k, r, s in rules}}


A01 = Rule("range", "a", (0, 1))
C_EVEN = Rule("modulo", "c", (2, 0))
B23 = Rule("range", "b", (2, 3))
NEURONS = [Neuron(1, 5), Neuron(1, 9), Neuron(1, 2), Neuron(2, 7), Neuron(2, 8)]
CLASSES = [_cls(("range", A01, 0.7)), _cls(("modulo", C_EVEN, 0.9), ("range", B23, 0.65)), _cls(),
           _cls(("range", B23, 0.8)), _cls(("modulo", C_EVEN, 0.6))]


def test_the_associated_set_is_what_the_classes_say(tokenizer):
    g = operand_grid(tokenizer, "addition", 0, 3)
    got = associated_neurons(g, NEURONS, CLASSES)
    rules = {0: [A01], 1: [C_EVEN, B23], 2: [], 3: [B23], 4: [C_EVEN]}
    for p, sets in zip(g.prompts, got):
        a, b, c = p.operands[:3]
        held = {i: sum(bool(r.holds(torch.tensor(a), torch.tensor(b), torch.tensor(c))) for r in rs)
                for i, rs in rules.items()}
        want = {n.index for i, n in enumerate(NEURONS) if held[i]}
        assert {i for v in sets.values() for i in v} == want
        assert 2 not in sets.get(1, [])  # a neuron of class none is never associated
        if held[0] and held[1]:  # more of the prompt's heuristics first, then the higher score among them
            even = c % 2 == 0  # MLP1.9's held score: 0.9 (c even) or 0.65 (b in [2, 3] only), MLP1.5's 0.7
            assert sets[1] == ([9, 5] if held[1] == 2 or even else [5, 9])
        if held[3] and held[4]:  # one each: the higher match score first (0.8 over 0.6)
            assert sets[2] == [7, 8]
    # 0 + 1 = 1: a in [0, 1] holds, the result is odd, b = 1 not in [2, 3]: MLP1.5 only
    one = next(i for i, p in enumerate(g.prompts) if p.operands[:2] == (0, 1))
    assert got[one] == {1: [5]}
    # ties in count and score go to the larger effect
    tie = [_cls(("range", A01, 0.7)), _cls(("range", A01, 0.7))]
    ranked = associated_neurons(g, [Neuron(0, 1), Neuron(0, 2)], tie, torch.tensor([0.1, 0.5]), sign=1)
    assert ranked[one] == {0: [2, 1]}


def test_random_neurons_leave_every_associated_one_out():
    pools = control_pools([Neuron(1, i) for i in range(8)] + [Neuron(2, i) for i in range(4)], 96, "top")
    assert pools == {1: list(range(8)), 2: list(range(4))}
    assoc = {1: [3, 0, 6], 2: [1, 2, 3]}
    rng = random.Random(0)
    for limit in (1, 2, 5):
        ablated, randoms = prompt_sets(assoc, pools, limit, 20, rng)
        # layer 2 has one unassociated top neuron: both arms take one there
        assert ablated == {1: [3, 0, 6][: min(limit, 3)], 2: [1]}
        for r in randoms:
            assert {l: len(v) for l, v in r.items()} == {l: len(v) for l, v in ablated.items()}
            assert not set(r[1]) & set(assoc[1]) and set(r[1]) <= set(pools[1])
            assert r[2] == [0]
    seen = {i for _ in range(30) for i in prompt_sets(assoc, pools, 2, 1, rng)[1][0][1]}
    assert seen == {1, 2, 4, 5, 7}  # draws over the whole unassociated pool
    wide = control_pools([Neuron(1, 0)], 96, "mlp")
    assert wide == {1: list(range(96))}
    with pytest.raises(ValueError, match="Unknown control 'x'"):
        control_pools([Neuron(1, 0)], 96, "x")


def _answered_grid(model, tokenizer) -> OperandGrid:
    """A grid whose answers are the clean model's top tokens (a tiny random model answers no sum), so the knockout
    has correct prompts to break."""
    g = operand_grid(tokenizer, "addition", 0, 2, few_shot=True)
    prompts = []
    for p in g.prompts:
        top = int(model(torch.tensor([p.reference_token_ids]))[0, -1].argmax())
        prompts.append(dataclasses.replace(p, answer_token_id=top))
    return OperandGrid(g.operation, g.values, prompts)


def _plain_correct(model, p, neurons: dict) -> bool:
    hooks = []
    for layer, idx in neurons.items():
        ix = torch.tensor(idx)

        def hook(post, hook, ix=ix):
            post = post.clone()
            post[:, :, ix] = 0
            return post

        hooks.append((act_name("post", int(layer)), hook))
    logits = model.run_with_hooks(torch.tensor([p.reference_token_ids]), fwd_hooks=hooks)
    return int(logits[0, -1].argmax()) == p.answer_token_id


def test_accuracy_equals_a_plain_loop(tiny_llama, tokenizer):
    g = _answered_grid(tiny_llama, tokenizer)
    neurons = [Neuron(1, i) for i in range(0, 96, 4)] + [Neuron(2, i) for i in range(0, 96, 4)]
    classes = [_cls(("range", A01, 0.9)) if i % 2 == 0 else _cls(("modulo", C_EVEN, 0.8)) for i in range(len(neurons))]
    pk = prompt_knockout(tiny_llama, g, neurons, classes, limits=(2, 12), n_random=2, seed=3, rows_per_batch=5)
    assert pk["kept"] == list(range(len(g.prompts))) and all(pk["clean_correct"])
    flips = 0
    for j, p in enumerate(pk["kept"][:5]):
        prompt = g.prompts[p]
        for limit in ("2", "12"):
            v = pk["by_limit"][limit]
            assert v["correct"][j] == _plain_correct(tiny_llama, prompt, v["ablated"][j])
            plain = [_plain_correct(tiny_llama, prompt, r) for r in v["random"][j]]
            assert v["random_correct"][j] == pytest.approx(sum(plain) / len(plain))
            flips += (not v["correct"][j]) + len(plain) - sum(plain)
    assert flips > 0  # the knockout does break answers here: the equality is not the clean run's twice
    t = prompt_knockout_table(pk, n_boot=200)
    assert set(t) == {"2", "12"} and t["2"]["before"]["mean"] == 1.0
    # "correct" keeps the prompts the clean model answers: here every one of them
    assert prompt_knockout(tiny_llama, g, neurons, classes, limits=(2,), n_random=1)["kept"] == pk["kept"]


def test_the_table_against_a_direct_bootstrap():
    n = 40
    g = torch.Generator().manual_seed(0)
    assoc = (torch.rand(n, generator=g) < 0.3).tolist()
    rnd = [float(x) for x in (torch.rand(n, generator=g) < 0.9).float()]
    pk = {"kept": list(range(n)), "clean_correct": [True] * n,
          "by_limit": {"5": {"correct": assoc, "random_correct": rnd, "random": [[{}]] * n,
                             "ablated": [{"1": [0, 1]}] * (n - 3) + [{}] * 3},
                       "10": {"correct": [True] * n, "random_correct": [1.0] * n, "random": [[{}]] * n,
                              "ablated": [{}] * n}}}
    t = prompt_knockout_table(pk, n_boot=500, seed=7)
    a, r = torch.tensor(assoc, dtype=torch.float64), torch.tensor(rnd, dtype=torch.float64)
    idx = resample_pairs(n, 500, 7)
    low, high = percentile_interval((a - r)[idx].mean(1))
    d = t["5"]["difference"]
    assert d["mean"] == pytest.approx(float(a.mean() - r.mean())) and d["low"] == pytest.approx(float(low))
    assert d["high"] == pytest.approx(float(high)) and d["high"] < 0 and d["holm_apart"]
    assert t["5"]["associated"]["mean"] == pytest.approx(float(a.mean()))
    assert t["5"]["mean_ablated"] == pytest.approx(2 * (n - 3) / n) and t["5"]["n_none_ablated"] == 3
    assert t["10"]["difference"]["mean"] == 0 and not t["10"]["difference"]["holm_apart"]
    assert t["5"]["difference"]["holm_level"] == pytest.approx(1 - 0.05 / 2)  # the smaller p of two limits


CFG = dict(model="tiny", task="addition", n_pairs=3, few_shot="on", filter_correct=False, layers=(1, 2),
           neurons_per_mlp=6, operands=(0, 4), n_boot=50, n_random=2, knockout_classes=0, null_neurons=0,
           threshold=0.3, alpha=1.0)


def test_the_job_saves_and_loads_it(tiny_llama, tmp_path):
    cfg = HeuristicsConfig(**CFG, prompt_knockout_limits=(1, 3), prompt_knockout_prompts="all")
    r = run(cfg, tmp_path / "h", model=tiny_llama, progress=False)
    pk = r.prompt_knockout
    assert pk["limits"] == [1, 3] and len(pk["kept"]) == len(r.grid_prompts) == 25
    # each kept prompt's associated neurons are those of its classified neurons whose rules hold there
    from circuits.patching.core.metrics import get_metric

    want = associated_neurons(r.grid, r.neurons, r.classes, r.effects, get_metric(r.metric).sign)
    assert pk["associated"] == [{str(l): v for l, v in w.items()} for w in want]
    assert load_result(tmp_path / "h") == r
    s = json.loads((tmp_path / "h" / "summary.json").read_text())
    assert set(s["prompt_knockout"]) == {"1", "3"} and s["prompt_knockout"]["1"]["n_prompts"] == 25
    html = (tmp_path / "h" / "knockout.html").read_text()
    assert "Knocking out each prompt" in html
    # a classes.json whose per-limit reads do not match its kept prompts is refused in one line
    path = tmp_path / "h" / "classes.json"
    d = json.loads(path.read_text())
    d["prompt_knockout"]["by_limit"]["1"]["correct"].pop()
    path.write_text(json.dumps(d))
    with pytest.raises(ResultError, match="field 'prompt_knockout' must hold"):
        load_result(tmp_path / "h")
    d["prompt_knockout"]["by_limit"]["1"]["correct"].append("yes")
    path.write_text(json.dumps(d))
    with pytest.raises(ResultError, match="holds text where a number belongs"):
        load_result(tmp_path / "h")
    # off: nothing run, nothing saved
    off = run(HeuristicsConfig(**CFG, prompt_knockout_limits=()), tmp_path / "o", model=tiny_llama, progress=False)
    assert off.prompt_knockout == {} and not (tmp_path / "o" / "knockout.html").exists()


@pytest.mark.parametrize("fields, msg", [
    ({"prompt_knockout_limits": (0, 5)}, "--prompt-knockout-limits 0,5: each value must be at least 1"),
    ({"prompt_knockout_limits": (5, 5)}, "--prompt-knockout-limits 5,5: names 5 more than once"),
])
def test_bad_limits_are_one_line(fields, msg):
    with pytest.raises(ValueError, match=msg):
        HeuristicsConfig(**fields)


def test_the_flags(tmp_path):
    from circuits.cli import main as cli_main

    with pytest.raises(SystemExit):
        cli_main(["heuristics", "--prompt-knockout-ablation", "half", "--out", str(tmp_path / "x")])
    from circuits.beyond.heuristics.config import _limits

    assert _limits("5,10") == (5, 10) and _limits("none") == ()
    with pytest.raises(ValueError, match="Bad --prompt-knockout-limits '5,x'"):
        _limits("5,x")


def test_the_figure_geometry():
    from circuits.viz import colours
    from circuits.viz.heuristics_figures import prompt_knockout_bars

    ci = {"mean": 0.5, "low": 0.4, "high": 0.6}
    row = {"n_prompts": 30, "mean_ablated": 7.5, "before": {"mean": 1.0, "low": 1.0, "high": 1.0}, "associated": ci,
           "random": ci}
    fig = prompt_knockout_bars({"5": row, "10": row}, "zero", "correct")
    assert len(fig.data) == 3 and all(b.error_y.visible for b in fig.data) and len(fig.data[0].x) == 2
    assert fig.layout.yaxis.range[0] == 0 and fig.layout.width <= 1280  # a rate's axis starts at 0
    assert fig.data[2].marker.color == colours.RANDOM and "the 30 grid prompts answered correctly" in fig.layout.title.text
    assert all("%{y" in b.hovertemplate for b in fig.data)


def test_mean_ablation_reads_as_the_class_knockout_does(tiny_llama, tokenizer):
    """``--prompt-knockout-ablation mean``: the same top-1 reads as the class knockout's ``answer_probs`` with the
    grid's means, set by set."""
    from circuits.explain.heuristics.causal_check import answer_probs, grid_means
    from circuits.explain.heuristics.prompt_knockout import top_correct

    g = _answered_grid(tiny_llama, tokenizer)
    means = grid_means(tiny_llama, g, [1, 2])
    sets = [{}, {1: list(range(96)), 2: list(range(96))}, {1: [3, 4], 2: list(range(40))}]
    _, top = answer_probs(tiny_llama, g, sets, means)
    got = top_correct(tiny_llama, g, list(range(len(g.prompts))), sets, means, rows_per_batch=7)
    # on this grid the tiny model's top token survives even whole MLPs at their grid means, so this checks the wiring
    # (the values and sets reach the executor as the class knockout's do); the probabilities under the same means
    # equal a plain loop in test_heuristics_backends.py, and the zero reads flip in test_accuracy_equals_a_plain_loop
    assert torch.equal(got, top)
