"""Precise SFT, its delta and its export on both backends (issue 23): a TransformerBridge trains the same Hugging Face
rows and columns a HookedTransformer trains as TransformerLens per-head slices.

Runs in both virtualenvs. TransformerLens 3.9 ships a ``TransformerBridge`` too, so in ``.venv`` one process holds a
``HookedTransformer`` and a Bridge built from the same tiny model folder, and the cross-backend checks (same tuned
values within 1e-5, a delta of one applied on the other) run there; in ``.venv-tl4`` (no ``HookedTransformer``) they
skip, and the Bridge-only checks run on TransformerLens 4.3's Bridge.
"""

from __future__ import annotations

import pytest
import torch

from circuits.sft import plan as hm
from circuits.sft import train as ft
from circuits.sft.data import Example, tokenize_examples
from circuits.sft.delta import apply_delta, extract_delta, read_delta

HEADS = ((1, 0), (1, 3), (2, 1))  # two query heads sharing K/V head 1 of layer 1 with head 2 unselected
TEXT = "1 + 2 = 3\n4 + 4 = 8\n3 + 5 = 8\n7 + 1 = "


def _has_hooked_transformer() -> bool:
    try:
        from transformer_lens import HookedTransformer  # noqa: F401
    except ImportError:
        return False
    return True


needs_both = pytest.mark.skipif(not _has_hooked_transformer(),
                                reason="TransformerLens 4 has no HookedTransformer to compare with (run in .venv)")


def bridge(arch: str = "llama", dtype: torch.dtype = torch.float32, folder=None):
    """A TransformerBridge of the tiny model folder of ``arch``: on TransformerLens 4 the one ``load_model`` returns;
    on 3.9 its own Bridge, processed as circuits loads (norms folded, nothing centred), with no BOS added by
    ``to_tokens`` (as circuits' HookedTransformer). ``folder``: that model folder instead of ``arch``'s."""
    from helpers import tiny_dir
    from transformer_lens.model_bridge import TransformerBridge

    from circuits.models import backend

    if backend.installed().name == "bridge":  # TransformerLens 4: the Bridge circuits loads
        from circuits.models import load_model

        return load_model(folder or tiny_dir(arch), dtype=str(dtype).removeprefix("torch."), device="cpu")
    b = TransformerBridge.boot_transformers(str(folder or tiny_dir(arch)), device="cpu", dtype=dtype)
    b.enable_compatibility_mode(disable_warnings=True, fold_ln=True, center_writing_weights=False,
                                center_unembed=False, fold_value_biases=False)
    b.cfg.default_prepend_bos = False
    return backend.attach(b)  # a Bridge built here: the registry recognises it (the Bridge backend, also on 3.9)


def hooked(arch: str = "llama"):
    from helpers import tiny_model

    return tiny_model(arch)


def _examples(tokenizer, n: int = 16):
    exs = [Example(f"{a} + {b} = ", f"{a + b}\n") for a, b in zip(range(1, n + 1), range(3, n + 3))]
    return tokenize_examples(tokenizer, exs, max_length=32)


def _config(**kw):
    base = dict(heads=HEADS, lr=1e-2, batch_size=4, micro_batch_size=2, epochs=1, max_steps=4, warmup_ratio=0.0,
                checkpoint_every=10)
    base.update(kw)
    return ft.FinetuneConfig(**base)


def _logits(model, ids):
    with torch.no_grad():
        return model(ids).logits if hasattr(model, "config") and not hasattr(model, "adapter") else model(ids)  # HF or Bridge


def _snapshot(model):
    return {n: p.detach().clone() for n, p in model.named_parameters()}


# --- the Bridge's names: TransformerLens layout over Hugging Face weights ------------------------------------------


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_tunable_tensors_are_the_bridges_own_weight_views(arch):
    """Each TransformerLens name reads exactly the Bridge's own ``W_Q``/``W_K``/``W_V``/``W_O`` (and biases), and a
    write through it lands in the Hugging Face weight the Bridge computes with."""
    b = bridge(arch)
    tensors = b.backend.tunable_tensors()
    for l in range(b.cfg.n_layers):
        attn = b.blocks[l].attn
        assert torch.equal(tensors[f"blocks.{l}.attn.W_Q"].read(), attn.W_Q)
        assert torch.equal(tensors[f"blocks.{l}.attn._W_K"].read(), attn.W_K)  # 2 K/V heads of 4: grouped names
        assert torch.equal(tensors[f"blocks.{l}.attn._W_V"].read(), attn.W_V)
        assert torch.equal(tensors[f"blocks.{l}.attn.W_O"].read(), attn.W_O)
        assert torch.equal(tensors[f"blocks.{l}.mlp.W_in"].read(), b.blocks[l].mlp.W_in)
        assert torch.equal(tensors[f"blocks.{l}.mlp.W_out"].read(), b.blocks[l].mlp.W_out)
        assert (f"blocks.{l}.attn.b_Q" in tensors) == (arch == "qwen2")
        assert f"blocks.{l}.ln1.w" not in tensors  # folded into W_Q/W_K/W_V, as on a HookedTransformer
    assert torch.equal(tensors["unembed.W_U"].read(), b.W_U)
    before = b(torch.tensor([[1, 504, 2028, 282]])).detach()
    t = tensors["blocks.1.attn.W_O"]
    t.write(torch.zeros(1, 16, 64), rows=[2])
    assert not b.blocks[1].attn.W_O[2].any() and b.blocks[1].attn.W_O[1].any()
    assert (b(torch.tensor([[1, 504, 2028, 282]])) - before).abs().max() > 1e-4


@pytest.mark.parametrize("kv_policy", ["shared", "never"])
def test_bridge_masks_touch_exactly_the_key_heads_slices(tokenizer, kv_policy):
    """Gradients reach exactly the selected heads' q/k/v rows and o_proj columns (compared with a plain loop over
    heads), scaled by n_heads / selected per layer; every other parameter gets none."""
    b = bridge("qwen2")  # Q/K/V biases too
    examples = _examples(tokenizer, 4)
    tokens, mask = ft.collate(examples, 0)

    def grads(masked: bool):
        b.zero_grad(set_to_none=True)
        plan = hm.plan_tuning(b, HEADS, kv_policy=kv_policy)
        if masked:
            hm.freeze_except(b, plan)
            handles = hm.register_gradient_masks(b, plan)
        else:
            b.requires_grad_(True)
            handles = []
        try:
            ft.sft_loss(b, tokens, mask).backward()
        finally:
            for h in handles:
                h.remove()
        return {n: (None if p.grad is None else p.grad.clone()) for n, p in b.named_parameters()}

    full, masked = grads(False), grads(True)
    d_head, group = 16, 2
    expected = {}  # HF name -> (dim, indices, scale): the plain loop over heads
    for layer in (1, 2):
        sel = [h for l, h in HEADS if l == layer]
        scale = 4 / len(sel)
        rows = [h * d_head + i for h in sel for i in range(d_head)]
        kv = sorted({h // group for h in sel})
        kv_rows = [g * d_head + i for g in kv for i in range(d_head)]
        pre = f"model.layers.{layer}.self_attn."
        expected[pre + "q_proj.weight"] = (0, rows, scale)
        expected[pre + "q_proj.bias"] = (0, rows, scale)
        expected[pre + "o_proj.weight"] = (1, rows, scale)
        if kv_policy == "shared":
            for name in ("k_proj.weight", "k_proj.bias", "v_proj.weight", "v_proj.bias"):
                expected[pre + name] = (0, kv_rows, scale)
    for key, g in masked.items():
        hf = key.replace("._original_component", "")
        if hf not in expected:
            assert g is None or not g.any(), f"{hf} got a gradient"
            continue
        dim, idx, scale = expected[hf]
        want = torch.zeros_like(full[key])
        want.index_copy_(dim, torch.tensor(idx), full[key].index_select(dim, torch.tensor(idx)) * scale)
        torch.testing.assert_close(g, want, rtol=1e-6, atol=1e-9, msg=hf)
        assert g.index_select(dim, torch.tensor(idx)).abs().sum() > 0


# --- the same training on both backends -----------------------------------------------------------------------------


@needs_both
@pytest.mark.parametrize("arch,mlps", [("llama", (0,)), ("qwen2", ()), ("qwen3", (1,)), ("gemma2", (2,)),
                                       ("gemma3", ())])
def test_precise_sft_on_bridge_equals_hooked_transformer(tmp_path, arch, mlps):
    """4 fp32 steps of Precise SFT from the same weights give the same tuned values (within 1e-5) on a Bridge and
    on a HookedTransformer, and the Bridge's untuned weights stay bit-identical."""
    h, b = hooked(arch), bridge(arch)
    before = _snapshot(b)
    # lr 1e-4 (the paper's order is 2e-5): AdamW's first steps move an entry by about lr whatever its gradient, so
    # entries whose gradient is ~0 differ by up to ~lr between two fp32 runs that round differently.
    config = _config(mlps=mlps, lr=1e-4)
    rh = ft.finetune(h, _examples(h.tokenizer), config, tmp_path / "h", progress=False)
    rb = ft.finetune(b, _examples(h.tokenizer), config, tmp_path / "b", progress=False)
    assert rb.tuned_parameters == rh.tuned_parameters and len(rb.losses) == 4
    torch.testing.assert_close(torch.tensor(rb.losses), torch.tensor(rh.losses), rtol=0, atol=1e-5)
    dh, db = read_delta(tmp_path / "h" / "delta.pt"), read_delta(tmp_path / "b" / "delta.pt")
    assert dh["plan"] == db["plan"] or sorted(dh["tensors"]) == sorted(db["tensors"])
    base = extract_delta(hooked(arch), hm.TuningPlan.from_json(dh["plan"]))
    for name, value in dh["tensors"].items():
        assert (value - base["tensors"][name]).abs().max() > 2e-4, f"{name} did not move"  # so the match bites
        assert (db["tensors"][name] - value).abs().max().item() < 1e-5, name
    # The models themselves: every Bridge weight view equals the HookedTransformer's.
    for layer in (1, 2):
        for w in ("W_Q", "W_O"):
            assert (getattr(b.blocks[layer].attn, w) - getattr(h.blocks[layer].attn, w)).abs().max() < 1e-5
    tuned = {t.key for name, t in b.backend.tunable_tensors().items() if name in dh["tensors"]}
    for key, p in b.named_parameters():
        if key not in tuned:
            assert torch.equal(p, before[key]), key
    ids = torch.tensor([h.tokenizer(TEXT).input_ids])
    assert (_logits(b, ids) - _logits(h, ids)).abs().max() < 1e-4


@needs_both
@pytest.mark.parametrize("arch", ["llama", "gemma2"])
def test_full_sft_on_bridge_equals_hooked_transformer(tmp_path, arch):
    """Full SFT (every weight, Gemma's scaled embedding included) steps the same values on both backends."""
    h, b = hooked(arch), bridge(arch)
    config = _config(full=True, heads=(), lr=2e-5, max_steps=3)  # the paper's lr (see the Precise SFT test)
    ft.finetune(h, _examples(h.tokenizer), config, tmp_path / "h", progress=False)
    ft.finetune(b, _examples(h.tokenizer), config, tmp_path / "b", progress=False)
    dh, db = read_delta(tmp_path / "h" / "delta.pt"), read_delta(tmp_path / "b" / "delta.pt")
    assert set(db["tensors"]) == set(dh["tensors"])
    for name, value in dh["tensors"].items():
        assert (db["tensors"][name] - value).abs().max().item() < 1e-5, name
    ids = torch.tensor([h.tokenizer(TEXT).input_ids])
    assert (_logits(b, ids) - _logits(h, ids)).abs().max() < 1e-4


@needs_both
def test_delta_of_one_backend_applies_on_the_other(tmp_path, tokenizer):
    """A Bridge's delta.pt put on a fresh HookedTransformer gives the tuned Bridge's logits, and the other way."""
    b = bridge("llama")
    ft.finetune(b, _examples(tokenizer), _config(mlps=(2,)), tmp_path / "b", progress=False)
    h = hooked("llama")
    ft.finetune(h, _examples(tokenizer), _config(heads=((0, 1), (2, 2))), tmp_path / "h", progress=False)
    ids = torch.tensor([tokenizer(TEXT).input_ids])
    on_h = apply_delta(hooked("llama"), tmp_path / "b" / "delta.pt")
    assert (_logits(on_h, ids) - _logits(b, ids)).abs().max() < 1e-4
    assert (_logits(on_h, ids) - _logits(hooked("llama"), ids)).abs().max() > 1e-3
    on_b = apply_delta(bridge("llama"), tmp_path / "h" / "delta.pt")
    assert (_logits(on_b, ids) - _logits(h, ids)).abs().max() < 1e-4


def test_bridge_delta_applies_exactly_and_refuses_another_model(tmp_path, tokenizer):
    b = bridge("llama")
    ft.finetune(b, _examples(tokenizer), _config(), tmp_path / "b", progress=False)
    fresh = bridge("llama")
    apply_delta(fresh, tmp_path / "b" / "delta.pt")
    for (n, p), (_, q) in zip(b.named_parameters(), fresh.named_parameters()):
        assert torch.equal(p, q), n
    delta = read_delta(tmp_path / "b" / "delta.pt")
    delta["tensors"]["blocks.1.attn.W_Q"] = delta["tensors"]["blocks.1.attn.W_Q"][:, :32]
    other = bridge("llama")
    snap = _snapshot(other)
    with pytest.raises(ValueError, match="made for another model"):
        apply_delta(other, delta)
    assert all(torch.equal(p, snap[n]) for n, p in other.named_parameters())


# --- training options on the Bridge ---------------------------------------------------------------------------------


def test_bridge_resume_equals_uninterrupted(tmp_path, tokenizer, monkeypatch):
    from circuits.sft import train

    config = _config(checkpoint_every=2)
    straight = bridge("llama")
    ft.finetune(straight, _examples(tokenizer), config, tmp_path / "a", progress=False)
    calls = {"n": 0}
    real = train.collate

    def crash_on_step3(batch, pad_id):
        calls["n"] += 1
        if calls["n"] == 5:  # 2 micro-batches per step: call 5 starts step 3
            raise KeyboardInterrupt
        return real(batch, pad_id)

    monkeypatch.setattr(train, "collate", crash_on_step3)
    with pytest.raises(KeyboardInterrupt):
        ft.finetune(bridge("llama"), _examples(tokenizer), config, tmp_path / "b", progress=False)
    monkeypatch.setattr(train, "collate", real)
    resumed = bridge("llama")
    result = ft.finetune(resumed, _examples(tokenizer), config, tmp_path / "b", progress=False)
    assert result.resumed_from == 2
    for (n, p), (_, q) in zip(straight.named_parameters(), resumed.named_parameters()):
        assert torch.equal(p, q), n


def test_bridge_bf16_trains_on_fp32_masters_and_leaves_frozen_rows(tmp_path, tokenizer):
    """bf16 on the Bridge: the step moves the tuned rows (fp32 masters cast in), frozen rows stay bit-identical, and
    the delta (fp32 masters) applied on a fresh bf16 Bridge reproduces the tuned one exactly."""
    b = bridge("llama", torch.bfloat16)
    before = _snapshot(b)
    ft.finetune(b, _examples(tokenizer), _config(dtype="bfloat16", lr=1e-3), tmp_path / "b", progress=False)
    delta = read_delta(tmp_path / "b" / "delta.pt")
    assert all(v.dtype == torch.float32 for v in delta["tensors"].values())
    t = b.backend.tunable_tensors()["blocks.1.attn.W_Q"]
    now, was = t.read(), t.on(before[t.key]).read()
    assert (now[[0, 3]].float() != was[[0, 3]].float()).float().mean() > 0.5  # most tuned entries moved
    assert torch.equal(now[[1, 2]], was[[1, 2]])  # unselected heads of a tuned layer untouched
    fresh = apply_delta(bridge("llama", torch.bfloat16), tmp_path / "b" / "delta.pt")
    for (n, p), (_, q) in zip(b.named_parameters(), fresh.named_parameters()):
        assert torch.equal(p, q), n


def test_full_sft_on_bridge_tunes_every_weight_but_folded_norms(tmp_path, tokenizer):
    b = bridge("llama")
    plan = hm.full_plan(b)
    names = set(plan.names)
    assert "embed.W_E" in names and "unembed.W_U" in names and "blocks.2.mlp.W_gate" in names
    assert not any(n.endswith(("ln1.w", "ln2.w", "ln_final.w")) for n in names)
    before = _snapshot(b)
    ft.finetune(b, _examples(tokenizer), _config(full=True, heads=(), lr=1e-3, max_steps=2), tmp_path / "f",
                progress=False)
    changed = {n.replace("._original_component", "") for n, p in b.named_parameters() if not torch.equal(p, before[n])}
    assert "model.layers.0.self_attn.k_proj.weight" in changed and "lm_head.weight" in changed
    assert not any("layernorm" in n or n == "model.norm.weight" for n in changed)
    fresh = apply_delta(bridge("llama"), tmp_path / "f" / "delta.pt")
    for (n, p), (_, q) in zip(b.named_parameters(), fresh.named_parameters()):
        assert torch.equal(p, q), n


# --- export ---------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("arch,mlps", [("llama", (0,)), ("qwen2", ())])
def test_export_of_a_bridge_delta_equals_the_tuned_bridge_in_transformers(tmp_path, tokenizer, arch, mlps):
    from transformers import AutoModelForCausalLM

    from circuits.sft.export import export_model
    from helpers import tiny_dir

    b = bridge(arch)
    ft.finetune(b, _examples(tokenizer), _config(mlps=mlps), tmp_path / "ft", progress=False)
    out = export_model(tmp_path / "ft" / "delta.pt", tmp_path / "my-model", model=str(tiny_dir(arch)))
    exported = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32).eval()
    base = AutoModelForCausalLM.from_pretrained(tiny_dir(arch), dtype=torch.float32).eval()
    assert set(exported.state_dict()) == set(base.state_dict())
    ids = torch.tensor([tokenizer(TEXT).input_ids])
    theirs = _logits(exported, ids)
    assert (theirs - _logits(b, ids)).abs().max().item() < 1e-4
    assert (theirs - _logits(base, ids)).abs().max().item() > 1e-2  # the tuning shows, so equality bites


@pytest.mark.parametrize("arch", ["llama", "qwen2", "qwen3", "gemma2", "gemma3", "mistral"])
def test_reference_state_dict_without_transformer_lens_equals_its_conversion(arch):
    """``hf_weights.tl_state_dict`` (what export reads on TransformerLens 4, which converts no more) equals
    TransformerLens 3.9's own conversion of the same model, name for name."""
    from helpers import tiny_hf_model

    from circuits.models.hf_weights import tl_state_dict

    hf = tiny_hf_model(arch, vocab_size=300)
    ours = tl_state_dict(hf)
    assert "blocks.0.attn.W_Q" in ours and "unembed.W_U" in ours and "blocks.0.ln1.w" in ours
    if not _has_hooked_transformer():
        return
    from circuits.models.loading import convert_hf_weights, tl_config_from_hf

    theirs = convert_hf_weights(hf, tl_config_from_hf(hf.config, torch.float32, "cpu"))
    for name, value in ours.items():
        assert name in theirs, name
        torch.testing.assert_close(value, theirs[name].float(), rtol=0, atol=1e-6, msg=name)
    missing = {n for n, v in theirs.items() if n not in ours and v.any() and "IGNORE" not in n and "mask" not in n}
    assert not missing, missing


# --- the job and the command line -----------------------------------------------------------------------------------


def test_finetune_and_export_commands_on_the_loaded_model(tmp_path, tokenizer):
    """``circuits finetune`` then ``circuits export`` on the model ``load_model`` gives this line (a Bridge on
    TransformerLens 4): the exported checkpoint computes the tuned model's logits in transformers."""
    from transformers import AutoModelForCausalLM

    from circuits.cli import main as cli
    from circuits.models import load_model
    from helpers import tiny_dir

    folder = str(tiny_dir("llama"))
    assert cli(["finetune", "--model", folder, "--heads", "1.0,1.3,2.1", "--mlps", "2", "--data", "arithmetic",
                "--n-arithmetic", "16", "--steps", "3", "--batch-size", "4", "--micro-batch-size", "2", "--lr", "1e-3",
                "--no-progress", "--out", str(tmp_path / "ft")]) == 0
    assert cli(["export", "--delta", str(tmp_path / "ft" / "delta.pt"), "--out", str(tmp_path / "exp")]) == 0
    tuned = apply_delta(load_model(folder, device="cpu"), tmp_path / "ft" / "delta.pt")
    exported = AutoModelForCausalLM.from_pretrained(tmp_path / "exp", dtype=torch.float32).eval()
    ids = torch.tensor([tokenizer(TEXT).input_ids])
    assert (_logits(exported, ids) - _logits(tuned, ids)).abs().max().item() < 1e-4
    assert (_logits(tuned, ids) - _logits(load_model(folder, device="cpu"), ids)).abs().max().item() > 1e-3
