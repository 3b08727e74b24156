"""The engines on whichever backend this environment has (TransformerLens 3.9's ``HookedTransformer`` in ``.venv``,
4.3's ``TransformerBridge`` in ``.venv-tl4``): every file in ``tests/backends`` runs on both lines.

Tiny random models of each family (``helpers.FAMILIES``: Llama, Llama 3 RoPE scaling, Mistral with and without a
sliding window, Qwen2, Qwen3, Gemma 2, Gemma 3) are saved as Hugging Face folders and loaded with ``load_model``;
on each, the logits equal transformers', the backend's attention pieces rebuild the model's own hooks, and the END
engine (path and activation) equals the plain ``run_with_hooks`` loop and TransformerLens's own ``patching``."""

from __future__ import annotations

import random

import pandas as pd
import pytest
import torch

from circuits.data.pairs import PairBatch, few_shot_prefixes, render_pair
from circuits.data.templates import FIGURE8, FIGURE10
from circuits.models import backend, load_hf_reference
from circuits.patching import all_components, sweep
from circuits.patching.engines.end_sweep_plain import sweep_plain

FAMILY_NAMES = ("llama", "llama3", "mistral", "mistral_window", "qwen2", "qwen3", "gemma2", "gemma3")


def _pairs(tokenizer, n=5, seed=0):
    rng = random.Random(seed)
    templates = [*FIGURE8["addition"], FIGURE10[1], FIGURE10[8]]
    # Different templates: different lengths, so right padding and per-pair END are exercised.
    return [render_pair(templates[i % len(templates)], 1 + i % 4, 2 + i % 3, tokenizer, rng) for i in range(n)]


def test_backend_is_the_installed_line():
    from importlib.metadata import version

    major = int(version("transformer_lens").split(".")[0])
    assert backend.installed().name == ("hooked" if major == 3 else "bridge")


@pytest.mark.parametrize("arch", FAMILY_NAMES)
def test_logits_equal_transformers(family_models, tokenizer, arch):
    from helpers import tiny_dir

    model = family_models(arch)
    assert isinstance(model, backend.Model)
    hf = load_hf_reference(tiny_dir(arch))
    text = "1 + 2 = 3\n4 + 4 = 8\n3 + 5 = 8\n7 + 1 = 8\n2 + 6 = "
    ids = torch.tensor([tokenizer(text).input_ids])
    assert ids.shape[1] > 3 * 6  # longer than the sliding windows, so local layers mask
    assert model.to_tokens(text).tolist() == ids.tolist()  # the tokenizer's own BOS choice on both lines
    with torch.no_grad():
        ours, theirs = model(ids), hf(ids).logits
    assert (ours - theirs).abs().max().item() < 1e-4
    assert theirs.std() > 0.1  # the model is not degenerate


@pytest.mark.parametrize("arch", ["llama", "gemma2"])
def test_final_residual_is_the_last_blocks_output(family_models, tokenizer, arch):
    """``stop_at_layer=n_layers`` gives the residual after the last block on both lines (TransformerLens 4.3 alone
    would return logits), through ``model(...)``, ``run_with_hooks`` and ``run_with_cache``."""
    model = family_models(arch)
    L = model.cfg.n_layers
    ids = torch.tensor([tokenizer("7 + 1 = 8\n2 + 6 = ").input_ids])
    name = backend.act_name("resid_post", L - 1)
    with torch.no_grad():
        _, cache = model.run_with_cache(ids, names_filter=lambda n: n == name)
        direct = model.backend.final_residual(ids)
        hooked = model.run_with_hooks(ids, fwd_hooks=[], stop_at_layer=L)
        cached, cache2 = model.run_with_cache(ids, names_filter=lambda n: n == name, stop_at_layer=L)
    assert direct.shape == (1, ids.shape[1], model.cfg.d_model)
    for x in (direct, hooked, cached, cache2[name]):
        torch.testing.assert_close(x, cache[name], atol=0, rtol=0)


@pytest.mark.parametrize("arch", FAMILY_NAMES)
def test_attention_pieces_rebuild_the_models_hooks(family_models, tokenizer, arch):
    """The seam's per-layer pieces (projections, biases, QK norm, rotary at one position, scale, soft-cap, sliding
    window, post-attention norm) give each layer's ``hook_rot_k`` and ``hook_attn_out`` at END from ``resid_pre``
    and the cached keys and values: what the END engine computes for every patched row."""
    from circuits.patching.core.end_layers import attention_at_end, mlp_at_end

    model = family_models(arch)
    batch = PairBatch.from_pairs(_pairs(tokenizer, 3), pad_token_id=0)
    end = batch.end
    rows = torch.arange(len(end))
    names = {l: (model.backend.rotary_key_hook(l), backend.act_name("v", l), backend.act_name("resid_pre", l),
                 backend.act_name("attn_out", l), backend.act_name("resid_mid", l), backend.act_name("mlp_out", l))
             for l in range(model.cfg.n_layers)}
    wanted = {n for v in names.values() for n in v}
    with torch.no_grad():
        _, cache = model.run_with_cache(batch.reference, names_filter=lambda n: n in wanted)
        for l, (k_name, v_name, pre, out, mid, mlp) in names.items():
            W_Q, b_Q, W_K, b_K, W_V, b_V = model.backend.attn_qkv(l)
            assert W_K.shape[0] == model.backend.n_kv_heads() == cache[k_name].shape[2]
            x = cache[pre][rows, end]
            got = attention_at_end(model, l, x[None], cache[k_name], cache[v_name], end)[0]
            torch.testing.assert_close(got, cache[out][rows, end], atol=2e-5, rtol=1e-4)
            torch.testing.assert_close(mlp_at_end(model, l, cache[mid][rows, end]), cache[mlp][rows, end],
                                       atol=2e-5, rtol=1e-4)


@pytest.mark.parametrize("mode", ["path", "activation"])
@pytest.mark.parametrize("arch", FAMILY_NAMES)
def test_engine_equals_plain_loop(family_models, tokenizer, arch, mode):
    model = family_models(arch)
    batch = PairBatch.from_pairs(_pairs(tokenizer, 5), pad_token_id=0)
    assert int(batch.end.min()) > 6  # END sees past the sliding window
    result = sweep(model, batch, mode, progress=False)
    base, plain = sweep_plain(model, batch, mode, all_components(model))
    worst = 0.0
    for c, (logit, ld, prob) in plain.items():
        if c.kind == "head":
            ours = (result.head_logit[c.layer, c.head], result.head_logit_diff[c.layer, c.head],
                    result.head_prob[c.layer, c.head])
        else:
            ours = (result.mlp_logit[c.layer], result.mlp_logit_diff[c.layer], result.mlp_prob[c.layer])
        worst = max(worst, *((a - b).abs().max().item() for a, b in zip(ours, (logit, ld, prob))))
    assert worst <= 1e-4, f"engine differs from the plain loop by {worst}"
    for f in ("answer", "cf_answer", "logit", "logit_diff", "prob", "cf_logit"):
        torch.testing.assert_close(getattr(result.baseline, f), getattr(base, f), atol=1e-4, rtol=0, msg=f)
    assert (result.head_logit - result.baseline.logit[None, None]).abs().max() > 1e-2  # the patches matter


@pytest.mark.parametrize("arch", ["llama", "qwen2", "gemma3"])
def test_activation_patching_equals_transformer_lens_patching(family_models, tokenizer, arch):
    """TransformerLens's own ``patching.generic_activation_patch`` (which accepts both model types) at END: the
    reference run with one head's ``hook_z`` or one layer's ``hook_mlp_out`` taken from the counterfactual run."""
    from transformer_lens import patching

    model = family_models(arch)
    rng = random.Random(1)
    pairs = [render_pair(FIGURE8["addition"][0], a, 2, tokenizer, rng) for a in (1, 3, 4)]
    batch = PairBatch.from_pairs(pairs, 0)
    end = int(batch.end[0])
    assert (batch.end == end).all()
    answer = batch.answer

    def metric(logits):
        return logits[torch.arange(len(answer)), end, answer].mean()

    names = lambda n: n.endswith("hook_z") or n.endswith("hook_mlp_out")  # noqa: E731
    _, cf_cache = model.run_with_cache(batch.counterfactual, names_filter=names)
    L, H = model.cfg.n_layers, model.cfg.n_heads
    ours = sweep(model, batch, "activation", progress=False)
    heads = pd.DataFrame([(l, end, h) for l in range(L) for h in (0, H - 1)], columns=["layer", "pos", "head_index"])
    theirs = patching.generic_activation_patch(model, batch.reference, cf_cache, metric,
                                               patching.layer_pos_head_vector_patch_setter, "z", index_df=heads)
    torch.testing.assert_close(ours.head_logit[:, [0, H - 1]].mean(-1), theirs.reshape(L, 2).float(), atol=1e-4,
                               rtol=0)
    mlps = pd.DataFrame([(l, end) for l in range(L)], columns=["layer", "pos"])
    theirs_mlp = patching.generic_activation_patch(model, batch.reference, cf_cache, metric,
                                                   patching.layer_pos_patch_setter, "mlp_out", index_df=mlps)
    torch.testing.assert_close(ours.mlp_logit.mean(-1), theirs_mlp.float(), atol=1e-4, rtol=0)


@pytest.mark.parametrize("arch", ["mistral_window", "gemma2"])
def test_shared_prefixes_equal_full_forwards(family_models, tokenizer, arch):
    """Path mode runs a template's shared few-shot prefix once (TransformerLens 3's cache, or Hugging Face's on the
    Bridge, where ``backend.prefix_sharing`` checks it works); its END activations equal full forwards'."""
    from circuits.models.forward import shared_prefix_lengths
    from circuits.patching.core.end_layers import SHARED_PREFIX_MIN, collect_runs

    model = family_models(arch)
    rng = random.Random(1)
    templates = (FIGURE8["addition"][0], FIGURE10[1])
    prefixes = {t.id: few_shot_prefixes(t, tokenizer, rng) for t in templates}
    pairs = [render_pair(t, a, b, tokenizer, rng, prefixes=prefixes[t.id]) for t in templates
             for a, b in ((1, 2), (3, 4), (2, 2))]
    assert all(n >= SHARED_PREFIX_MIN for n in shared_prefix_lengths([p.reference_token_ids for p in pairs],
                                                                     SHARED_PREFIX_MIN))
    assert model.backend.prefix_sharing()  # transformers < 5.24 on the Bridge (the TL 4 environment pins it)
    batch = PairBatch.from_pairs(pairs, pad_token_id=0)
    shared, full = collect_runs(model, batch, need_kv=False), collect_runs(model, batch, need_kv=True)
    for name in ("resid_pre", "resid_mid", "attn_out", "z_ref", "z_cf", "mlp_out_cf"):
        for a, b in zip(getattr(shared, name), getattr(full, name)):
            torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5, msg=name)
    torch.testing.assert_close(shared.ref_end_resid, full.ref_end_resid, atol=1e-5, rtol=1e-5)
    # The cache really ran once per prefix: a prefix run and its continuation equal one whole run.
    ids = torch.tensor([pairs[0].reference_token_ids])
    n = ids.shape[1] - 3
    with torch.no_grad():
        whole = model.backend.final_residual(ids)[:, n:]
        part = model.backend.continue_prefix(ids[:, n:].repeat(2, 1), model.backend.prefix_cache(ids[:, :n], [], 2))
    torch.testing.assert_close(part, whole.repeat(2, 1, 1), atol=1e-5, rtol=1e-5)


def test_bridge_refuses_a_transformer_lens_3_cache(family_models, tokenizer):
    """A TransformerLens 3 key/value cache would be ignored by the Bridge without a word (wrong numbers): refused."""
    if backend.installed().name != "bridge":
        pytest.skip("TransformerLens 3.9 reads its own cache")
    model = family_models("llama")
    from transformer_lens.cache.key_value_cache import TransformerLensKeyValueCache

    cache = TransformerLensKeyValueCache.init_cache(model.cfg, "cpu", 1)
    with pytest.raises(TypeError, match="past_kv_cache"):
        model(torch.tensor([[1, 2, 3]]), past_kv_cache=cache)


def test_gqa_hooks_keep_kv_heads(family_models, tokenizer):
    """Keys and values keep their ``n_kv_heads`` heads on both lines (no ungrouping), queries and ``z`` have
    ``n_heads``."""
    model = family_models("qwen3")
    ids = torch.tensor([tokenizer("2 + 6 = ").input_ids])
    names = [f"blocks.0.attn.hook_{s}" for s in ("q", "k", "v", "z")]
    _, cache = model.run_with_cache(ids, names_filter=lambda n: n in names)
    n_kv, H = model.backend.n_kv_heads(), model.cfg.n_heads
    assert n_kv < H
    assert cache["blocks.0.attn.hook_k"].shape[2] == cache["blocks.0.attn.hook_v"].shape[2] == n_kv
    assert cache["blocks.0.attn.hook_q"].shape[2] == cache["blocks.0.attn.hook_z"].shape[2] == H


def test_without_prefix_sharing_the_numbers_are_the_same(family_models, tokenizer, monkeypatch):
    """Where the backend's cache cannot be trusted (a Bridge under transformers 5.24: ``prefix_sharing`` False),
    every prompt runs whole and the END residuals are the same as with a shared prefix."""
    from circuits.models.forward import end_residuals, shared_prefix_lengths

    model = family_models("qwen2")
    rng = random.Random(3)
    t = FIGURE8["addition"][0]
    prefixes = few_shot_prefixes(t, tokenizer, rng)
    rows = [render_pair(t, a, b, tokenizer, rng, prefixes=prefixes).reference_token_ids for a, b in ((1, 2), (5, 3))]
    lengths = shared_prefix_lengths(rows, 16)
    assert min(lengths) >= 16
    with torch.no_grad():
        shared = end_residuals(model, rows, lengths)
        monkeypatch.setattr(model.backend, "prefix_sharing", lambda: False)
        whole = end_residuals(model, rows, lengths)
    torch.testing.assert_close(shared, whole, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("arch", ["llama", "qwen2", "gemma3"])
def test_a_later_answer_position_equals_the_plain_loop_and_transformer_lens(family_models, tokenizer, arch):
    """Issue 42: the END sweep at the answer's second token (both prompts teacher-forced with its first) equals one
    ``run_with_hooks`` per component on the prompts with the first answer token appended by hand, and
    TransformerLens's own ``generic_activation_patch`` at END + 1."""
    from transformer_lens import patching

    from circuits.data.pairs import PairBatch, encode, make_pair
    from circuits.patching.engines.end_sweep_answers import sweep_answer

    model = family_models(arch)
    texts = [("7 + 5 = ", "7 @ 5 = ", "12"), ("8 + 6 = ", "8 @ 6 = ", "14"), ("9 + 9 = ", "9 @ 9 = ", "18")]
    pairs = [make_pair(tokenizer, *t) for t in texts]
    n = len(encode(tokenizer, texts[0][0]))
    ref = torch.tensor([encode(tokenizer, p + a)[: n + 1] for p, _, a in texts])  # prompt + the answer's first token
    cf = torch.tensor([encode(tokenizer, c) + encode(tokenizer, p + a)[n: n + 1] for p, c, a in texts])
    answer = torch.tensor([encode(tokenizer, p + a)[n + 1] for p, _, a in texts])
    batch = PairBatch(ref, cf, torch.full((3,), n), answer)
    for mode in ("path", "activation"):
        ours = sweep_answer(model, pairs, mode, 1, progress=False)
        _, plain = sweep_plain(model, batch, mode, all_components(model))
        worst = 0.0
        for c, values in plain.items():
            view = ours.heads.index((c.layer, c.head)) if c.kind == "head" else ours.mlps.index((c.layer,))
            worst = max(worst, *((a - b).abs().max().item() for a, b in zip((view.logit, view.logit_diff, view.prob),
                                                                               values)))
        assert worst <= 1e-4, f"{mode}: the sweep at END + 1 differs from the plain loop by {worst}"
    assert (ours.head_logit - ours.baseline.logit).abs().max() > 1e-2  # the patches matter

    def metric(logits):
        return logits[torch.arange(3), n, answer].mean()

    names = lambda name: name.endswith("hook_z") or name.endswith("hook_mlp_out")  # noqa: E731
    _, cf_cache = model.run_with_cache(cf, names_filter=names)
    L, H = model.cfg.n_layers, model.cfg.n_heads
    heads = pd.DataFrame([(l, n, h) for l in range(L) for h in (0, H - 1)], columns=["layer", "pos", "head_index"])
    theirs = patching.generic_activation_patch(model, ref, cf_cache, metric, patching.layer_pos_head_vector_patch_setter,
                                               "z", index_df=heads)
    torch.testing.assert_close(ours.head_logit[:, [0, H - 1]].mean(-1), theirs.reshape(L, 2).float(), atol=1e-4, rtol=0)
    mlps = pd.DataFrame([(l, n) for l in range(L)], columns=["layer", "pos"])
    theirs_mlp = patching.generic_activation_patch(model, ref, cf_cache, metric, patching.layer_pos_patch_setter,
                                                   "mlp_out", index_df=mlps)
    torch.testing.assert_close(ours.mlp_logit.mean(-1), theirs_mlp.float(), atol=1e-4, rtol=0)
