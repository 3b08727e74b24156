"""Shared fixtures for the validate tests: a tiny Llama-shaped model (grouped-query attention, rotary)
with SmolLM2's tokenizer, and prompt pairs on it. Built once per process (``lru_cache``), read-only."""

from __future__ import annotations

import functools
import tempfile

import torch

from circuits.models import _gguf_cache_dir, embedded_gguf_path, load_model
from circuits.prompts import PairConfig, build_pairs


@functools.lru_cache(maxsize=1)
def smollm2_tokenizer():
    from transformers import AutoTokenizer

    tok_dir = _gguf_cache_dir(embedded_gguf_path()) / "tokenizer"
    if not tok_dir.is_dir():
        return smollm2().tokenizer  # the first load writes the cache
    return AutoTokenizer.from_pretrained(tok_dir, local_files_only=True)


@functools.lru_cache(maxsize=1)
def tiny_model():
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=49152, hidden_size=64, intermediate_size=128, num_hidden_layers=4,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                      tie_word_embeddings=True)
    hf = LlamaForCausalLM(cfg)
    with torch.no_grad():  # larger weights than the default init, so heads matter
        for p in hf.parameters():
            if p.dim() == 2:
                p.normal_(0, 0.2)
    d = tempfile.mkdtemp(prefix="tiny_validate_")
    hf.save_pretrained(d)
    smollm2_tokenizer().save_pretrained(d)
    return load_model(d, device="cpu")


@functools.lru_cache(maxsize=1)
def tiny_pairs():
    return build_pairs(tiny_model(), PairConfig(task="addition", n_pairs=18, filter_correct=False, few_shot="on")).pairs


@functools.lru_cache(maxsize=1)
def smollm2():
    return load_model("smollm2", device="cpu")
