"""The END-only engine equals the plain one-forward-per-component loop."""

import random

import pytest
import torch

from circuits.patching import Component, all_components, sweep
from circuits.patching_reference import sweep_plain
from circuits.prompts import PairBatch, render_pair
from circuits.templates import FIGURE8, FIGURE10


def _pairs(tokenizer, n=5, seed=0):
    rng = random.Random(seed)
    templates = [*FIGURE8["addition"], FIGURE10[1], FIGURE10[8]]
    # Different templates: different lengths, so right padding and per-pair END are exercised.
    return [render_pair(templates[i % len(templates)], 1 + i % 4, 2 + i % 3, tokenizer, rng) for i in range(n)]


def _assert_equal(result, plain, tol):
    worst = 0.0
    for c, (logit, ld, prob) in plain.items():
        if c.kind == "head":
            ours = (result.head_logit[c.layer, c.head], result.head_logit_diff[c.layer, c.head], result.head_prob[c.layer, c.head])
        else:
            ours = (result.mlp_logit[c.layer], result.mlp_logit_diff[c.layer], result.mlp_prob[c.layer])
        for a, b in zip(ours, (logit, ld, prob)):
            worst = max(worst, (a - b).abs().max().item())
    assert worst <= tol, f"engine differs from the plain loop by {worst}"
    return worst


@pytest.mark.parametrize("mode", ["path", "activation"])
@pytest.mark.parametrize("arch", ["llama", "mistral"])
def test_engine_equals_plain_loop_tiny(request, arch, mode, tokenizer):
    model = request.getfixturevalue(f"tiny_{arch}")
    batch = PairBatch.from_pairs(_pairs(tokenizer, 6), pad_token_id=0)
    result = sweep(model, batch, mode, progress=False)
    plain = sweep_plain(model, batch, mode, all_components(model), result.baseline)
    _assert_equal(result, plain, 1e-4)
    # The patches matter on this model (otherwise equality would prove little).
    assert (result.head_logit - result.baseline.logit).abs().max() > 1e-2


@pytest.mark.parametrize("mode", ["path", "activation"])
def test_chunking_does_not_change_results(tiny_llama, tokenizer, mode):
    batch = PairBatch.from_pairs(_pairs(tokenizer, 4), pad_token_id=0)
    big = sweep(tiny_llama, batch, mode, progress=False)
    small = sweep(tiny_llama, batch, mode, memory_mb=0.01, progress=False)  # one sender per chunk
    torch.testing.assert_close(big.head_logit, small.head_logit, atol=1e-5, rtol=0)
    torch.testing.assert_close(big.mlp_prob, small.mlp_prob, atol=1e-6, rtol=0)


@pytest.mark.parametrize("mode", ["path", "activation"])
def test_patching_a_prompt_with_itself_changes_nothing(tiny_mistral, tokenizer, mode):
    pairs = _pairs(tokenizer, 4)
    batch = PairBatch.from_pairs(pairs, pad_token_id=0)
    same = PairBatch(batch.reference, batch.reference, batch.end, batch.answer)
    result = sweep(tiny_mistral, same, mode, progress=False)
    for metric in ("relative_logit", "logit_diff", "prob"):
        heads, mlps = result.effects(metric)
        assert heads.abs().max() < 1e-4 and mlps.abs().max() < 1e-4


def test_bf16_sweep_runs_close_to_fp32(tiny_dirs, tokenizer):
    from circuits.models import load_model

    batch = PairBatch.from_pairs(_pairs(tokenizer, 3), pad_token_id=0)
    fp32 = sweep(load_model(tiny_dirs["llama"]), batch, "activation", progress=False)
    bf16 = sweep(load_model(tiny_dirs["llama"], dtype="bf16"), batch, "activation", progress=False)
    assert bf16.head_logit.dtype == torch.float32  # results are float32 whatever the model's dtype
    scale = fp32.head_logit.abs().max()
    assert (bf16.head_logit - fp32.head_logit).abs().max() < 0.05 * scale


def test_bad_component_is_rejected(tiny_llama, tokenizer):
    batch = PairBatch.from_pairs(_pairs(tokenizer, 2), pad_token_id=0)
    with pytest.raises(ValueError, match="outside this model"):
        sweep(tiny_llama, batch, "path", components=[Component("head", 0, 99)], progress=False)
    with pytest.raises(ValueError, match="Unknown mode"):
        sweep(tiny_llama, batch, "resample", progress=False)  # type: ignore[arg-type]


# A fixed sample of SmolLM2 components: early, middle (the key heads), late, and MLPs.
SMOL_SAMPLE = [Component("head", l, h) for l, h in [(0, 0), (7, 3), (14, 2), (20, 8), (23, 3), (29, 8)]] + [
    Component("mlp", l) for l in (0, 19, 29)
]


@pytest.fixture(scope="module")
def smol_batch(smollm2):
    from circuits.prompts import PairConfig, build_pairs

    pairs = build_pairs(smollm2, PairConfig(task="addition", n_pairs=4, seed=3)).pairs
    return PairBatch.from_pairs(pairs, smollm2.tokenizer.pad_token_id)


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["path", "activation"])
def test_engine_equals_plain_loop_smollm2(smollm2, smol_batch, mode):
    result = sweep(smollm2, smol_batch, mode, progress=False)
    plain = sweep_plain(smollm2, smol_batch, mode, SMOL_SAMPLE, result.baseline)
    _assert_equal(result, plain, 1e-4)
    # The full counterfactual lowers the answer logit, and some head carries part of it.
    assert (result.baseline.cf_logit < result.baseline.logit).float().mean() >= 0.5
    heads, _ = result.effects("fraction")
    assert heads.max() > 0.05
