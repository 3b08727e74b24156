"""Heuristic neurons on whichever backend this environment has (TransformerLens 3.9 or 4.3's TransformerBridge), on
the tiny models of every family: the grid's activations equal a plain ``run_with_cache``, the class knockout a plain
``run_with_hooks`` loop (mean hook_post over the grid at every position), and ``circuits heuristics`` runs end to end
through the command line."""

from __future__ import annotations

import pytest
import torch
from helpers import FAMILIES, tiny_dir

from circuits.data.grid import operand_grid
from circuits.explain.heuristics.activations import grid_activations
from circuits.explain.heuristics.causal_check import answer_probs, grid_means
from circuits.models.backend import act_name
from circuits.types import Neuron


@pytest.mark.parametrize("arch", FAMILIES)
def test_grid_activations_and_class_knockout_equal_plain_loops(family_models, tokenizer, arch):
    model = family_models(arch)
    g = operand_grid(tokenizer, "addition", 0, 2, templates=("addition/0", "addition/6"))
    neurons = [Neuron(0, 3), Neuron(2, 11)]
    acts = grid_activations(model, g, neurons, batch_size=4, progress=False)
    means = grid_means(model, g, [0, 2])
    sets = [{}, {0: [3, 5], 2: [11]}]
    probs, _ = answer_probs(model, g, sets, means, rows_per_batch=7)
    for j, p in enumerate(g.prompts):
        tokens = torch.tensor([p.reference_token_ids])
        _, cache = model.run_with_cache(tokens, names_filter=lambda n: n.endswith("hook_post"))
        for i, n in enumerate(neurons):
            assert acts[i, j] == pytest.approx(float(cache[act_name("post", n.layer)][0, -1, n.index]), abs=1e-4)
        grp = means.source_of(p)
        hooks = []
        for layer, idx in sets[1].items():
            ix = torch.tensor(idx)

            def hook(post, hook, layer=layer, ix=ix):
                post = post.clone()
                post[:, :, ix] = means.post[layer][grp, : post.shape[1]][:, ix].to(post)
                return post

            hooks.append((act_name("post", layer), hook))
        logits = model.run_with_hooks(tokens, fwd_hooks=hooks)
        plain = logits[0, -1].float().softmax(-1)[p.answer_token_id]
        assert float(probs[1, j]) == pytest.approx(float(plain), abs=1e-6, rel=1e-4)
    assert (probs[1] - probs[0]).abs().max() > 0


def test_the_command_end_to_end(tmp_path, capsys):
    from circuits.cli import main as cli_main
    from circuits.results import load_result

    out = tmp_path / "h"
    cli_main(["heuristics", "--model", str(tiny_dir("llama")), "--no-filter-correct", "--few-shot", "on",
              "--no-progress", "--pairs", "2", "--layers", "1,2", "--neurons-per-mlp", "4", "--operands", "0,4",
              "--threshold", "0.3", "--alpha", "1", "--n-random", "2", "--n-boot", "20", "--out", str(out)])
    r = load_result(out)
    assert r.kind == "heuristics" and len(r.neurons) == 8 and r.activations.shape == (8, 25)
    assert r.knockout["classes"] and (out / "knockout.html").is_file()
    capsys.readouterr()
    assert cli_main(["heuristics", "--task", "all", "--out", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].endswith("takes one operation (addition, subtraction, multiplication, division), got --task all")
    assert cli_main(["heuristics", "--operands", "0,x", "--out", str(tmp_path / "x")]) == 2
    assert "write it as LO,HI" in capsys.readouterr().err


@pytest.mark.parametrize("arch", ["llama", "gemma3"])
def test_the_grid_at_answer_position_1_equals_run_with_cache_on_appended_prompts(family_models, tokenizer, arch):
    """Issue 42: the grid read at its answers' second token keeps the two-digit sums, each prompt with its first
    answer token appended, and each neuron's activation there is one ``run_with_cache`` on those tokens."""
    from circuits.data.grid import grid_at_answer_position
    from circuits.data.pairs import encode

    model = family_models(arch)
    g = operand_grid(tokenizer, "addition", 4, 7, few_shot=False)
    forced = grid_at_answer_position(g, 1, tokenizer)
    kept = [p for p in g.prompts if p.operands[2] >= 10]
    assert len(forced) == len(kept) == 13 and forced.mask().sum() == 13  # 16 cells, three under 10
    neurons = [Neuron(0, 3), Neuron(1, 11)]
    acts = grid_activations(model, forced, neurons, batch_size=4, progress=False)
    for j, p in enumerate(kept):
        full = encode(tokenizer, p.reference + p.answer)
        n = len(p.reference_token_ids)
        assert list(forced.prompts[j].reference_token_ids) == full[: n + 1]
        assert forced.prompts[j].answer_token_id == full[n + 1]
        _, cache = model.run_with_cache(torch.tensor([full[: n + 1]]), names_filter=lambda n: n.endswith("hook_post"))
        for i, nr in enumerate(neurons):
            assert acts[i, j] == pytest.approx(float(cache[act_name("post", nr.layer)][0, -1, nr.index]), abs=1e-4)


@pytest.mark.parametrize("arch", FAMILIES)
def test_prompt_knockout_accuracy_equals_a_plain_loop(family_models, tokenizer, arch):
    """Nikankin's per-prompt knockout read (zero hook_post at every position, top token = answer) through the ablation
    executor equals a plain ``run_with_hooks`` loop, on each family and backend."""
    import dataclasses

    from circuits.data.grid import OperandGrid
    from circuits.explain.heuristics.prompt_knockout import top_correct
    from circuits.patching.ablation.values import zero_values

    model = family_models(arch)
    g = operand_grid(tokenizer, "addition", 0, 2, templates=("addition/0", "addition/6"))
    # answers: the clean model's top tokens, so there are correct prompts to break
    g = OperandGrid(g.operation, g.values, [dataclasses.replace(
        p, answer_token_id=int(model(torch.tensor([p.reference_token_ids]))[0, -1].argmax())) for p in g.prompts])
    d = model.cfg.d_mlp
    sets = [{}, {1: list(range(0, d, 3)), 2: list(range(1, d, 3))}, {2: list(range(0, d, 2))}]
    ids = list(range(len(g.prompts)))
    got = top_correct(model, g, ids, sets, zero_values(model, [1, 2]), rows_per_batch=5)
    assert bool(got[0].all())
    for j, p in enumerate(g.prompts):
        for s, neurons in enumerate(sets[1:], 1):
            hooks = []
            for layer, idx in neurons.items():
                def hook(post, hook, ix=torch.tensor(idx)):
                    post = post.clone()
                    post[:, :, ix] = 0
                    return post

                hooks.append((act_name("post", layer), hook))
            logits = model.run_with_hooks(torch.tensor([p.reference_token_ids]), fwd_hooks=hooks)
            assert bool(got[s, j]) == (int(logits[0, -1].argmax()) == p.answer_token_id)
    assert not bool(got[1:].all())  # some answers break: the reads are not the clean run's
