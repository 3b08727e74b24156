"""Tiny model builders for tests: Llama- and Mistral-shaped, grouped-query attention, rotary."""

from __future__ import annotations

from pathlib import Path

import torch


def tiny_hf_model(arch: str = "llama", vocab_size: int = 49152, seed: int = 0):
    """A randomly initialised tiny ``LlamaForCausalLM`` or ``MistralForCausalLM`` (GQA: 4 heads, 2 KV heads)."""
    from transformers import LlamaConfig, LlamaForCausalLM, MistralConfig, MistralForCausalLM

    torch.manual_seed(seed)
    common = dict(vocab_size=vocab_size, hidden_size=64, intermediate_size=96, num_hidden_layers=3,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                  rms_norm_eps=1e-5, tie_word_embeddings=False, bos_token_id=1, eos_token_id=2)
    if arch == "llama":
        model = LlamaForCausalLM(LlamaConfig(**common, rope_theta=10000.0))
    elif arch == "mistral":
        model = MistralForCausalLM(MistralConfig(**common, rope_theta=10000.0, sliding_window=None))
    else:
        raise ValueError(arch)
    # Random init is tiny; scale weights up so that patching effects are far from 0 and comparisons bite.
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.ndim == 2:
                p.mul_(4.0)
    return model.eval()


def save_tiny(tmp: Path, tokenizer, arch: str = "llama", seed: int = 0) -> Path:
    model = tiny_hf_model(arch, vocab_size=len(tokenizer), seed=seed)
    folder = tmp / f"tiny-{arch}"
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder
