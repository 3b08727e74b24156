"""Tiny Llama-shaped models (grouped-query attention, rotary) with the SmolLM2 tokenizer, for fast tests."""

from __future__ import annotations

import functools
import os

import torch
from transformer_lens import HookedTransformer, HookedTransformerConfig

# The test machine is a 2-core CPU shared with other jobs; two threads contending with them ran TL
# forwards ~15x slower than one thread. OMP_NUM_THREADS overrides.
if "OMP_NUM_THREADS" not in os.environ:
    torch.set_num_threads(1)


@functools.lru_cache(maxsize=1)
def smollm2_tokenizer():
    from transformers import AutoTokenizer

    from circuits import models

    cache = models._gguf_cache_dir(models.embedded_gguf_path())
    if not (cache / "done").is_file():
        models.load_model("smollm2")  # writes the cache, tokenizer included
    return AutoTokenizer.from_pretrained(cache / "tokenizer", local_files_only=True)


def tiny_model(n_layers: int = 3, n_heads: int = 4, n_kv: int | None = 2, seed: int = 0) -> HookedTransformer:
    """A random 3-layer GQA model over SmolLM2's 49152-token vocabulary (d_model 32)."""
    tok = smollm2_tokenizer()
    cfg = HookedTransformerConfig(
        n_layers=n_layers, d_model=32, d_head=8, n_heads=n_heads, d_mlp=64, d_vocab=len(tok), n_ctx=512,
        act_fn="silu", normalization_type="RMS", positional_embedding_type="rotary", rotary_dim=8,
        gated_mlp=True, final_rms=True, n_key_value_heads=n_kv, original_architecture="LlamaForCausalLM",
        default_prepend_bos=False, tokenizer_prepends_bos=False, seed=seed, device="cpu",
    )
    model = HookedTransformer(cfg, tokenizer=tok)
    torch.manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.split(".")[-1].startswith(("b_", "_b_")):
                p.normal_(0, 0.02)  # nonzero biases so bias slices are exercised
    model.eval()
    return model
