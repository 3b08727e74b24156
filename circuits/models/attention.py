"""Attention through :func:`torch.nn.functional.scaled_dot_product_attention` when nothing reads the pattern.

TransformerLens's attention builds the full ``[batch head query key]`` scores, masks them with ``torch.where``,
takes the softmax, removes NaNs, and multiplies by the values, each a separate tensor the size of the pattern, so
that ``hook_attn_scores`` and ``hook_pattern`` can read or change them. When neither has a hook, none of that has
to exist: torch's fused kernel gives the same ``z`` from ``q``, ``k``, ``v`` and the same boolean mask. On a
1,024-token SmolLM2 forward the pattern's masking, softmax and scaling were half the time (a 5-shot MMLU prompt
is 300-2,300 tokens), on a GPU the fused kernel also never holds the pattern in memory.

Everything else is TransformerLens's own code, called as its forward calls it: ``calculate_qkv_matrices`` (with
``hook_q``/``hook_k``/``hook_v`` and any q/k norm), the key/value cache, ``apply_rotary`` (``hook_rot_q``/``k``,
left padding), ``_make_causal_mask`` (local windows) and the padding mask, ``hook_z`` and the output projection.
So patching at ``hook_z``, ``hook_q``, ``hook_v`` ... is unchanged. A hook on ``hook_attn_scores`` or ``hook_pattern``
(``run_with_cache`` of all activations, attention figures), or any architecture feature this path does not
reproduce (score soft-capping, attention sinks, ALiBi, relative position bias, log-n scaling, OLMo's q/k norm and
clipping, 4-bit weights), and any layer while ``use_attn_result`` is on (``hook_result``), runs TransformerLens's own
forward instead.

Only the HookedTransformer backend (TransformerLens 3.9) has this path; a TransformerBridge runs its own attention.

The result equals TransformerLens's up to float rounding (the kernel sums in another order: about 1e-6 relative
in float32, tested against it on padded, cached, grouped-query and windowed attention). :func:`load_model` turns
it on; ``fused_attention(model, False)`` turns it off for a model.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import einops
import torch
import torch.nn.functional as F
from torch import Tensor
from transformer_lens.components.abstract_attention import AbstractAttention  # TransformerLens 3's (a Bridge runs its own)

from circuits.models.backend import softcap_enabled

_FLAG = "_circuits_fused_attention"
_OLMO = ("OlmoeForCausalLM", "Olmo2ForCausalLM", "Olmo3ForCausalLM")
_eager_forward = AbstractAttention.forward


def unsupported(cfg: Any) -> str | None:
    """Why a model with this config cannot use the fused path (``None`` when it can)."""
    checks = {
        f"positional embedding {cfg.positional_embedding_type!r}": cfg.positional_embedding_type not in ("rotary", "standard"),
        "attention score soft-capping": softcap_enabled(cfg.attn_scores_soft_cap),
        "attention sinks": bool(getattr(cfg, "use_attention_sinks", False)),
        "log-n attention scaling": bool(getattr(cfg, "use_logn_attn", False)),
        "OLMo q/k norm": cfg.original_architecture in _OLMO,
        "q/k/v clipping": getattr(cfg, "clip_qkv", None) is not None,
        "4-bit weights": bool(cfg.load_in_4bit),
        f"attention direction {cfg.attention_dir!r}": cfg.attention_dir != "causal",
    }
    reasons = [name for name, bad in checks.items() if bad]
    return ", ".join(reasons) or None


def fused_attention(model: Any, enabled: bool = True) -> bool:
    """Let ``model``'s attention layers use the fused kernel when no hook reads their scores or pattern.

    Returns whether the fused path is on (``False`` when the model's architecture needs the eager one). Only a
    ``HookedTransformer`` has it: this module is imported by its backend (:mod:`circuits.models._hooked`)."""
    on = bool(enabled) and unsupported(model.cfg) is None
    for block in model.blocks:
        setattr(block.attn, _FLAG, on)
    return on


def _pattern_read(attn: AbstractAttention) -> bool:
    return _hooked_point(attn.hook_attn_scores) or _hooked_point(attn.hook_pattern)


@dataclass
class SharedPrefix:
    """One layer's cached keys and values ``[G, n, kv_head, d_head]`` (unrotated, as ``hook_k``/``hook_v`` hold them;
    left-padded with ``mask [G, n]``, 1 on real positions, or ``None``) read by every ``G``-th row of the batch: row
    ``r`` of a forward continues prefix ``r % G`` (the rows are ``rows / G`` copies of the ``G`` prefixes, in order).

    Passed as ``past_kv_cache_entry`` (with the rows' ``attention_mask`` as TransformerLens takes it, prefix then
    body), the fused path reads each prefix's keys once for all its rows (rotated once, never repeated per row or
    per query head); everywhere else (the eager path, a local window that hides some key, a hook on ``hook_rot_k``) it becomes
    TransformerLens's own frozen cache entry with the prefixes repeated per row (:meth:`materialize`): the same
    numbers up to float rounding."""

    keys: Tensor
    values: Tensor
    mask: Tensor | None = None

    def materialize(self, rows: int) -> Any:
        from transformer_lens.cache.key_value_cache_entry import TransformerLensKeyValueCacheEntry

        reps = rows // len(self.keys)
        return TransformerLensKeyValueCacheEntry(past_keys=self.keys.repeat(reps, 1, 1, 1),
                                                 past_values=self.values.repeat(reps, 1, 1, 1), frozen=True)


def _hooked_point(hook_point: Any) -> bool:
    return bool(hook_point._forward_hooks or hook_point._forward_pre_hooks or hook_point._backward_hooks
                or hook_point._backward_pre_hooks)


def _shared_prefix_forward(self: AbstractAttention, query_input, key_input, value_input, prefix: SharedPrefix,
                           attention_mask) -> Tensor:
    """:func:`_forward` after a :class:`SharedPrefix`: the rows' queries against their prefix's keys as one batched
    product per prefix and key/value head (``[G, kv_head, rows / G x body x group, n]``), against the body's own
    keys causally, one softmax over both (in float32), ``hook_z`` and the output projection as :func:`_forward`."""
    q, k, v = self.calculate_qkv_matrices(query_input, key_input, value_input)
    R, S, H, D = q.shape
    G, n, KV = prefix.keys.shape[0], prefix.keys.shape[1], prefix.keys.shape[2]
    reps, grp = R // G, H // KV
    assert reps * G == R and grp * KV == H and k.size(2) == KV, "rows must be copies of the prefixes' rows"
    keys_p, values_p = prefix.keys.to(k.dtype), prefix.values.to(v.dtype)
    if self.cfg.positional_embedding_type == "rotary":
        q = self.hook_rot_q(self.apply_rotary(q, n, attention_mask))
        k = self.hook_rot_k(self.apply_rotary(k, n, attention_mask))
        keys_p = self.apply_rotary(keys_p, 0, prefix.mask)
    scale = 1.0 / self.attn_scale
    f32 = torch.float32
    # Against the prefix: [G, KV, reps * S * grp, n]
    qp = q.to(f32).reshape(reps, G, S, KV, grp, D).permute(1, 3, 0, 2, 4, 5).reshape(G, KV, reps * S * grp, D)
    s_p = torch.matmul(qp, keys_p.to(f32).permute(0, 2, 3, 1)) * scale
    if prefix.mask is not None:
        s_p = s_p.masked_fill(~prefix.mask.bool()[:, None, None, :].to(s_p.device), float("-inf"))
    # Against the body, causally: [R, KV, S * grp, S] -> [G, KV, reps * S * grp, S] (the prefix's layout)
    qs = q.to(f32).reshape(R, S, KV, grp, D).permute(0, 2, 1, 3, 4).reshape(R, KV, S * grp, D)
    s_s = torch.matmul(qs, k.to(f32).permute(0, 2, 3, 1)) * scale
    causal = torch.arange(S, device=q.device)[None, :] <= torch.arange(S, device=q.device)[:, None]  # [query, key]
    s_s = s_s.masked_fill(~causal.repeat_interleave(grp, 0), float("-inf"))
    s_s = s_s.reshape(reps, G, KV, S * grp, S).permute(1, 2, 0, 3, 4).reshape(G, KV, reps * S * grp, S)
    top = torch.maximum(s_p.amax(-1, keepdim=True), s_s.amax(-1, keepdim=True))
    e_p, e_s = (s_p - top).exp(), (s_s - top).exp()
    total = e_p.sum(-1, keepdim=True) + e_s.sum(-1, keepdim=True)
    z = torch.matmul(e_p, values_p.to(f32).permute(0, 2, 1, 3))  # [G, KV, reps * S * grp, D]
    vs = v.to(f32).reshape(reps, G, S, KV, D).permute(1, 3, 0, 2, 4)  # [G, KV, reps, S, D]
    es = e_s.reshape(G, KV, reps, S * grp, S)
    z = (z.reshape(G, KV, reps, S * grp, D) + torch.matmul(es, vs)) / total.reshape(G, KV, reps, S * grp, 1)
    # [G, KV, reps, S, grp, D] -> [reps, G, S, KV, grp, D] = [R, S, H, D]
    z = z.reshape(G, KV, reps, S, grp, D).permute(2, 0, 3, 1, 4, 5).reshape(R, S, H, D)
    return _project_out(self, self.hook_z(z.to(v.dtype)))


def _window_hides(self: AbstractAttention, prefix: SharedPrefix, query_input: Tensor) -> bool:
    """Whether a local layer's window hides a key from a query of this pass: not when the window spans the prefix's
    columns and the body together (Gemma 3's 512-token windows over short prompts), where the fused path, which
    has no window, is exact."""
    return self.attn_type == "local" and prefix.keys.size(1) + query_input.size(1) > int(self.cfg.window_size)


def _project_out(self: AbstractAttention, z: Tensor) -> Tensor:
    """``z [batch pos head d_head]`` through ``W_O`` and ``b_O`` (moved to ``z``'s device, ``z`` to their dtype)."""
    w = einops.rearrange(self.W_O, "head_index d_head d_model -> d_model (head_index d_head)").contiguous()
    b_O = self.b_O
    if w.device != z.device:
        w, b_O = w.to(z.device), b_O.to(z.device)
    if z.dtype != w.dtype:
        z = z.to(w.dtype)
    return F.linear(z.reshape(z.shape[0], z.shape[1], -1), w, b_O)


def _forward(self: AbstractAttention, query_input, key_input, value_input, past_kv_cache_entry=None,
             additive_attention_mask=None, attention_mask=None, position_bias=None):
    eager = (not getattr(self, _FLAG, False) or self.cfg.use_attn_result or additive_attention_mask is not None
             or position_bias is not None
             or getattr(self, "_attention_dir_override", None) not in (None, "causal") or _pattern_read(self))
    if isinstance(past_kv_cache_entry, SharedPrefix):
        if eager or _window_hides(self, past_kv_cache_entry, query_input) or _hooked_point(self.hook_rot_k):
            past_kv_cache_entry = past_kv_cache_entry.materialize(query_input.size(0))
        else:
            return _shared_prefix_forward(self, query_input, key_input, value_input, past_kv_cache_entry,
                                          attention_mask)
    if eager:
        return _eager_forward(self, query_input, key_input, value_input, past_kv_cache_entry=past_kv_cache_entry,
                              additive_attention_mask=additive_attention_mask, attention_mask=attention_mask,
                              position_bias=position_bias)
    q, k, v = self.calculate_qkv_matrices(query_input, key_input, value_input)
    if past_kv_cache_entry is not None:
        offset = past_kv_cache_entry.past_keys.size(1)
        k, v = past_kv_cache_entry.append(k, v)
    else:
        offset = 0
    if self.cfg.positional_embedding_type == "rotary":
        q = self.hook_rot_q(self.apply_rotary(q, offset, attention_mask))
        k = self.hook_rot_k(self.apply_rotary(k, 0, attention_mask))
    if k.size(2) != q.size(2):  # grouped-query attention: each key/value head serves a group of query heads
        k = torch.repeat_interleave(k, dim=2, repeats=q.size(2) // k.size(2))
        v = torch.repeat_interleave(v, dim=2, repeats=q.size(2) // v.size(2))
    q_, k_, v_ = (einops.rearrange(x, "batch pos head d_head -> batch head pos d_head") for x in (q, k, v))
    scale = 1.0 / self.attn_scale
    if attention_mask is None and offset == 0 and self.attn_type != "local" and q.size(1) == k.size(1):
        z = F.scaled_dot_product_attention(q_, k_.to(q_.dtype), v_.to(q_.dtype), is_causal=True, scale=scale)
    else:
        mask = self._make_causal_mask(q.size(1), k.size(1), offset, q.device)  # [1 1 query key]
        if attention_mask is not None:
            mask = mask & attention_mask.to(q.device).bool()[:, None, None, :]
        # A query with no key to attend to (a left pad) gets zeros, as TransformerLens's NaN-to-zero gives it.
        alive = mask.any(-1, keepdim=True)
        z = F.scaled_dot_product_attention(q_, k_.to(q_.dtype), v_.to(q_.dtype), attn_mask=mask | ~alive, scale=scale)
        z = z.masked_fill(~alive, 0.0)
    return _project_out(self, self.hook_z(einops.rearrange(z.to(v.dtype), "batch head pos d_head -> batch pos head d_head")))


def _install() -> None:
    if getattr(AbstractAttention.forward, "_circuits", False):
        return
    _forward._circuits = True  # type: ignore[attr-defined]
    AbstractAttention.forward = _forward  # type: ignore[method-assign]


_install()
