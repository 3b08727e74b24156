"""The fused attention path (circuits.models.attention) against TransformerLens's own attention: same logits,
gradients and cached generation on every family, the eager path whenever a hook reads the scores or pattern,
and hooks on q/k/v/z still firing."""

import pytest
import torch

from helpers import FAMILIES

from circuits.models.attention import fused_attention, unsupported



def _padded(tokenizer):
    texts = ["1 + 2 = 3\n4 + 4 = 8\n3 + 5 = 8\n7 + 1 = ", "2 + 6 = ", "9 - 4 = 5\n8 - 1 = "]
    ids = [tokenizer(t).input_ids for t in texts]
    length = max(map(len, ids))
    tokens = torch.zeros(len(ids), length, dtype=torch.long)
    mask = torch.zeros_like(tokens)
    for r, row in enumerate(ids):  # left padding, as generation pads
        tokens[r, length - len(row):] = torch.tensor(row)
        mask[r, length - len(row):] = 1
    return tokens, mask


class _Count:
    def __init__(self, fn):
        self.fn, self.calls = fn, 0

    def __call__(self, *a, **k):
        self.calls += 1
        return self.fn(*a, **k)


@pytest.fixture
def sdpa_calls(monkeypatch):
    import circuits.models.attention as A

    counter = _Count(A.F.scaled_dot_product_attention)
    monkeypatch.setattr(A.F, "scaled_dot_product_attention", counter)
    return counter


@pytest.mark.parametrize("arch", FAMILIES)
def test_fused_equals_eager_with_padding_and_windows(family_models, tokenizer, sdpa_calls, arch):
    model = family_models(arch)
    tokens, mask = _padded(tokenizer)
    assert tokens.shape[1] > 6  # longer than the tiny sliding windows
    with torch.no_grad():
        on = fused_attention(model, True)
        fused = [model(tokens), model(tokens, attention_mask=mask)]
        fused_attention(model, False)
        calls = sdpa_calls.calls
        eager = [model(tokens), model(tokens, attention_mask=mask)]
        fused_attention(model, True)
    assert sdpa_calls.calls == calls  # switched off: TransformerLens's own forward
    if arch == "gemma2":  # attention soft-capping: the eager path always
        assert not on and "soft-capping" in unsupported(model.cfg) and calls == 0
    else:
        assert on and calls == 2 * model.cfg.n_layers
    real = mask.bool()
    assert (fused[0] - eager[0]).abs().max() < 1e-5
    assert (fused[1][real] - eager[1][real]).abs().max() < 1e-5
    assert fused[1][real].std() > 0.1


@pytest.mark.parametrize("arch", ("llama", "mistral_window", "gemma3"))
def test_cached_generation_is_the_same(family_models, tokenizer, arch):
    """Greedy generation with left padding and TransformerLens's key/value cache (the evaluation's path)."""
    from circuits.evaluation.lm_eval import HookedTransformerLM

    model = family_models(arch)
    lm = HookedTransformerLM(model, batch_size=4, max_gen_toks=8)
    prompts = ["1 + 2 = 3\n4 + 4 = 8\n7 + 1 = ", "2 + 6 = "]
    fused_attention(model, True)
    fused = lm.generate_greedy(prompts, 8, ["\n\n"])
    fused_attention(model, False)
    eager = lm.generate_greedy(prompts, 8, ["\n\n"])
    fused_attention(model, True)
    assert fused == eager and any(fused)


def test_gradients_are_the_same(tokenizer):
    """Training runs the fused path too: the same gradients for every parameter."""
    from helpers import tiny_model

    model = tiny_model("llama")
    tokens, mask = _padded(tokenizer)
    grads = {}
    for on in (True, False):
        fused_attention(model, on)
        model.zero_grad()
        loss = model(tokens, attention_mask=mask, return_type="loss")
        loss.backward()
        grads[on] = {n: p.grad.clone() for n, p in model.named_parameters()}
    for name, g in grads[False].items():
        assert (grads[True][name] - g).abs().max() <= 1e-5 * max(1.0, g.abs().max().item()), name


def test_a_hook_on_the_pattern_runs_the_eager_path(family_models, tokenizer, sdpa_calls):
    model = family_models("llama")
    fused_attention(model, True)
    tokens, _ = _padded(tokenizer)
    seen = {"pattern": 0, "z": 0}

    def count(name):
        def hook(x, hook):
            seen[name] += 1
        return hook

    with torch.no_grad():
        plain = model(tokens)
        assert sdpa_calls.calls == model.cfg.n_layers
        # hook_z (what patching reads and writes) keeps the fused path and still fires
        hooked = model.run_with_hooks(tokens, fwd_hooks=[(lambda n: n.endswith("hook_z"), count("z"))])
        assert sdpa_calls.calls == 2 * model.cfg.n_layers and seen["z"] == model.cfg.n_layers
        # a hook on the pattern (run_with_cache, attention figures): that layer runs TransformerLens's forward
        with_pattern = model.run_with_hooks(tokens, fwd_hooks=[("blocks.1.attn.hook_pattern", count("pattern"))])
        assert sdpa_calls.calls == 3 * model.cfg.n_layers - 1 and seen["pattern"] == 1
        _, cache = model.run_with_cache(tokens)
        assert sdpa_calls.calls == 3 * model.cfg.n_layers - 1 and "blocks.0.attn.hook_pattern" in cache
    assert torch.equal(plain, hooked)
    assert (plain - with_pattern).abs().max() < 1e-5


def test_patching_z_through_the_fused_path(family_models, tokenizer):
    """A value written at hook_z reaches the output as in TransformerLens's forward."""
    model = family_models("mistral_window")
    tokens, _ = _padded(tokenizer)

    def zero_head(z, hook):
        z[:, :, 1] = 0.0
        return z

    out = {}
    with torch.no_grad():
        for on in (True, False):
            fused_attention(model, on)
            out[on] = model.run_with_hooks(tokens, fwd_hooks=[("blocks.0.attn.hook_z", zero_head)])
    fused_attention(model, True)
    assert (out[True] - out[False]).abs().max() < 1e-5
    with torch.no_grad():
        assert (out[True] - model(tokens)).abs().max() > 1e-3  # the patch did something


def test_per_head_results_switch_to_the_eager_path(tokenizer, sdpa_calls):
    """``use_attn_result`` (``hook_result``, per-head outputs) is read at call time: switched on later, it works."""
    from helpers import tiny_model

    model = tiny_model("llama").requires_grad_(False)
    tokens, _ = _padded(tokenizer)
    with torch.no_grad():
        plain = model(tokens)
        calls = sdpa_calls.calls
        model.set_use_attn_result(True)
        _, cache = model.run_with_cache(tokens, names_filter=lambda n: n.endswith("hook_result"))
        per_head = model(tokens)
        assert sdpa_calls.calls == calls and "blocks.0.attn.hook_result" in cache
        model.set_use_attn_result(False)
        model(tokens)
    assert sdpa_calls.calls == calls + model.cfg.n_layers
    assert (per_head - plain).abs().max() < 1e-5


@pytest.mark.parametrize("arch", ("llama", "llama3", "qwen2", "mistral_window", "mistral_window_wide", "gemma3",
                                  "gemma3_wide"))
@pytest.mark.parametrize("padded", [False, True])
def test_a_shared_prefix_equals_the_repeated_cache(family_models, tokenizer, monkeypatch, arch, padded):
    """A block after a :class:`SharedPrefix` (each prefix read once by its rows, the per-position engine's suffix
    passes) gives TransformerLens's frozen cache's numbers with the prefixes repeated per row; a local layer whose
    window hides some key takes TransformerLens's own path, one whose window spans the prompt (``_wide``: Gemma 3's
    512 tokens over short prompts) the fused one. Gemma 3: the local layer 0, with its QK norm (the keys given are
    ``hook_k``'s, as :meth:`~circuits.models.backend.Backend.block_runner` takes them, normed as the cache holds them)."""
    import circuits.models.attention as A
    from circuits.models._hooked import _cached_keys

    wide = arch.endswith("_wide")
    model = family_models(arch.removesuffix("_wide"))
    if wide:
        monkeypatch.setattr(model.cfg, "window_size", 1000)
    shared = _Count(A._shared_prefix_forward)
    monkeypatch.setattr(A, "_shared_prefix_forward", shared)
    tokens, mask = _padded(tokenizer)
    tokens, mask = tokens[:2], mask[:2]  # G = 2 prefixes: the first unpadded, the second left-padded
    if not padded:
        tokens, mask = tokens[:1].repeat(2, 1), None
    n, reps = tokens.shape[1] - 3, 3  # a body of 3 tokens after n
    layer = 0 if arch.startswith("gemma3") else 1
    assert model.blocks[layer].attn.attn_type == ("local" if "window" in arch or "gemma3" in arch else "global")
    store = {}
    names = (f"blocks.{layer}.attn.hook_k", f"blocks.{layer}.attn.hook_v", f"blocks.{layer}.hook_resid_pre")
    with torch.no_grad():
        model.run_with_hooks(tokens, attention_mask=mask, fwd_hooks=[
            (name, lambda act, hook: store.__setitem__(hook.name, act)) for name in names])
        keys, values = _cached_keys(model, layer, store[names[0]][:, :n]), store[names[1]][:, :n]
        x = store[names[2]][:, n:].repeat(reps, 1, 1)
        x = x + 0.5 * torch.randn(x.shape, generator=torch.Generator().manual_seed(0))  # every row its own
        prefix = A.SharedPrefix(keys, values, None if mask is None else mask[:, :n])
        rows_mask = None if mask is None else mask.repeat(reps, 1)
        ours = model.blocks[layer](x, past_kv_cache_entry=prefix, attention_mask=rows_mask)
        theirs = model.blocks[layer](x, past_kv_cache_entry=prefix.materialize(len(x)), attention_mask=rows_mask)
    assert shared.calls == (0 if arch in ("mistral_window", "gemma3") else 1)
    assert (ours - theirs).abs().max() < 1e-5 and theirs.std() > 0.1
