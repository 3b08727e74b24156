"""``circuits numbers`` on whichever backend this virtualenv has (TransformerLens 3.9 in ``.venv``, 4.3's
TransformerBridge in ``.venv-tl4``), on the tiny model of each family: the direct number effects add up to the
model's own number logits, the batched digit patching equals one run_with_hooks per neuron, models with norms after
each sublayer (Gemma 2/3) are refused in one line, and the job runs through the command line and loads back equal."""

from __future__ import annotations

import json

import pytest
import torch
from helpers import BACKEND_FAMILIES, family_model, mixed_pairs, tiny_dir

from circuits.cli import main as cli_main
from circuits.data.arithmetic import EQUATION_PREFIX
from circuits.explain.digits import DIGITS, digit_effects, digit_problems, sample_problems
from circuits.explain.fourier import direct_number_effects, number_tokens, number_unembedding
from circuits.models.backend import act_name
from circuits.results import load_result
from circuits.types import Component, Neuron

LINEAR = [f for f in BACKEND_FAMILIES if f not in ("gemma2", "gemma3")]


@pytest.fixture(scope="module")
def models():
    cache = {}

    def get(family):
        if family not in cache:
            cache[family] = family_model(family).requires_grad_(False)
        return cache[family]
    return get


@pytest.mark.parametrize("family", LINEAR)
def test_direct_number_effects_add_up_to_the_number_logits(models, tokenizer, family):
    model = models(family)
    pairs = mixed_pairs(tokenizer, 2)
    toks = number_tokens(tokenizer, pairs[0].reference)
    L, H = model.cfg.n_layers, model.cfg.n_heads
    comps = [Component("head", l, h) for l in range(L) for h in range(H)] + [Component.mlp(l) for l in range(L)]
    eff = direct_number_effects(model, pairs, comps, toks)
    U = number_unembedding(model, toks)
    b_O = torch.stack([model.backend.attn_out(l)[1].detach().float() for l in range(L)]).sum(0)
    for p, pair in enumerate(pairs):
        got = {}
        logits = model.run_with_hooks(torch.tensor([pair.reference_token_ids]), fwd_hooks=[
            ("hook_embed", lambda a, hook: got.__setitem__("embed", a[0, -1].float())),
            ("ln_final.hook_scale", lambda a, hook: got.__setitem__("scale", a[0, -1].float()))])[0, -1]
        rest = ((got["embed"] + b_O) / got["scale"]) @ U
        b_U = model.b_U.detach().float()[toks] if getattr(model, "b_U", None) is not None else 0
        torch.testing.assert_close(eff[:, p].sum(0) + rest + b_U, logits[toks].float(), atol=2e-4, rtol=1e-4)


@pytest.mark.parametrize("family", ["gemma2", "gemma3"])
def test_norms_after_each_sublayer_are_refused(models, tokenizer, family):
    model = models(family)
    assert model.backend.post_norms()
    with pytest.raises(ValueError, match="normalises each attention and MLP output"):
        direct_number_effects(model, mixed_pairs(tokenizer, 1), [Component.mlp(0)], [1, 2])



@pytest.mark.parametrize("family", ["gemma2", "gemma3"])
def test_direct_logit_attribution_refuses_norms_after_each_sublayer(models, tokenizer, family):
    """dla asks the backend, as the numbers job does: a TransformerBridge's config does not say the model has them (on
    TransformerLens 4.3 dla read the config and gave all-zero effects instead of refusing)."""
    from circuits.explain.dla import direct_logit_attribution

    with pytest.raises(ValueError, match="normalises each attention and MLP output"):
        direct_logit_attribution(models(family), mixed_pairs(tokenizer, 1))

@pytest.mark.parametrize("family", BACKEND_FAMILIES)
def test_digit_effects_equal_the_plain_loop(models, tokenizer, family):
    model = models(family)
    probs = digit_problems(tokenizer, sample_problems(3, seed=4), EQUATION_PREFIX, seed=1)
    neurons = [Neuron(0, 5), Neuron(1, 17), Neuron(1, 60)]
    ours = digit_effects(model, probs, neurons, rows=6)
    clean = model(probs.reference)
    rows, pos = torch.arange(3), probs.tens_pos
    for j, n in enumerate(neurons):
        for d, digit in enumerate(DIGITS):
            _, cache = model.run_with_cache(probs.counterfactual[digit])
            cf = cache[act_name("post", n.layer)]

            def hook(act, hook):
                act[:, :, n.index] = cf[:, :, n.index]
                return act
            diff = (model.run_with_hooks(probs.reference, fwd_hooks=[(act_name("post", n.layer), hook)]) - clean).float()
            torch.testing.assert_close(ours[j, d, 0], diff[rows, pos + 1, probs.answer[:, 1]], atol=2e-4, rtol=1e-4)
            torch.testing.assert_close(ours[j, d, 1], diff[rows, pos, probs.answer[:, 0]], atol=2e-4, rtol=1e-4)
    assert ours.abs().max() > 1e-4


def test_the_job_through_the_command_line(tmp_path):
    out = tmp_path / "numbers"
    argv = ["numbers", "--model", str(tiny_dir("llama")), "--no-filter-correct", "--few-shot", "on", "--no-progress",
            "--pairs", "3", "--n-heads", "2", "--n-mlps", "2", "--n-problems", "4", "--digit-floor", "0",
            "--digit-mlps", "1", "--top-neurons", "3", "--out", str(out)]
    assert cli_main(argv) == 0
    r = load_result(out)
    s = json.loads((out / "summary.json").read_text())
    assert r.kind == "numbers" and len(r.spectra.components) == 4 and r.spectra.numbers == list(range(10))
    assert len(r.neurons) == 3 and r.digit_effects.shape == (3, 2, 2, 4) and len(s["neurons"]) == 3
    assert set(s["by_kind"]) == {"head", "mlp"} and (out / "digits.html").is_file()
    assert r == load_result(out)
    # under the floor: the accuracy is measured, no neuron labelled, the note says why
    low = tmp_path / "low"
    assert cli_main([*argv[:7], "--pairs", "3", "--n-heads", "1", "--n-mlps", "1", "--n-problems", "4", "--out",
                     str(low)]) == 0
    r = load_result(low)
    assert not r.neurons and len(r.accuracy) == 4 and "floor" in r.note and not (low / "digits.html").exists()


def test_the_job_at_answer_position_1_reads_the_appended_prompts(tokenizer, tmp_path):
    """Issue 42: ``circuits numbers --answer-position 1`` on this backend: the key components' direct number effects
    are those the Fourier view reads on the prompts with the first answer token appended by hand."""
    from dataclasses import replace

    from circuits.data.pairs import encode, make_pair
    from circuits.explain.fourier import number_spectra
    from circuits.models.loading import load_model

    texts = [("7 + 5 = ", "7 @ 5 = ", "12"), ("8 + 6 = ", "8 @ 6 = ", "14"), ("9 + 9 = ", "9 @ 9 = ", "18")]
    path = tmp_path / "pairs.jsonl"
    path.write_text("".join(json.dumps({"prompt": p, "counterfactual": c, "answer": a}) + "\n" for p, c, a in texts))
    from helpers import save_tiny

    folder = save_tiny(tmp_path / "tiny", "llama")  # its own copy: the model the command loads and the one read here
    out = tmp_path / "numbers"
    assert cli_main(["numbers", "--model", str(folder), "--no-filter-correct", "--few-shot", "off",
                     "--pairs-file", str(path), "--answer-position", "1", "--n-heads", "2", "--n-mlps", "1",
                     "--numbers", "10", "--no-digits", "--force", "--no-progress", "--out", str(out)]) == 0
    r = load_result(out)
    model = load_model(str(folder))
    hand = []
    for prompt, counter, answer in texts:  # the first answer token appended from the tokenizer alone
        full, n = encode(tokenizer, prompt + answer), len(encode(tokenizer, prompt))
        hand.append(replace(make_pair(tokenizer, prompt, counter, answer), reference=prompt + answer[0],
                            counterfactual=counter + answer[0], answer=answer[1:], answer_token_id=full[n + 1],
                            answer_token_ids=(), reference_token_ids=tuple(full[: n + 1]),
                            counterfactual_token_ids=tuple(encode(tokenizer, counter) + full[n: n + 1])))
    plain = number_spectra(model, hand, r.spectra.components, 10)
    torch.testing.assert_close(r.spectra.effects, plain.effects, atol=1e-4, rtol=1e-4)
