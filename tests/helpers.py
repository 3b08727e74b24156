"""The one tiny-model factory of the tests, and the SmolLM2 tokenizer they share.

Tiny models are random Llama- or Mistral-shaped Hugging Face models (grouped-query attention, rotary) over
SmolLM2's vocabulary, saved to a folder and loaded with :func:`circuits.models.load_model`, so every tiny
test also goes through the real loading path. Weights are scaled up from the default initialisation so that
patching effects are far from 0 and comparisons bite.
"""

from __future__ import annotations

import functools
import tempfile
from pathlib import Path

import torch


@functools.lru_cache(maxsize=1)
def smollm2_tokenizer():
    """SmolLM2's own tokenizer (read from the GGUF file once, then from the cache)."""
    from circuits.models.loading import load_tokenizer

    return load_tokenizer("smollm2")


def tiny_hf_model(arch: str = "llama", *, vocab_size: int = 49152, n_layers: int = 3, seed: int = 0,
                  weight_std: float = 0.08, tie: bool = False):
    """A random tiny ``LlamaForCausalLM`` or ``MistralForCausalLM``: d_model 64, 4 heads, 2 K/V heads."""
    from transformers import LlamaConfig, LlamaForCausalLM, MistralConfig, MistralForCausalLM

    torch.manual_seed(seed)
    common = dict(vocab_size=vocab_size, hidden_size=64, intermediate_size=96, num_hidden_layers=n_layers,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512, rms_norm_eps=1e-5,
                  tie_word_embeddings=tie, bos_token_id=1, eos_token_id=2)
    if arch == "llama":
        model = LlamaForCausalLM(LlamaConfig(**common, rope_theta=10000.0))
    elif arch == "mistral":
        model = MistralForCausalLM(MistralConfig(**common, rope_theta=10000.0, sliding_window=None))
    else:
        raise ValueError(f"unknown tiny architecture {arch!r}")
    with torch.no_grad():
        for p in model.parameters():
            if p.ndim == 2:
                p.normal_(0, weight_std)
    return model.eval()


def save_tiny(folder: Path, arch: str = "llama", **kw) -> Path:
    """Save a tiny model with SmolLM2's tokenizer into ``folder`` (a Hugging Face model folder)."""
    tok = smollm2_tokenizer()
    tiny_hf_model(arch, vocab_size=len(tok), **kw).save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


@functools.lru_cache(maxsize=8)
def tiny_dir(arch: str = "llama", **kw) -> Path:
    """A saved tiny model, once per process and settings."""
    return save_tiny(Path(tempfile.mkdtemp(prefix=f"tiny-{arch}-")), arch, **dict(kw))


def tiny_model(arch: str = "llama", *, dtype: str = "float32", **kw):
    """A fresh tiny ``HookedTransformer`` (each call a new copy: tests that train may change it)."""
    from circuits.models import load_model

    return load_model(tiny_dir(arch, **kw), dtype=dtype, device="cpu")


def mixed_pairs(tokenizer, n: int = 5, seed: int = 0):
    """Pairs of several templates (different lengths, few-shot prefixes), so right padding and per-pair END and
    first difference are exercised."""
    import random

    from circuits.data.pairs import render_pair
    from circuits.data.templates import FIGURE8, FIGURE10

    rng = random.Random(seed)
    templates = [*FIGURE8["addition"], FIGURE10[1], FIGURE10[8]]
    return [render_pair(templates[i % len(templates)], 1 + i % 4, 2 + i % 3, tokenizer, rng) for i in range(n)]


def aligned_pairs(tokenizer, n: int = 3, few_shot: bool = False, seed: int = 1):
    """Pairs of one template and one length (what TransformerLens's by-position patching functions take)."""
    import random

    from circuits.data.pairs import render_pair
    from circuits.data.templates import FIGURE8

    rng = random.Random(seed)
    return [render_pair(FIGURE8["addition"][0], a, 2, tokenizer, rng, few_shot=few_shot) for a in (1, 3, 4, 5, 6)[:n]]
