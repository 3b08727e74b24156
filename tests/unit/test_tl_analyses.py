"""The TransformerLens-style calls equal TransformerLens's own: ``patch`` (both directions) against
``transformer_lens.patching``, direct logit attribution against ``stack_head_results`` + ``apply_ln_to_stack``, the
residual lens against ``accumulated_resid``, the OV/QK tables against plain weight products."""

import pandas as pd
import pytest
import torch
from transformer_lens import patching

import circuits as cc
from circuits.data.pairs import build_pairs, pair_logits
from circuits.explain.dla import answer_directions, direct_logit_attribution
from circuits.explain.head_circuits import head_circuits
from circuits.explain.residual_lens import residual_lens
from circuits.patching.engines.end_sweep import sweep
from circuits.patching.interchange.tl_patch import patch
from circuits.types import Head


@pytest.fixture(scope="module")
def pairs(tiny_llama):
    return build_pairs(tiny_llama, "addition", n_pairs=12, filter_correct=False, few_shot="on", progress=False).pairs


@pytest.fixture(scope="module")
def same_length(pairs):
    """The pairs of the most common token length, as clean and corrupted token tensors and answers."""
    lengths = [len(p.reference_token_ids) for p in pairs]
    keep = [p for p in pairs if len(p.reference_token_ids) == max(set(lengths), key=lengths.count)][:4]
    assert len(keep) >= 2
    return (torch.tensor([p.reference_token_ids for p in keep]), torch.tensor([p.counterfactual_token_ids for p in keep]),
            torch.tensor([p.answer_token_id for p in keep]))


def _tl_patch_at_end(model, run, cache, metric):
    """``get_act_patch_attn_head_out_by_pos(...)[:, -1]`` and ``get_act_patch_mlp_out(...)[:, -1]``: TransformerLens's
    generic patch over the last position's indices only (the same forwards, without the other positions')."""
    L, H, end = model.cfg.n_layers, model.cfg.n_heads, run.shape[1] - 1
    heads = pd.DataFrame([(l, end, h) for l in range(L) for h in range(H)], columns=["layer", "pos", "head"])
    mlps = pd.DataFrame([(l, end) for l in range(L)], columns=["layer", "pos"])
    h = patching.generic_activation_patch(model, run, cache, metric, patching.layer_pos_head_vector_patch_setter, "z",
                                          index_df=heads)
    m = patching.generic_activation_patch(model, run, cache, metric, patching.layer_pos_patch_setter, "mlp_out",
                                          index_df=mlps)
    return h.reshape(L, H).cpu(), m.cpu()


@pytest.mark.parametrize("direction", ["noising", "denoising"])
@pytest.mark.parametrize("scalar", [False, True])
def test_patch_equals_transformer_lens_patching_at_the_last_position(tiny_llama, same_length, direction, scalar):
    clean, corrupted, answers = same_length
    rows = torch.arange(len(answers))
    per_prompt = lambda logits: logits[rows, answers] - logits[rows].mean(-1)  # noqa: E731
    metric = (lambda logits: per_prompt(logits).mean()) if scalar else per_prompt
    r = patch(tiny_llama, clean, corrupted, metric, direction, progress=False)
    run, source = (clean, corrupted) if direction == "noising" else (corrupted, clean)
    _, cache = tiny_llama.run_with_cache(source)
    tl_metric = lambda logits: per_prompt(logits[:, -1]).mean()  # noqa: E731
    tl_heads, tl_mlps = _tl_patch_at_end(tiny_llama, run, cache, tl_metric)
    torch.testing.assert_close(r.heads, tl_heads.cpu(), atol=2e-5, rtol=1e-4)
    torch.testing.assert_close(r.mlps, tl_mlps.cpu(), atol=2e-5, rtol=1e-4)
    assert r.heads.std() > 1e-3  # the patches change something, so the comparison bites
    assert r.clean == pytest.approx(float(tl_metric(tiny_llama(clean))), abs=1e-5)
    assert r.corrupted == pytest.approx(float(tl_metric(tiny_llama(corrupted))), abs=1e-5)
    heads, mlps = r.normalized()
    assert heads.shape == r.heads.shape and mlps.shape == r.mlps.shape


def test_noising_is_the_sweep_and_bad_input_is_one_line(tiny_llama, pairs):
    r = patch(tiny_llama, pairs, metric=lambda logits: logits[:, 0], mode="path", progress=False)
    s = sweep(tiny_llama, pairs, progress=False, metrics=[cc.logits_metric(lambda logits: logits[:, 0], name="x")])
    torch.testing.assert_close(r.heads, s.custom["x"][0].mean(-1))
    with pytest.raises(ValueError, match="Unknown direction 'forward'"):
        patch(tiny_llama, pairs, direction="forward")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="corrupted prompts are needed"):
        patch(tiny_llama, torch.zeros(2, 5, dtype=torch.long))
    with pytest.raises(ValueError, match="same token shape"):
        patch(tiny_llama, torch.zeros(2, 5, dtype=torch.long), torch.zeros(2, 6, dtype=torch.long))


def test_direct_logit_attribution_equals_transformer_lens(tiny_llama, pairs):
    dla = direct_logit_attribution(tiny_llama, pairs)
    direction, _, cf = answer_directions(tiny_llama, pairs)
    L, H = tiny_llama.cfg.n_layers, tiny_llama.cfg.n_heads
    assert dla.heads.shape == (L, H, len(pairs)) and dla.mlps.shape == (L, len(pairs))
    for i, p in enumerate(pairs[:4]):
        _, cache = tiny_llama.run_with_cache(torch.tensor([p.reference_token_ids]))
        stack = cache.apply_ln_to_stack(cache.stack_head_results(layer=-1, pos_slice=-1), layer=-1, pos_slice=-1)
        tl = (stack[:, 0].float() @ direction[:, i]).reshape(L, H)
        torch.testing.assert_close(dla.heads[..., i], tl, atol=1e-5, rtol=1e-4)
    # The parts add up to the model's own logit difference.
    logits = pair_logits(tiny_llama, pairs)
    rows, answers = torch.arange(len(pairs)), torch.tensor([p.answer_token_id for p in pairs])
    total = dla.heads.sum((0, 1)) + dla.mlps.sum(0) + dla.embed + dla.biases + dla.unembed_bias
    torch.testing.assert_close(total, logits[rows, answers] - logits[rows, cf], atol=1e-4, rtol=1e-4)
    assert dla.scores().ranked(2, "heads")[0][1] == float(dla.heads.mean(-1).max())


@pytest.mark.parametrize("incl_mid", [False, True])
def test_residual_lens_equals_accumulated_resid(tiny_llama, pairs, incl_mid):
    lens = residual_lens(tiny_llama, pairs[:4], incl_mid=incl_mid)
    cf = answer_directions(tiny_llama, pairs[:4])[2]
    for i, p in enumerate(pairs[:4]):
        _, cache = tiny_llama.run_with_cache(torch.tensor([p.reference_token_ids]))
        acc, labels = cache.accumulated_resid(layer=-1, incl_mid=incl_mid, apply_ln=True, pos_slice=-1, return_labels=True)
        logits = acc[:, 0] @ tiny_llama.W_U + tiny_llama.b_U
        assert labels == lens.labels
        torch.testing.assert_close(lens.logit_diff[:, i], logits[:, p.answer_token_id] - logits[:, int(cf[i])],
                                   atol=1e-5, rtol=1e-4)
        ranks = (logits > logits[:, [p.answer_token_id]]).sum(-1)
        assert lens.answer_rank[:, i].tolist() == ranks.tolist()


def test_head_circuits_equal_the_plain_weight_products(tiny_llama):
    heads = [(Head(1, 3), 0.2), "2.0"]  # key_heads()'s pairs and text; heads 1.3 and 2.0 share no K/V group
    c = head_circuits(tiny_llama, heads, queries=("=", "+"))
    assert c.heads == [Head(1, 3), Head(2, 0)] and c.ov.shape == (2, 10, 10) and c.qk.shape == (2, 2, 10)
    tok = lambda texts: [tiny_llama.tokenizer(t, add_special_tokens=False).input_ids[0] for t in texts]  # noqa: E731
    src, qry = tok(c.sources), tok(c.queries)
    group = tiny_llama.cfg.n_heads // tiny_llama.cfg.n_key_value_heads
    for i, (l, h) in enumerate(c.heads):
        attn = tiny_llama.blocks[l].attn
        W_V, W_K = attn._W_V[h // group], attn._W_K[h // group]  # the grouped K/V weights, unexpanded
        e = tiny_llama.blocks[l].ln1(tiny_llama.W_E[src][:, None])[:, 0]
        q = tiny_llama.blocks[l].ln1(tiny_llama.W_E[qry][:, None])[:, 0]
        ov = e @ W_V @ attn.W_O[h] @ tiny_llama.W_U[:, src]
        torch.testing.assert_close(c.ov[i], ov, atol=1e-4, rtol=1e-4)
        qk = (q @ attn.W_Q[h]) @ (e @ W_K).T / attn.attn_scale
        torch.testing.assert_close(c.qk[i], qk, atol=1e-4, rtol=1e-4)
    fig = c.figure()
    assert len(fig.data) == 2 and fig.data[0].zmid == 0 and "head 1.3" in fig.data[0].hovertemplate
    with pytest.raises(ValueError, match="not one token"):
        head_circuits(tiny_llama, heads, sources=("123456789",))


def test_the_raw_tensors_make_the_metrics_as_documented(tiny_llama, pairs):
    s = sweep(tiny_llama, pairs, progress=False)
    b = s.baseline
    L, H, P = s.head_logit.shape
    assert (L, H, P) == (tiny_llama.cfg.n_layers, tiny_llama.cfg.n_heads, len(pairs)) and b.logit.shape == (P,)
    torch.testing.assert_close(((s.head_logit - b.logit) / b.logit).mean(-1), s.scores("relative_logit").heads)
    fraction = (s.head_logit - b.logit).mean(-1) / (b.cf_logit - b.logit).mean()
    torch.testing.assert_close(fraction, s.scores("fraction").heads, equal_nan=True)
    torch.testing.assert_close((s.head_logit_diff - b.logit_diff).mean(-1), s.scores("logit_diff").heads)
