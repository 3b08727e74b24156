"""Forward passes that read only the last position, running shared few-shot prefixes once.

Prompts built from one template share their few-shot prefix token for token, and the prefix is
most of each prompt. :func:`end_residuals` runs a shared prefix once into TransformerLens's
key/value cache, repeats the cache along the batch, and runs only the rest of each prompt. Causal
attention makes this exact (tests compare it with full forwards).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence

import torch
from jaxtyping import Float
from torch import Tensor
from transformer_lens import HookedTransformer
from transformer_lens.cache.key_value_cache import TransformerLensKeyValueCache

HooksFor = Callable[[Hashable, int], list]  # (group key, position offset) -> forward hooks


@torch.no_grad()
def end_residuals(
    model: HookedTransformer,
    token_ids: Sequence[Sequence[int]],
    prefix_lengths: Sequence[int] | None = None,
    *,
    group_keys: Sequence[Hashable] | None = None,
    hooks: HooksFor | None = None,
    batch_size: int = 64,
) -> Float[Tensor, "row d_model"]:
    """The residual stream after the last block at each row's last token.

    Args:
        token_ids: one token list per row (right-padded internally; pads after the last token never
            reach it).
        prefix_lengths: tokens at the start of each row that other rows may share; rows whose
            prefixes are equal run them once. ``None`` or 0: no sharing.
        group_keys: rows run together only when their keys are equal (e.g. one key per set of hooks).
        hooks: ``hooks(key, offset)`` gives the forward hooks for a group; ``offset`` is the position
            of the first token fed in that call (0 for a prefix, the prefix length for the rest).
    """
    device = model.cfg.device
    L = model.cfg.n_layers
    groups: dict[tuple, list[int]] = {}
    for i, ids in enumerate(token_ids):
        n_pre = prefix_lengths[i] if prefix_lengths else 0
        key = group_keys[i] if group_keys is not None else None
        groups.setdefault((key, tuple(ids[:n_pre])), []).append(i)
    out = torch.empty((len(token_ids), model.cfg.d_model), dtype=model.cfg.dtype, device=device)
    for (key, pre), rows in groups.items():
        rows = sorted(rows, key=lambda i: len(token_ids[i]))
        n_pre = len(pre)
        for s in range(0, len(rows), batch_size):
            chunk = rows[s : s + batch_size]
            width = max(len(token_ids[i]) for i in chunk)
            full = torch.zeros((len(chunk), width), dtype=torch.long)
            for r, i in enumerate(chunk):
                full[r, : len(token_ids[i])] = torch.tensor(list(token_ids[i]))
            full = full.to(device)
            ends = torch.tensor([len(token_ids[i]) - 1 for i in chunk], device=device)
            if not n_pre or n_pre >= width:
                with model.hooks(fwd_hooks=hooks(key, 0) if hooks else []):
                    resid = model(full, stop_at_layer=L)
            else:
                cache = TransformerLensKeyValueCache.init_cache(model.cfg, device, 1)
                prefix = full[:1, :n_pre]
                with model.hooks(fwd_hooks=hooks(key, 0) if hooks else []):
                    model(prefix, past_kv_cache=cache, attention_mask=torch.ones_like(prefix), stop_at_layer=L)
                cache.freeze()
                n = len(chunk)
                for e in cache.entries:
                    e.past_keys = e.past_keys.expand(n, *e.past_keys.shape[1:])
                    e.past_values = e.past_values.expand(n, *e.past_values.shape[1:])
                cache.previous_attention_mask = cache.previous_attention_mask.expand(n, -1)
                body = full[:, n_pre:]
                with model.hooks(fwd_hooks=hooks(key, n_pre) if hooks else []):
                    resid = model(body, past_kv_cache=cache, attention_mask=torch.ones_like(body), stop_at_layer=L)
                ends = ends - n_pre
            out[torch.tensor(chunk, device=device)] = resid[torch.arange(len(chunk), device=device), ends]
    return out


def unembed_end(model: HookedTransformer, resid: Float[Tensor, "row d_model"]) -> Float[Tensor, "row d_vocab"]:
    """Logits (float32) from final residuals: the model's own final norm and unembedding."""
    return model.unembed(model.ln_final(resid[:, None]))[:, 0].float()
