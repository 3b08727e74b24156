"""The END-only engine equals the plain one-forward-per-component loop, TransformerLens's own patching
functions, and a direct computation of its baseline."""

import random

import pytest
import torch

from circuits.data.pairs import PairBatch, render_pair
from circuits.data.templates import FIGURE8, FIGURE10
from circuits.patching import all_components, logits_metric, sweep
from circuits.patching.engines.end_sweep_plain import baseline_plain, sweep_plain
from circuits.types import Component


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


@pytest.mark.parametrize("mode", ["path", "activation"])
@pytest.mark.parametrize("arch", ["llama", "mistral"])
def test_engine_equals_plain_loop_tiny(request, arch, mode, tokenizer):
    model = request.getfixturevalue(f"tiny_{arch}")
    batch = PairBatch.from_pairs(_pairs(tokenizer, 6), pad_token_id=0)
    result = sweep(model, batch, mode, progress=False)
    base, plain = sweep_plain(model, batch, mode, all_components(model))
    _assert_equal(result, plain, 1e-4)
    # The baseline the engine reads from its END-only runs equals two plain forward passes.
    for f in ("answer", "cf_answer", "logit", "logit_diff", "prob", "cf_logit", "cf_logit_diff", "cf_prob"):
        torch.testing.assert_close(getattr(result.baseline, f), getattr(base, f), atol=1e-4, rtol=0, msg=f)
    # The patches matter on this model (otherwise equality would prove little).
    assert (result.head_logit - result.baseline.logit[None, None]).abs().max() > 1e-2


def test_baseline_is_the_direct_computation(tiny_llama, tokenizer):
    pairs = _pairs(tokenizer, 3)
    base = baseline_plain(tiny_llama, PairBatch.from_pairs(pairs, 0))
    for i, p in enumerate(pairs):
        ref = tiny_llama(torch.tensor([p.reference_token_ids]))[0, -1].float()
        cf = tiny_llama(torch.tensor([p.counterfactual_token_ids]))[0, -1].float()
        assert int(base.cf_answer[i]) == int(cf.argmax())
        assert base.logit[i] == pytest.approx(float(ref[p.answer_token_id]), abs=1e-4)
        assert base.cf_prob[i] == pytest.approx(float(cf.softmax(-1)[p.answer_token_id]), abs=1e-6)
        assert base.logit_diff[i] == pytest.approx(float(ref[p.answer_token_id] - ref[cf.argmax()]), abs=1e-4)


def test_activation_patching_equals_transformer_lens_patching(tiny_llama, tokenizer):
    """TransformerLens's own activation patching (one forward per component) on pairs of one length: the
    reference run with each head's END output taken from the counterfactual run."""
    from transformer_lens import patching

    rng = random.Random(1)
    pairs = [render_pair(FIGURE8["addition"][0], a, 2, tokenizer, rng) for a in (1, 3, 4)]
    batch = PairBatch.from_pairs(pairs, 0)
    end = int(batch.end[0])
    assert (batch.end == end).all()
    answer = batch.answer

    def metric(logits):
        return logits[torch.arange(len(answer)), end, answer].mean()

    import pandas as pd

    _, cf_cache = tiny_llama.run_with_cache(batch.counterfactual)
    L, H = tiny_llama.cfg.n_layers, tiny_llama.cfg.n_heads
    # TransformerLens's generic patcher, which its get_act_patch_*_by_pos functions call, at END only.
    heads = pd.DataFrame([(l, end, h) for l in range(L) for h in range(H)], columns=["layer", "pos", "head_index"])
    theirs = patching.generic_activation_patch(tiny_llama, batch.reference, cf_cache, metric,
                                               patching.layer_pos_head_vector_patch_setter, "z", index_df=heads)
    ours = sweep(tiny_llama, batch, "activation", progress=False)
    torch.testing.assert_close(ours.head_logit.mean(-1), theirs.reshape(L, H).float(), atol=1e-4, rtol=0)
    mlps = pd.DataFrame([(l, end) for l in range(L)], columns=["layer", "pos"])
    theirs_mlp = patching.generic_activation_patch(tiny_llama, batch.reference, cf_cache, metric,
                                                   patching.layer_pos_patch_setter, "mlp_out", index_df=mlps)
    torch.testing.assert_close(ours.mlp_logit.mean(-1), theirs_mlp.float(), atol=1e-4, rtol=0)


def test_custom_metric_is_a_function_of_end_logits(tiny_llama, tokenizer):
    batch = PairBatch.from_pairs(_pairs(tokenizer, 4), 0)
    top2 = torch.tensor([int(t) for t in batch.answer])

    def answer_margin(logits):  # answer logit minus the best other token's, per pair
        others = logits.clone()
        others[torch.arange(len(top2)), top2] = -float("inf")
        return logits[torch.arange(len(top2)), top2] - others.max(-1).values

    metric = logits_metric(answer_margin, "margin")
    result = sweep(tiny_llama, batch, "path", metrics=[metric], progress=False)
    heads, mlps = result.scores("margin").parts.values()
    # The plain loop: run each patch, apply the function to its END logits.
    for c in (Component("head", 1, 2), Component.mlp(0)):
        logits = _patched_end_logits(tiny_llama, batch, c)
        expected = (answer_margin(logits) - answer_margin(_end_logits(tiny_llama, batch))).mean()
        got = heads[c.layer, c.head] if c.kind == "head" else mlps[c.layer]
        assert float(got) == pytest.approx(float(expected), abs=1e-4)
    assert result.scores("margin").top(1, "heads") == [h for h, _ in result.scores("margin").key("top1:margin")]
    with pytest.raises(ValueError, match="built-in metric"):
        logits_metric(answer_margin, "prob")


def _end_logits(model, batch):
    return model(batch.reference)[torch.arange(len(batch)), batch.end].float()


def _patched_end_logits(model, batch, component):
    from functools import partial

    from transformer_lens.utils import get_act_name

    rows = torch.arange(len(batch))
    _, ref = model.run_with_cache(batch.reference)
    _, cf = model.run_with_cache(batch.counterfactual)

    def freeze(z, hook, layer):
        z = ref[get_act_name("z", layer)].clone()
        if component.kind == "head" and component.layer == layer:
            z[rows, batch.end, component.head] = cf[get_act_name("z", layer)][rows, batch.end, component.head]
        return z

    def patch_mlp(out, hook):
        out = out.clone()
        out[rows, batch.end] = cf[hook.name][rows, batch.end]
        return out

    hooks = [(get_act_name("z", l), partial(freeze, layer=l)) for l in range(model.cfg.n_layers)]
    if component.kind == "mlp":
        hooks.append((get_act_name("mlp_out", component.layer), patch_mlp))
    return model.run_with_hooks(batch.reference, fwd_hooks=hooks)[rows, batch.end].float()


@pytest.mark.parametrize("mode", ["path", "activation"])
def test_chunking_does_not_change_results(tiny_llama, tokenizer, mode):
    batch = PairBatch.from_pairs(_pairs(tokenizer, 4), pad_token_id=0)
    big = sweep(tiny_llama, batch, mode, progress=False)
    small = sweep(tiny_llama, batch, mode, memory_mb=0.01, progress=False)  # one sender per chunk
    torch.testing.assert_close(big.head_logit, small.head_logit, atol=1e-5, rtol=0)
    torch.testing.assert_close(big.mlp_prob, small.mlp_prob, atol=1e-6, rtol=0)


@pytest.mark.parametrize("mode", ["path", "activation"])
def test_patching_a_prompt_with_itself_changes_nothing(tiny_mistral, tokenizer, mode):
    batch = PairBatch.from_pairs(_pairs(tokenizer, 4), pad_token_id=0)
    same = PairBatch(batch.reference, batch.reference, batch.end, batch.answer)
    result = sweep(tiny_mistral, same, mode, progress=False)
    for metric in ("relative_logit", "logit_diff", "prob"):
        heads, mlps = result.scores(metric).parts.values()
        assert heads.abs().max() < 1e-4 and mlps.abs().max() < 1e-4


def test_components_subset_leaves_the_rest_nan(tiny_llama, tokenizer):
    batch = PairBatch.from_pairs(_pairs(tokenizer, 2), 0)
    r = sweep(tiny_llama, batch, "path", components=[Component("head", 1, 1), Component.mlp(2)], progress=False)
    heads, mlps = r.scores("logit_diff").parts.values()
    assert heads.isnan().sum() == heads.numel() - 1 and mlps.isnan().sum() == mlps.numel() - 1
    assert r.scores("logit_diff").top(None, "heads") == [(1, 1)]


def test_bf16_sweep_runs_close_to_fp32(tokenizer):
    from helpers import tiny_model

    batch = PairBatch.from_pairs(_pairs(tokenizer, 3), pad_token_id=0)
    fp32 = sweep(tiny_model("llama"), batch, "activation", progress=False)
    bf16 = sweep(tiny_model("llama", dtype="bfloat16"), batch, "activation", progress=False)
    assert bf16.head_logit.dtype == torch.float32  # results are float32 whatever the model's dtype
    scale = fp32.head_logit.abs().max()
    assert (bf16.head_logit - fp32.head_logit).abs().max() < 0.05 * scale


def test_bad_component_and_mode_are_rejected(tiny_llama, tokenizer):
    batch = PairBatch.from_pairs(_pairs(tokenizer, 2), pad_token_id=0)
    with pytest.raises(ValueError, match="outside this model"):
        sweep(tiny_llama, batch, "path", components=[Component("head", 0, 99)], progress=False)
    with pytest.raises(ValueError, match="Unknown mode"):
        sweep(tiny_llama, batch, "resample", progress=False)  # type: ignore[arg-type]


@pytest.mark.parametrize("mode", ["path", "activation"])
def test_probability_only_where_asked(tiny_llama, tokenizer, mode):
    """prob=False reads two unembedding columns (prob NaN); prob=fn fills the probability of the components fn picks
    from the finished sweep in a second pass; the logits and the picked probabilities equal a full sweep's."""
    batch = PairBatch.from_pairs(_pairs(tokenizer, 4), pad_token_id=0)
    full = sweep(tiny_llama, batch, mode, progress=False)
    none = sweep(tiny_llama, batch, mode, progress=False, prob=False)
    picked = [Component("head", 1, 2), Component("head", 0, 1), Component.mlp(2)]
    some = sweep(tiny_llama, batch, mode, progress=False, prob=lambda r: picked if r.head_prob.isnan().all() else [])
    for r in (none, some):
        torch.testing.assert_close(r.head_logit, full.head_logit, atol=0, rtol=0)
        torch.testing.assert_close(r.mlp_logit_diff, full.mlp_logit_diff, atol=0, rtol=0)
    assert none.head_prob.isnan().all() and none.mlp_prob.isnan().all()
    assert not full.head_prob.isnan().any()
    for c in picked:
        mine, ref = (some.head_prob[c.layer, c.head], full.head_prob[c.layer, c.head]) if c.kind == "head" \
            else (some.mlp_prob[c.layer], full.mlp_prob[c.layer])
        torch.testing.assert_close(mine, ref, atol=1e-6, rtol=0)
    assert int((~some.head_prob.isnan()).sum()) == 2 * len(batch) and int((~some.mlp_prob.isnan()).sum()) == len(batch)
    # The baseline always has the probability.
    assert not none.baseline.prob.isnan().any() and not none.baseline.cf_prob.isnan().any()


def test_runs_with_shared_prefixes_equal_full_forwards(tiny_mistral, tokenizer):
    """Path mode reads END activations from runs where a template's shared few-shot prefix runs once; they equal the
    full forwards' (activation mode's runs, which keep every position)."""
    from circuits.patching.core.end_layers import SHARED_PREFIX_MIN, collect_runs
    from circuits.models.forward import shared_prefix_lengths

    from circuits.data.pairs import few_shot_prefixes

    rng = random.Random(1)
    templates = (FIGURE8["addition"][0], FIGURE10[1])
    prefixes = {t.id: few_shot_prefixes(t, tokenizer, rng) for t in templates}
    pairs = [render_pair(t, a, b, tokenizer, rng, prefixes=prefixes[t.id]) for t in templates for a, b in ((1, 2), (3, 4), (2, 2))]
    assert all(n >= SHARED_PREFIX_MIN for n in shared_prefix_lengths([p.reference_token_ids for p in pairs], SHARED_PREFIX_MIN))
    batch = PairBatch.from_pairs(pairs, pad_token_id=0)
    shared, full = collect_runs(tiny_mistral, batch, need_kv=False), collect_runs(tiny_mistral, batch, need_kv=True)
    for name in ("resid_pre", "resid_mid", "attn_out", "z_ref", "z_cf", "mlp_out_cf"):
        for a, b in zip(getattr(shared, name), getattr(full, name)):
            torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5, msg=name)
    torch.testing.assert_close(shared.ref_end_resid, full.ref_end_resid, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(shared.cf_end_resid, full.cf_end_resid, atol=1e-5, rtol=1e-5)
