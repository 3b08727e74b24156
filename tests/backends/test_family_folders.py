"""The tiny family folders of tests/helpers.py (``family_dir``: Llama, Mistral, Qwen2, Qwen3, Gemma 2, Gemma 3, two
layers, 4 query heads on 2 K/V heads) load with ``load_model`` on the installed backend (HookedTransformer on
TransformerLens 3.9, TransformerBridge on 4.3) with transformers' own logits, and grouped K/V hooks."""

from __future__ import annotations

import pytest
import torch

from helpers import BACKEND_FAMILIES, FAMILIES, family_dir, family_model


def test_backend_families_are_factory_families():
    assert set(BACKEND_FAMILIES) <= set(FAMILIES)
    assert BACKEND_FAMILIES == ("llama", "mistral", "qwen2", "qwen3", "gemma2", "gemma3")
    with pytest.raises(ValueError, match="unknown family 'gpt2'; known: llama, "):
        family_dir("gpt2")


@pytest.mark.parametrize("family", BACKEND_FAMILIES)
def test_family_folder_loads_with_transformers_logits(family, tokenizer):
    from transformers import AutoConfig

    from circuits.models import load_hf_reference

    folder = family_dir(family)
    config = AutoConfig.from_pretrained(folder)
    assert (config.num_hidden_layers, config.num_attention_heads, config.num_key_value_heads) == (2, 4, 2)
    model = family_model(family)
    assert (model.cfg.n_layers, model.cfg.n_heads, model.cfg.n_key_value_heads) == (2, 4, 2)
    ids = torch.tensor([tokenizer("1 + 2 = 3\n4 + 4 = 8\n3 + 5 = 8\n7 + 1 = 8\n2 + 6 = ").input_ids])
    hf = load_hf_reference(folder)
    with torch.no_grad():
        ours, theirs = model(ids), hf(ids).logits
        _, cache = model.run_with_cache(ids, names_filter=lambda n: n.endswith(("hook_k", "hook_z")))
    assert theirs.std() > 0.1  # not a degenerate model
    assert (ours - theirs).abs().max().item() < 1e-4
    assert cache["blocks.1.attn.hook_k"].shape == (1, ids.shape[1], 2, 16)  # K/V heads stay grouped
    assert cache["blocks.1.attn.hook_z"].shape == (1, ids.shape[1], 4, 16)


def test_family_model_is_a_fresh_copy():
    a, b = family_model("llama"), family_model("llama")
    with torch.no_grad():
        a.blocks[0].attn.W_O.mul_(0)
    assert b.blocks[0].attn.W_O.abs().max() > 0


@pytest.mark.parametrize("family", ["llama", "qwen2"])
def test_tokenizer_is_the_folders_own(family):
    """Token ids are the folder's tokenizer's on both lines (TransformerLens 4's tokenizer setter would swap in a copy
    that prepends BOS: pairs and prompts would differ from 3.9's), and to_tokens agrees with it."""
    from transformers import AutoTokenizer

    text = "3 + 5 = 8\n2 + 6 = "
    model = family_model(family)
    want = AutoTokenizer.from_pretrained(family_dir(family), local_files_only=True)(text).input_ids
    assert want[0] != model.tokenizer.bos_token_id  # SmolLM2's tokenizer adds no BOS
    assert model.tokenizer(text).input_ids == want
    assert model.to_tokens(text)[0].tolist() == want
    assert model.to_tokens(text, prepend_bos=True)[0].tolist() == [model.tokenizer.bos_token_id, *want]
    assert model.cfg.d_vocab == len(model.tokenizer)
