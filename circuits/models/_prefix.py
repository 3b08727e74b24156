"""What both backends share for running many distinct prompt prefixes once (:meth:`~circuits.models.backend.Backend.run_prefixes`):
grouping the distinct prefixes into buckets of similar length, left-padding each bucket, and laying the per-layer
keys and values of every bucket side by side, one row per prompt. The backends differ only in how one padded bucket
runs (TransformerLens 3's key/value cache, or Hugging Face's ``DynamicCache`` on a TransformerBridge) and in the
state they build from the result.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from jaxtyping import Float, Int
from torch import Tensor

# one left-padded bucket ``[row, width]`` with its mask -> per layer keys and values ``[row, width, kv_head, d_head]``
RunBucket = Callable[[Tensor, Tensor], tuple[list[Tensor], list[Tensor]]]


@dataclass
class PrefixKV:
    """Keys and values of left-padded prefixes, one row per prompt: ``keys[l]``/``values[l]`` ``[row, n, kv_head,
    d_head]`` in the layout of the backend's cache (zero at padding), ``mask`` ``[row, n]`` (1 real, 0 padding)."""

    keys: list[Float[Tensor, "row n kv_head d_head"]]
    values: list[Float[Tensor, "row n kv_head d_head"]]
    mask: Int[Tensor, "row n"]


@torch.no_grad()
def distinct_prefixes(tokens: Int[Tensor, "row pos"], lengths: Int[Tensor, " row"], run: RunBucket) -> PrefixKV | None:
    """Each row's first ``lengths[i]`` tokens, every distinct prefix run once (by ``run``), in buckets of similar
    length (a bucket grows while it stays within 1.2x of its real tokens), left-padded to one width ``max(lengths)``;
    ``None`` when every length is 0."""
    n_max = int(lengths.max()) if len(lengths) else 0
    if n_max == 0:
        return None
    device = tokens.device
    rows = [tuple(tokens[i, : int(lengths[i])].tolist()) for i in range(len(tokens))]
    distinct = sorted(set(rows), key=len, reverse=True)
    index = {r: i for i, r in enumerate(distinct)}
    keys: list[Tensor] = []
    values: list[Tensor] = []
    mask = torch.zeros(len(distinct), n_max, dtype=torch.long, device=device)
    start = 0
    while start < len(distinct):
        stop, real = start + 1, len(distinct[start])
        while stop < len(distinct) and len(distinct[start]) * (stop + 1 - start) <= 1.2 * (real + len(distinct[stop])):
            real += len(distinct[stop])
            stop += 1
        width = len(distinct[start])
        part = torch.zeros(stop - start, width, dtype=torch.long, device=device)
        pmask = torch.zeros_like(part)
        for j, r in enumerate(distinct[start:stop]):
            part[j, width - len(r):] = torch.tensor(r, device=device)
            pmask[j, width - len(r):] = 1
        ks, vs = run(part, pmask)
        if not keys:
            keys = [k.new_zeros(len(distinct), n_max, *k.shape[2:]).to(device) for k in ks]
            values = [v.new_zeros(len(distinct), n_max, *v.shape[2:]).to(device) for v in vs]
        real_cols = pmask[:, :, None, None].to(ks[0].dtype)
        for layer, (k, v) in enumerate(zip(ks, vs)):
            keys[layer][start:stop, n_max - width:] = (k * real_cols.to(k.device)).to(device)
            values[layer][start:stop, n_max - width:] = (v * real_cols.to(v.device)).to(device)
        mask[start:stop, n_max - width:] = pmask
        start = stop
    pick = torch.tensor([index[r] for r in rows], device=device)
    return PrefixKV([k[pick] for k in keys], [v[pick] for v in values], mask[pick])


def repeat_heads(kv: PrefixKV, group: int) -> PrefixKV:
    """``kv`` with each key/value head repeated ``group`` times in order (one per query head, as grouped-query
    attention reads them)."""
    if group == 1:
        return kv
    return PrefixKV([k.repeat_interleave(group, dim=2) for k in kv.keys],
                    [v.repeat_interleave(group, dim=2) for v in kv.values], kv.mask)


def select_rows(kv: PrefixKV, rows: Tensor) -> PrefixKV:
    """``kv``'s rows ``rows`` (indices, repeats allowed), in that order."""
    return PrefixKV([k[rows.to(k.device)] for k in kv.keys], [v[rows.to(v.device)] for v in kv.values],
                    kv.mask[rows.to(kv.mask.device)])
