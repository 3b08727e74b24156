"""Every non-engine consumer on whichever backend this virtualenv has: TransformerLens 3.9's HookedTransformer in
``.venv``, TransformerLens 4.3's TransformerBridge in ``.venv-tl4`` (the same file runs on both lines).

Each consumer (pairs, knockout mean/zero/resample, transfer, direct logit attribution, residual lens, head circuits,
attention roles, logit lens, the lm-eval LM) is compared with TransformerLens's own functions where they exist
(``ActivationCache.stack_head_results``, ``accumulated_resid``) or with a plain ``run_with_hooks`` / full-forward
loop, on a tiny random Llama (grouped-query attention: 4 query heads, 2 K/V heads). The last test runs the command
line end to end on SmolLM2 (identify, then report).
"""

from __future__ import annotations

import functools
import json

import pytest
import torch
import torch.nn.functional as F

from circuits.data.pairs import build_pairs, pair_logits
from circuits.models import backend
from circuits.models.backend import act_name
from circuits.models.forward import unembed_end


@functools.lru_cache(maxsize=1)
def _pairs():
    from helpers import tiny_model

    model = tiny_model()
    return (build_pairs(model, "addition", n_pairs=8, filter_correct=False, few_shot="on", progress=False).pairs
            + build_pairs(model, "division", n_pairs=4, filter_correct=False, few_shot="on", progress=False).pairs)


@pytest.fixture(scope="module")
def pairs(tiny_llama):
    return _pairs()


def _end_logits(model, ids, hooks=()):
    """The plain reference: one prompt, the whole forward pass (logits and all), its last position."""
    with torch.no_grad():
        return model.run_with_hooks(torch.tensor([list(ids)]), fwd_hooks=list(hooks))[0, -1].float()


# --- the seam's helpers ---------------------------------------------------------------------------------------------


@torch.no_grad()
def test_final_resid_is_the_last_blocks_output_and_unembeds_to_the_logits(tiny_llama, pairs):
    tokens = torch.tensor([pairs[0].reference_token_ids, pairs[0].counterfactual_token_ids])  # one length
    L = tiny_llama.cfg.n_layers
    name = act_name("resid_post", L - 1)
    logits, cache = tiny_llama.run_with_cache(tokens, names_filter=lambda n: n == name)
    resid = tiny_llama.backend.final_residual(tokens)
    assert resid.shape == (2, tokens.shape[1], tiny_llama.cfg.d_model)
    torch.testing.assert_close(resid, cache[name], atol=0, rtol=0)
    torch.testing.assert_close(unembed_end(tiny_llama, resid[:, -1]), logits[:, -1].float(), atol=1e-5, rtol=1e-5)

    # under hooks: zeroing a head changes the residual exactly as the hooked full run changes the logits
    def zero(z, hook):
        z[:, :, 1] = 0
        return z

    with tiny_llama.hooks(fwd_hooks=[(act_name("z", 1), zero)]):
        hooked = tiny_llama.backend.final_residual(tokens)
    full = tiny_llama.run_with_hooks(tokens, fwd_hooks=[(act_name("z", 1), zero)])
    torch.testing.assert_close(unembed_end(tiny_llama, hooked[:, -1]), full[:, -1].float(), atol=1e-5, rtol=1e-5)
    assert not torch.allclose(hooked, resid)


def test_seam_reads_the_weights_as_the_model_uses_them(tiny_llama):
    """What DLA and head circuits read through the seam: grouped K/V weights (a Bridge's ``W_K``, 3.9's ``_W_K``),
    the score scale and zero output biases where the model has none."""
    cfg = tiny_llama.cfg
    for l in range(cfg.n_layers):
        attn = tiny_llama.blocks[l].attn
        W_Q, _, W_K, _, W_V, _ = tiny_llama.backend.attn_qkv(l)
        assert W_Q.shape == (cfg.n_heads, cfg.d_model, cfg.d_head)
        assert W_K.shape == W_V.shape == (cfg.n_key_value_heads, cfg.d_model, cfg.d_head)
        own = attn.W_K if backend.installed().name == "bridge" else attn._W_K
        torch.testing.assert_close(W_K, own, atol=0, rtol=0)
        if backend.installed().name == "hooked":  # 3.9's W_K repeats each K/V head for its query heads
            group = cfg.n_heads // cfg.n_key_value_heads
            torch.testing.assert_close(attn.W_K, W_K.repeat_interleave(group, 0), atol=0, rtol=0)
        assert tiny_llama.backend.score_scale(l) == pytest.approx(cfg.d_head ** -0.5)  # a Llama scales by 1/sqrt(d_head)
        W_O, b_O = tiny_llama.backend.attn_out(l)
        assert W_O.shape == (cfg.n_heads, cfg.d_head, cfg.d_model) and b_O.shape == (cfg.d_model,) and not b_O.any()


# --- data ---------------------------------------------------------------------------------------------------------------


def test_pairs_are_the_tokenizers_ids_and_end_logits_equal_the_full_forward(tiny_llama, pairs, tokenizer):
    tok = tiny_llama.tokenizer
    # the model keeps the source's tokenizer (TransformerLens 4's boot swaps in one that prepends BOS: SmolLM2's
    # pairs would then start with a token 3.9's lack, and every position would shift)
    for text in ("1 + 2 = 3", "Question: 7"):
        assert tok(text).input_ids == tokenizer(text).input_ids
    assert tiny_llama.to_tokens("12").tolist()[0] == tokenizer("12").input_ids
    for p in pairs[:4]:  # the tokenizer's own ids (its BOS included), on both lines
        assert list(p.reference_token_ids) == tok(p.reference).input_ids
        assert len(p.reference_token_ids) == len(p.counterfactual_token_ids)
    # to_tokens without BOS is the plain encoding (a Bridge's default_prepend_bos differs from 3.9's: pass it)
    assert tiny_llama.to_tokens("1 + 2 =", prepend_bos=False).tolist()[0] == tok("1 + 2 =",
                                                                                 add_special_tokens=False).input_ids
    got = pair_logits(tiny_llama, pairs)  # shared few-shot prefixes, batched, right-padded
    for i, p in enumerate(pairs):
        torch.testing.assert_close(got[i], _end_logits(tiny_llama, p.reference_token_ids), atol=1e-4, rtol=1e-4)
    assert any(p.prefix_length for p in pairs)


# --- validate -----------------------------------------------------------------------------------------------------------


def _all_heads(model):
    return [(l, h) for l in range(model.cfg.n_layers) for h in range(model.cfg.n_heads)]


@pytest.mark.parametrize("ablation", ["mean", "zero", "resample"])
def test_knockout_equals_a_plain_hook_loop(tiny_llama, pairs, ablation):
    from circuits.validate import knockout_logits, replacement_values
    from circuits.validate.knockout import group_key

    values = replacement_values(tiny_llama, pairs, ablation)
    heads, mlps = [(1, 3), (2, 0)], [1]
    fast = knockout_logits(tiny_llama, pairs, values, heads, mlps=mlps)
    for i, p in enumerate(pairs[:5]):
        if ablation == "resample":
            donor = pairs[values.donor[values.source_of(p)]]
            assert group_key(donor) == group_key(p)
            _, cache = tiny_llama.run_with_cache(torch.tensor([donor.counterfactual_token_ids]))
            z = {l: cache[act_name("z", l)][0] for l in (1, 2)}
            m = {1: cache[act_name("mlp_out", 1)][0]}
        else:
            g = values.source_of(p)
            n = len(p.reference_token_ids)
            z = {l: values.z[l][g, :n] for l in (1, 2)}
            m = {1: values.mlp_out[1][g, :n]}

        def z_hook(act, hook, layer=None):
            layer = int(hook.name.split(".")[1])
            for l, h in heads:
                if l == layer:
                    act[0, :, h] = z[l][:, h]
            return act

        def m_hook(act, hook):
            act[0] = m[1]
            return act

        hooks = [(act_name("z", 1), z_hook), (act_name("z", 2), z_hook), (act_name("mlp_out", 1), m_hook)]
        torch.testing.assert_close(fast[i], _end_logits(tiny_llama, p.reference_token_ids, hooks), atol=1e-4, rtol=1e-4)
    assert not torch.allclose(fast, pair_logits(tiny_llama, pairs), atol=1e-3)  # the knockout changes something


def test_knockout_of_nothing_and_means_of_one_prompt_change_nothing(tiny_llama, pairs):
    from circuits.validate import compute_means, knockout_logits

    means = compute_means(tiny_llama, pairs)
    torch.testing.assert_close(knockout_logits(tiny_llama, pairs, means, []), pair_logits(tiny_llama, pairs),
                               atol=1e-4, rtol=1e-4)
    p = pairs[0]
    own = compute_means(tiny_llama, [p], source="reference")
    out = knockout_logits(tiny_llama, [p], own, _all_heads(tiny_llama), mlps=range(tiny_llama.cfg.n_layers))
    torch.testing.assert_close(out, pair_logits(tiny_llama, [p]), atol=1e-4, rtol=1e-4)


def test_sets_batched_together_equal_one_run_per_set(tiny_llama, pairs):
    from circuits.validate import knockout_logits, replacement_values
    from circuits.validate.knockout import knockout_many

    means = replacement_values(tiny_llama, pairs, "mean")
    sets = [([(0, 1)], []), ([(1, 2), (2, 3)], [0]), ([], [2])]
    many = knockout_many(tiny_llama, pairs, sets, means=means, rows_per_batch=7)
    for (heads, mlps), score in zip(sets, many):
        one = knockout_logits(tiny_llama, pairs, means, heads, mlps=mlps)
        answers = torch.tensor([p.answer_token_id for p in pairs])
        assert score.accuracy == pytest.approx(float((one.argmax(-1) == answers).float().mean()))


def test_transfer_scores_equal_plain_forwards(tiny_llama, pairs):
    from circuits.validate import compute_means
    from circuits.validate.transfer import synthetic_set, transfer_knockout

    means = compute_means(tiny_llama, pairs, pooled=True)
    items = synthetic_set(tiny_llama.tokenizer, "multi_digit", 5)
    res = transfer_knockout(tiny_llama, {"multi_digit": items}, means, [(1, 1)])["multi_digit"]
    plain = torch.stack([_end_logits(tiny_llama, p.reference_token_ids) for p in items])
    answers = torch.tensor([p.answer_token_id for p in items])
    assert res["accuracy_before"] == pytest.approx(float((plain.argmax(-1) == answers).float().mean()))
    assert res["prob_before"] == pytest.approx(float(plain.softmax(-1)[torch.arange(5), answers].mean()), abs=1e-5)


def test_neuron_knockout_equals_a_plain_hook_loop(tiny_llama, pairs):
    from circuits.validate.knockout import score
    from circuits.validate.neuron_knockout import knockout_neurons, neuron_means

    neurons = {1: [5, 17], 2: [40]}
    means = neuron_means(tiny_llama, pairs, [1, 2])
    got = knockout_neurons(tiny_llama, pairs, neurons, means)
    plain = []
    for p in pairs:
        g, n = means.source_of(p), len(p.reference_token_ids)

        def hook(post, hook, g=g, n=n):
            layer = int(hook.name.split(".")[1])
            for i in neurons[layer]:
                post[0, :, i] = means.post[layer][g, :n, i]
            return post

        plain.append(_end_logits(tiny_llama, p.reference_token_ids, [(act_name("post", l), hook) for l in neurons]))
    expected = score(torch.stack(plain), [p.answer_token_id for p in pairs])
    assert got.correct == expected.correct
    assert got.answer_prob == pytest.approx(expected.answer_prob, abs=1e-6)
    clean = score(pair_logits(tiny_llama, pairs), [p.answer_token_id for p in pairs])
    assert got.answer_prob != pytest.approx(clean.answer_prob, abs=1e-9)  # the knockout changes something


@pytest.mark.parametrize("arch", ["mistral_window", "qwen2", "qwen3", "gemma2", "gemma3"])
def test_other_families_end_logits_knockout_and_generation(family_models, arch):
    """The consumers' forward paths (shared prefixes, final residual, knockout hooks, cached generation) on the
    families with sliding windows, Q/K/V biases, QK norms, soft-caps and post-norms, against full forwards."""
    from circuits.evaluation.lm_eval import HookedTransformerLM
    from circuits.validate import knockout_logits, replacement_values

    model = family_models(arch)
    pairs = build_pairs(model, "addition", n_pairs=4, filter_correct=False, few_shot="on", progress=False).pairs
    assert any(p.prefix_length for p in pairs)
    clean = pair_logits(model, pairs)
    values = replacement_values(model, pairs, "mean")
    ko = knockout_logits(model, pairs, values, [(1, 1)], mlps=[0])
    for i, p in enumerate(pairs):
        torch.testing.assert_close(clean[i], _end_logits(model, p.reference_token_ids), atol=1e-4, rtol=1e-4)
        g, n = values.source_of(p), len(p.reference_token_ids)

        def z_hook(act, hook, g=g, n=n):
            act[0, :, 1] = values.z[1][g, :n, 1]
            return act

        def m_hook(act, hook, g=g, n=n):
            act[0] = values.mlp_out[0][g, :n]
            return act

        hooks = [(act_name("z", 1), z_hook), (act_name("mlp_out", 0), m_hook)]
        torch.testing.assert_close(ko[i], _end_logits(model, p.reference_token_ids, hooks), atol=1e-4, rtol=1e-4)
    assert not torch.allclose(ko, clean, atol=1e-3)
    tok = lambda s: model.tokenizer(s, add_special_tokens=False).input_ids  # noqa: E731
    prompts = ["1 + 2 = 3\n4 + 4 = ", "7"]
    for prompt, text in zip(prompts, HookedTransformerLM(model, batch_size=2).generate_greedy(prompts, 4, [])):
        ids = tok(prompt)
        for _ in range(4):
            ids.append(int(_end_logits(model, ids).argmax()))
        assert text == model.tokenizer.decode(ids[len(tok(prompt)):])


# --- explain ------------------------------------------------------------------------------------------------------------


@torch.no_grad()
def test_direct_logit_attribution_equals_stack_head_results(tiny_llama, pairs):
    from circuits.explain.dla import answer_directions, direct_logit_attribution

    dla = direct_logit_attribution(tiny_llama, pairs)
    direction, _, cf = answer_directions(tiny_llama, pairs)
    L, H = tiny_llama.cfg.n_layers, tiny_llama.cfg.n_heads
    assert dla.heads.shape == (L, H, len(pairs)) and dla.mlps.shape == (L, len(pairs))
    for i, p in enumerate(pairs[:3]):
        _, cache = tiny_llama.run_with_cache(torch.tensor([p.reference_token_ids]))
        stack = cache.apply_ln_to_stack(cache.stack_head_results(layer=-1, pos_slice=-1), layer=-1, pos_slice=-1)
        tl = (stack[:, 0].float() @ direction[:, i]).reshape(L, H)
        torch.testing.assert_close(dla.heads[..., i], tl, atol=1e-5, rtol=1e-4)
    logits = pair_logits(tiny_llama, pairs)
    rows, answers = torch.arange(len(pairs)), torch.tensor([p.answer_token_id for p in pairs])
    total = dla.heads.sum((0, 1)) + dla.mlps.sum(0) + dla.embed + dla.biases + dla.unembed_bias
    torch.testing.assert_close(total, logits[rows, answers] - logits[rows, cf], atol=1e-4, rtol=1e-4)


@torch.no_grad()
@pytest.mark.parametrize("incl_mid", [False, True])
def test_residual_lens_equals_accumulated_resid(tiny_llama, pairs, incl_mid):
    from circuits.explain.dla import answer_directions
    from circuits.explain.residual_lens import residual_lens

    lens = residual_lens(tiny_llama, pairs[:3], incl_mid=incl_mid)
    cf = answer_directions(tiny_llama, pairs[:3])[2]
    for i, p in enumerate(pairs[:3]):
        _, cache = tiny_llama.run_with_cache(torch.tensor([p.reference_token_ids]))
        acc, labels = cache.accumulated_resid(layer=-1, incl_mid=incl_mid, apply_ln=True, pos_slice=-1,
                                              return_labels=True)
        logits = acc[:, 0] @ tiny_llama.W_U + tiny_llama.b_U
        assert labels == lens.labels
        torch.testing.assert_close(lens.logit_diff[:, i], logits[:, p.answer_token_id] - logits[:, int(cf[i])],
                                   atol=1e-5, rtol=1e-4)
        # the answer's rank, up to logits within float error of the answer's (ties can fall either way)
        answer = logits[:, [p.answer_token_id]]
        low, high = (logits > answer + 1e-4).sum(-1), (logits > answer - 1e-4).sum(-1)
        assert ((low <= lens.answer_rank[:, i]) & (lens.answer_rank[:, i] <= high)).all()


@torch.no_grad()
def test_head_circuits_equal_the_plain_weight_products(tiny_llama):
    from circuits.explain.head_circuits import head_circuits
    from circuits.types import Head

    c = head_circuits(tiny_llama, [Head(1, 3), Head(2, 0)], queries=("=", "+"))  # K/V groups 1 and 0
    tok = lambda texts: [tiny_llama.tokenizer(t, add_special_tokens=False).input_ids[0] for t in texts]  # noqa: E731
    src, qry = tok(c.sources), tok(c.queries)
    group = tiny_llama.cfg.n_heads // tiny_llama.cfg.n_key_value_heads
    for i, (l, h) in enumerate(c.heads):
        attn = tiny_llama.blocks[l].attn
        # the grouped K/V weights, read each line's own way
        W_V, W_K = (attn.W_V, attn.W_K) if backend.installed().name == "bridge" else (attn._W_V, attn._W_K)
        W_V, W_K = W_V[h // group], W_K[h // group]
        e = tiny_llama.blocks[l].ln1(tiny_llama.W_E[src][:, None])[:, 0]
        q = tiny_llama.blocks[l].ln1(tiny_llama.W_E[qry][:, None])[:, 0]
        torch.testing.assert_close(c.ov[i], e @ W_V @ attn.W_O[h] @ tiny_llama.W_U[:, src], atol=1e-4, rtol=1e-4)
        qk = (q @ attn.W_Q[h]) @ (e @ W_K).T / tiny_llama.cfg.d_head ** 0.5
        torch.testing.assert_close(c.qk[i], qk, atol=1e-4, rtol=1e-4)


@torch.no_grad()
def test_attention_roles_and_views_equal_the_cached_pattern(tiny_llama, pairs, tmp_path):
    from circuits.explain import attention_html, role_attention
    from circuits.explain.attention import ROLE_NAMES, end_attention

    att = end_attention(tiny_llama, pairs[:2], [(2, 1), (0, 3)])
    for r, p in enumerate(pairs[:2]):
        _, cache = tiny_llama.run_with_cache(torch.tensor([p.reference_token_ids]))
        for j, (l, h) in enumerate([(2, 1), (0, 3)]):
            row = cache[act_name("pattern", l)][0, h, -1]
            torch.testing.assert_close(att[r, j, : len(row)], row.float(), atol=1e-6, rtol=0)
    ra = role_attention(tiny_llama, pairs, [(0, 0), (1, 3)])
    assert ra.per_prompt.shape == (len(pairs), 2, len(ROLE_NAMES))
    torch.testing.assert_close(ra.per_prompt.sum(-1), torch.ones(len(pairs), 2), atol=1e-5, rtol=0)
    page = attention_html(tiny_llama, [pairs[0], "1 + 2 = "], [(1, 3)], tmp_path / "attention.html")
    assert (tmp_path / "attention.html").is_file() and page.count("CircuitsVis.render(") == 2 and "L1H3" in page


@torch.no_grad()
def test_logit_lens_cosines_equal_the_cached_activations(tiny_llama, pairs):
    from circuits.explain.logit_lens import mlp_lens

    lens = mlp_lens(tiny_llama, pairs[:2])
    W = tiny_llama.W_U.float()
    for i, p in enumerate(pairs[:2]):
        _, cache = tiny_llama.run_with_cache(torch.tensor([p.reference_token_ids]))
        for layer in range(tiny_llama.cfg.n_layers):
            mid = cache[act_name("resid_mid", layer)][0, -1].float()
            post = cache[act_name("resid_post", layer)][0, -1].float()
            c = F.cosine_similarity(post - mid, W[:, p.answer_token_id], dim=0)
            assert lens.delta_C[i, layer] == pytest.approx(float(c), abs=1e-5)


# --- evaluation ---------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("hf_cache", [True, False])
def test_lm_eval_scores_and_greedy_generation_equal_full_forwards(tiny_llama, hf_cache, monkeypatch):
    """Scores and greedy generation against one full forward per step; on a Bridge both with Hugging Face's cache
    and with the reruns used where that cache is broken (``hf_cache=False``; 3.9 always uses its own cache)."""
    from circuits.evaluation.lm_eval import HookedTransformerLM

    if backend.installed().name == "bridge":
        assert tiny_llama.backend.prefix_sharing()  # transformers < 5.24 in this environment
        if not hf_cache:
            monkeypatch.setattr(tiny_llama.backend, "prefix_sharing", lambda: False)
    lm = HookedTransformerLM(tiny_llama, batch_size=2)
    tok = lambda s: tiny_llama.tokenizer(s, add_special_tokens=False).input_ids  # noqa: E731
    pairs = [(tok("2 + 3 ="), tok(" 5")), (tok("The cat sat on"), tok(" the mat today"))]
    got = lm.score_tokens(pairs)
    for (ctx, cont), (lp, _) in zip(pairs, got):
        with torch.no_grad():
            logp = torch.log_softmax(tiny_llama(torch.tensor([ctx + cont]))[0].float(), -1)
        assert lp == pytest.approx(sum(float(logp[len(ctx) - 1 + i, t]) for i, t in enumerate(cont)), abs=1e-4)
    prompts = ["1 + 2 = 3\n4 + 4 = ", "7"]  # different lengths: left padding
    texts = lm.generate_greedy(prompts, max_new_tokens=6, until=[])
    for prompt, text in zip(prompts, texts):
        ids = tok(prompt)
        for _ in range(6):
            with torch.no_grad():
                ids.append(int(tiny_llama(torch.tensor([ids]))[0, -1].argmax()))
        assert text == tiny_llama.tokenizer.decode(ids[len(tok(prompt)):])


# --- the command line end to end on SmolLM2 -----------------------------------------------------------------------------


@pytest.mark.slow
def test_cli_identify_then_report_on_smollm2(tmp_path, capsys):
    from helpers import shared_cli_run

    from circuits.cli import main as cli_main
    from circuits.identify import IdentifyResult

    out = shared_cli_run(["identify", "--task", "addition", "--pairs", "8"])  # test_key_heads_agree.py's run too
    summary = json.loads((out / "summary.json").read_text())
    assert summary["key_heads"], "identify found key heads"
    result = IdentifyResult.load(out)
    assert [tuple(h) for h, _ in result.key_heads()] == [(l, h) for l, h, _ in summary["key_heads"]]
    html = tmp_path / "report.html"
    assert cli_main(["report", str(out), "--out", str(html)]) == 0
    page = html.read_text()
    l, h, _ = summary["key_heads"][0]
    assert html.is_file() and f"{l}.{h}" in page
