"""The TransformerBridge backend (TransformerLens >= 4.3): :class:`BridgeBackend`, registered as ``"bridge"``, the
:class:`circuits.models.backend.Backend` that :func:`circuits.models.load_model` loads through and attaches to the
models it loads when TransformerLens 4.x is installed, and that :func:`circuits.models.backend.backend_of` gives any
``TransformerBridge`` (TransformerLens 3.9's own too, which fine-tuning's parity tests hold beside a
``HookedTransformer``); the contract's docstrings are :class:`~circuits.models.backend.Backend`'s.

A Bridge wraps the Hugging Face model itself: hook names and shapes are TransformerLens's (``hook_k``/``hook_v``
carry the ``n_kv_heads`` heads, as the toolkit's 3.9 models do), ``W_Q``/``W_K``/``W_V``/``W_O`` are views into the
HF ``q_proj``/``k_proj``/``v_proj``/``o_proj`` weights, and what 3.9 kept in its config or its own modules comes from
the HF model here: rotary tables (HF's ``rotary_emb``, per layer type for Gemma 3), the attention scale
(``scaling``), soft-caps, sliding windows and QK norms (the HF attention module of each layer).

:func:`circuits.models.loading.load_model` returns a :class:`CircuitsBridge` (a ``TransformerBridge`` whose class
is swapped after booting) so that two 3.9 behaviours the toolkit relies on hold on both lines:

- ``model(tokens, stop_at_layer=n_layers)`` (also through ``run_with_hooks`` and ``run_with_cache``) returns the
  residual stream after the last block, as on 3.9; TransformerLens 4.3 runs the whole forward and returns logits;
- ``past_kv_cache=`` (a TransformerLens 3.x key/value cache, which the Bridge ignores without a word, giving wrong
  numbers) is refused with one line; the Bridge's own cache is Hugging Face's (:meth:`prefix_cache`).

Shared prefixes (:meth:`prefix_cache`, :meth:`continue_prefix`) run through Hugging Face's ``DynamicCache``. With
transformers 5.24 the Bridge's attention never fills it (the ``past_key_values`` argument was renamed ``cache``;
docs/notes/transformerlens4.md, finding 1), so :meth:`prefix_sharing` runs a short check once per model (a prefix
run into the cache, then the rest, against one full run) and the engines share no prefix where the check fails:
the same numbers, at the cost of running each prompt whole.
"""

from __future__ import annotations

import inspect
import sys
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Callable, Iterator

import torch
from torch import Tensor
from transformer_lens.model_bridge import TransformerBridge
from transformer_lens.model_bridge.exceptions import StopAtLayerException
from transformer_lens.utilities import get_act_name
from transformer_lens.utilities.activation_functions import apply_softcap
from transformer_lens.utilities.architectures import POST_NORM_ARCHITECTURES

from circuits.models.backend import Backend, register
from circuits.models.hf_weights import TunableTensor
from circuits.versions import backend_line

from circuits.models._prefix import PrefixKV, distinct_prefixes, repeat_heads, select_rows

Model = TransformerBridge

_OLMO = ("OlmoeForCausalLM", "Olmo2ForCausalLM", "Olmo3ForCausalLM")
_PREFIX_OK = "_circuits_prefix_sharing"


class CircuitsBridge(TransformerBridge):
    """A ``TransformerBridge`` whose ``stop_at_layer=n_layers`` returns the final residual stream (as
    TransformerLens 3.9's ``HookedTransformer`` does) and which refuses a TransformerLens 3 ``past_kv_cache``."""

    _circuits_stopping = False

    @contextmanager
    def _stop_after_last_block(self) -> Iterator[None]:
        """While active, the forward pass ends after the last block (every hook on it has run), returning the
        residual stream it wrote."""
        if self._circuits_stopping:
            yield
            return

        def stop(module: Any, args: Any, out: Any) -> None:
            raise StopAtLayerException(out if isinstance(out, Tensor) else out[0])

        handle = self.blocks[len(self.blocks) - 1].register_forward_hook(stop)
        self._circuits_stopping = True
        try:
            yield
        finally:
            self._circuits_stopping = False
            handle.remove()

    def _to_end(self, stop_at_layer: int | None) -> bool:
        return stop_at_layer is not None and stop_at_layer >= len(self.blocks)

    def forward(self, input: Any, *args: Any, stop_at_layer: int | None = None, **kwargs: Any) -> Any:
        if kwargs.get("past_kv_cache") is not None:
            raise TypeError("past_kv_cache (a TransformerLens 3 key/value cache) is not read by a TransformerBridge; "
                            "pass Hugging Face's cache as past_key_values= (circuits.models.backend.prefix_cache)")
        kwargs.pop("past_kv_cache", None)
        if not self._to_end(stop_at_layer):
            return super().forward(input, *args, stop_at_layer=stop_at_layer, **kwargs)
        with self._stop_after_last_block():
            return super().forward(input, *args, **kwargs)

    def run_with_cache(self, *args: Any, stop_at_layer: int | None = None, **kwargs: Any) -> Any:
        if not self._to_end(stop_at_layer):
            return super().run_with_cache(*args, stop_at_layer=stop_at_layer, **kwargs)
        with self._stop_after_last_block():
            return super().run_with_cache(*args, **kwargs)


def as_circuits_bridge(bridge: TransformerBridge) -> CircuitsBridge:
    """``bridge`` itself, its class made :class:`CircuitsBridge` (no copy, no new state)."""
    if not isinstance(bridge, CircuitsBridge):
        bridge.__class__ = CircuitsBridge
    return bridge  # type: ignore[return-value]


# --- what the engines read of a model -------------------------------------------------------------


def _hf_attn(model: Model, layer: int) -> Any:
    return model.blocks[layer].attn.original_component


def _hf_config(model: Model) -> Any:
    return model.original_model.config


def _zeros(b: Tensor | None, shape: tuple[int, ...], like: Tensor) -> Tensor:
    return torch.zeros(shape, dtype=like.dtype, device=like.device) if b is None else b


def _rotary_module(model: Model) -> Any:
    inner = getattr(model.original_model, "model", model.original_model)
    rot = getattr(inner, "rotary_emb", None)
    return getattr(rot, "original_component", rot)


# --- many distinct prefixes run once, their bodies continued with gradients (attribution, EAP-IG, positions) ------
# Hugging Face's cache holds keys after rotary and any QK norm (what ``hook_rot_k`` holds), in ``[row, kv_head, pos,
# d_head]``; a :class:`Prefix` keeps them in TransformerLens's ``[row, pos, kv_head, d_head]`` and each continuation
# gets a fresh ``DynamicCache`` over them (a forward appends the body's keys to the cache it is given).


@dataclass
class Prefix:
    """Left-padded prefixes run once (:meth:`run_prefixes`, :meth:`prefix_from_kv`): their keys (rotated, as
    ``hook_rot_k`` holds them) and values, per layer, with the padding mask."""

    kv: PrefixKV
    ungrouped: bool = False


def _cache_kv(cache: Any, layer: int) -> tuple[Tensor, Tensor]:
    if hasattr(cache, "layers"):
        return cache.layers[layer].keys, cache.layers[layer].values
    return cache.key_cache[layer], cache.value_cache[layer]  # transformers before the per-layer cache objects


def _run_bucket(model: Model, part: Tensor, pmask: Tensor) -> tuple[list[Tensor], list[Tensor]]:
    from transformers import DynamicCache

    cache = DynamicCache()
    as_circuits_bridge(model)(part, past_key_values=cache, attention_mask=pmask, stop_at_layer=model.cfg.n_layers)
    kv = [_cache_kv(cache, l) for l in range(model.cfg.n_layers)]
    return [k.transpose(1, 2) for k, _ in kv], [v.transpose(1, 2) for _, v in kv]


def _rows(t: Any, G: int, reps: int) -> Any:
    """``t`` with its batch rows repeated ``reps`` times in order where it has ``G`` of them (tensors of 2 or more
    dimensions, nested in tuples too); anything else unchanged (a batch of 1 broadcasts)."""
    if isinstance(t, Tensor) and t.ndim >= 2 and t.shape[0] == G and reps > 1:  # not cache_position [pos]
        return t.repeat(reps, *([1] * (t.ndim - 1)))
    if isinstance(t, tuple):
        return tuple(_rows(u, G, reps) for u in t)
    return t


# --- fine-tuning (circuits.sft): TransformerLens names over the Hugging Face weights -----------------------
# (tl4sft) Precise SFT plans, masks, steps and saves tensors under TransformerLens's names and per-head layout; on a
# TransformerBridge those are views of the Hugging Face weights (circuits.models.hf_weights.TunableTensor).


class _FinalResidual(Exception):  # noqa: N818  (control flow, not an error)
    pass


def _without_cache(kwargs: dict) -> dict:
    """A Hugging Face layer's keywords with its key/value cache off (as transformers' own gradient checkpointing
    does): the recomputation in backward would otherwise find the cache already extended by the forward pass."""
    kwargs = dict(kwargs)
    for name in ("past_key_values", "past_key_value", "cache"):
        if name in kwargs:
            kwargs[name] = None
    if "use_cache" in kwargs:
        kwargs["use_cache"] = False
    return kwargs


class HFCacheDecoder:
    """Greedy decoding on a Bridge: Hugging Face's ``DynamicCache`` (each row's positions counted from its first
    real token) where :meth:`prefix_sharing` says it gives the full run's numbers, else the grown prompts run whole
    (left padding masked)."""

    def __init__(self, backend: BridgeBackend, tokens: Tensor, mask: Tensor) -> None:
        self.backend, self.tokens, self.seen_mask = backend, tokens, mask
        self.cache = None
        if backend.prefix_sharing():
            from transformers import DynamicCache

            self.cache = DynamicCache()

    def residual(self) -> Tensor:
        if self.cache is None:
            return self.backend.final_residual(self.tokens, attention_mask=self.seen_mask)
        positions = (self.seen_mask.cumsum(-1) - 1).clamp(min=0)[:, -self.tokens.shape[1]:]
        return self.backend.final_residual(self.tokens, attention_mask=self.seen_mask, past_key_values=self.cache,
                                           position_ids=positions)

    def append(self, next_tokens: Tensor) -> None:
        self.seen_mask = torch.cat([self.seen_mask, torch.ones_like(next_tokens[:, None])], 1)
        if self.cache is None:  # the whole sequence again
            self.tokens = torch.cat([self.tokens, next_tokens[:, None]], 1)
        else:
            self.tokens = next_tokens[:, None]


@register
class BridgeBackend(Backend):
    """A ``TransformerBridge``'s backend: what 3.9 kept in its config and attention modules is read from the wrapped
    Hugging Face model, and a shared prefix runs through Hugging Face's cache."""

    name = "bridge"
    model_class = TransformerBridge
    line = 4

    @classmethod
    def load(cls, name: str, dtype: torch.dtype, device: str | torch.device, fold_ln: bool, use_cache: bool,
             n_devices: int) -> Model:
        """:func:`circuits.models.loading.load_bridge` (over several GPUs, accelerate's ``device_map`` places it), as
        a :class:`CircuitsBridge` in eval mode."""
        from circuits.models.loading import load_bridge

        bridge = as_circuits_bridge(load_bridge(name, dtype, device, fold_ln, use_cache, n_devices))
        bridge.eval()
        return bridge

    @classmethod
    def official_name(cls, name: str) -> str | None:
        from circuits.models.loading import bridge_official_name

        return bridge_official_name(name)

    def architecture(self) -> str:
        return str(self.model.cfg.architecture)

    def n_kv_heads(self) -> int:
        return int(getattr(self.model.cfg, "n_key_value_heads", None) or self.model.cfg.n_heads)

    def post_norms(self) -> bool:
        return hasattr(self.model.blocks[0], "ln1_post")

    def end_unsupported(self) -> list[str]:
        """What the END-only engine (:mod:`circuits.patching.core.end_layers`) does not compute the way the model does. A
        Bridge the user booted without :func:`circuits.models.load_model` becomes a :class:`CircuitsBridge` here (the
        engines read the final residual through ``stop_at_layer=n_layers``)."""
        model = self.model
        as_circuits_bridge(model)
        cfg, hf = model.cfg, _hf_config(model)
        arch = self.architecture()
        problems = []
        if getattr(cfg, "parallel_attn_mlp", False):
            problems.append("parallel attention/MLP blocks (the MLP would read resid_pre, not resid_mid)")
        if getattr(cfg, "attn_only", False):
            problems.append("attention-only models (no MLP sweep)")
        if arch in POST_NORM_ARCHITECTURES:
            problems.append(f"post-norm blocks ({arch} normalises sublayer outputs with ln1/ln2)")
        if getattr(cfg, "positional_embedding_type", "rotary") not in ("rotary", "standard"):
            problems.append(f"positional embedding {cfg.positional_embedding_type!r} (END attention adds no "
                            "position bias)")
        if arch in _OLMO:
            problems.append("QK norm over whole projections (OLMo)")
        if getattr(_hf_attn(model, 0), "sinks", None) is not None:
            problems.append("attention sinks (an extra softmax column)")
        rope = getattr(hf, "rope_parameters", None) or {}
        rope_types = {v.get("rope_type") for v in rope.values() if isinstance(v, dict)} | {rope.get("rope_type")}
        if getattr(hf, "clip_qkv", None) is not None or "dynamic" in rope_types:
            problems.append("clipped Q/K/V or dynamic NTK RoPE")
        if getattr(cfg, "attention_dir", "causal") != "causal":
            problems.append("bidirectional attention")
        return problems

    def rotary_key_hook(self, layer: int) -> str:
        return f"blocks.{layer}.attn.hook_rot_k" if _rotary_module(self.model) is not None else get_act_name("k", layer)

    def attn_qkv(self, layer: int) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor]:
        """``W_Q [head d_model d_head], b_Q [head d_head], W_K, b_K, W_V, b_V`` (keys and values with their
        ``n_kv_heads`` heads), biases zero where the model has none (the Bridge gives ``None``)."""
        attn = self.model.blocks[layer].attn
        out = []
        for w, b in ((attn.W_Q, attn.b_Q), (attn.W_K, attn.b_K), (attn.W_V, attn.b_V)):
            out += [w, _zeros(b, (w.shape[0], w.shape[2]), w)]
        return tuple(out)  # type: ignore[return-value]

    def attn_out(self, layer: int) -> tuple[Tensor, Tensor]:
        attn = self.model.blocks[layer].attn
        return attn.W_O, _zeros(attn.b_O, (attn.W_O.shape[2],), attn.W_O)

    def qk_norms(self, layer: int) -> tuple[Any, Any] | None:
        hfa = _hf_attn(self.model, layer)
        q, k = getattr(hfa, "q_norm", None), getattr(hfa, "k_norm", None)
        return None if q is None or k is None else (q, k)

    def rotary(self, layer: int, x: Tensor, pos: Tensor) -> Tensor:
        """Rotary embedding of ``x`` (``[..., pair, head, d_head]``) at each pair's own position ``pos [pair]``, with
        the table of layer ``layer`` (Gemma 3's local layers have their own base) and the HF module's own
        ``apply_rotary_pos_emb``; ``x`` unchanged for models without rotary."""
        model = self.model
        rot = _rotary_module(model)
        if rot is None:
            return x
        P, D = x.shape[-3], x.shape[-1]
        extra: dict[str, Any] = {}
        if "layer_type" in inspect.signature(rot.forward).parameters:
            extra["layer_type"] = _hf_config(model).layer_types[layer]
        cos, sin = rot(x, pos.reshape(P, 1).to(x.device), **extra)  # [pair, 1, rotary_dim]
        apply = sys.modules[type(_hf_attn(model, layer)).__module__].apply_rotary_pos_emb
        lead = x.shape[:-3]
        flat = x.movedim(-3, 0).reshape(P, -1, 1, D)  # [pair, (leading head), seq=1, d_head]
        rotated, _ = apply(flat, flat, cos.to(x.dtype), sin.to(x.dtype), unsqueeze_dim=1)
        return rotated.reshape(P, *lead, x.shape[-2], D).movedim(0, -3)

    def score_scale(self, layer: int) -> float:
        """What attention multiplies ``q . k`` by (the HF module's ``scaling``)."""
        return float(_hf_attn(self.model, layer).scaling)

    def score_softcap(self, layer: int) -> float:
        cap = getattr(_hf_attn(self.model, layer), "attn_logit_softcapping", None)
        return -1.0 if cap is None else float(cap)

    def sliding_window(self, layer: int) -> int | None:
        """Layer ``layer``'s attention window (a query at ``i`` sees keys ``j > i - window``); ``None``: global. HF
        attention modules with per-layer windows say so (Qwen2/3, Gemma 2/3); Mistral's window is its config's."""
        hfa = _hf_attn(self.model, layer)
        window = hfa.sliding_window if hasattr(hfa, "sliding_window") else getattr(_hf_config(self.model), "sliding_window", None)
        return None if window is None else int(window)

    def attention_scores(self, layer: int, q: Tensor, k: Tensor) -> Tensor:
        """Grouped-query keys are repeated per query head in Hugging Face's order."""
        if k.shape[2] != q.shape[2]:  # grouped-query attention: each key head serves a group of query heads (HF order)
            k = k.repeat_interleave(q.shape[2] // k.shape[2], dim=2)
        scores = torch.einsum("bqhe,bkhe->bhqk", q, k) * self.score_scale(layer)
        return apply_softcap(scores, self.score_softcap(layer))

    def unembed_weights(self) -> tuple[Tensor, Tensor]:
        W_U = self.model.unembed.W_U
        return W_U, _zeros(self.model.unembed.b_U, (W_U.shape[1],), W_U)

    def logit_softcap(self) -> float:
        cap = getattr(_hf_config(self.model), "final_logit_softcapping", None)
        return -1.0 if cap is None else float(cap)

    def final_residual(self, tokens: Tensor, **kwargs: Any) -> Tensor:
        return as_circuits_bridge(self.model)(tokens, stop_at_layer=self.model.cfg.n_layers, **kwargs)

    @torch.no_grad()
    def prefix_sharing(self) -> bool:
        """Whether a prefix run into Hugging Face's cache and continued gives the full run's numbers on this model
        (checked once per model on 6 tokens: False with transformers 5.24, whose attention argument rename leaves the
        Bridge's cache empty)."""
        model = self.model
        ok = getattr(model, _PREFIX_OK, None)
        if ok is None:
            device = next(model.parameters()).device
            tokens = torch.arange(1, 7, device=device)[None] % model.cfg.d_vocab
            full = self.final_residual(tokens)[:, -2:]
            try:
                cache = self.prefix_cache(tokens[:, :4], [], 1)
                part = self.continue_prefix(tokens[:, 4:], cache)
                scale = float(full.abs().max()) + 1e-6
                ok = part.shape == full.shape and float((part - full).abs().max()) <= 1e-3 * scale
            except Exception:  # a transformers version whose cache API differs: run prompts whole
                ok = False
            object.__setattr__(model, _PREFIX_OK, bool(ok))
        return bool(ok)

    @torch.no_grad()
    def prefix_cache(self, prefix: Tensor, hooks: list, repeat: int) -> Any:
        """Run ``prefix`` (``[row, pos]`` tokens) once with ``hooks`` into Hugging Face's ``DynamicCache``, each row
        repeated ``repeat`` times in order, for the rows that continue it (:meth:`continue_prefix`; the cache is filled
        further by that call, so use it once). Only where :meth:`prefix_sharing` says the cache works."""
        from transformers import DynamicCache

        bridge = as_circuits_bridge(self.model)
        cache = DynamicCache()
        with bridge.hooks(fwd_hooks=hooks):
            bridge(prefix, past_key_values=cache, attention_mask=torch.ones_like(prefix), stop_at_layer=self.model.cfg.n_layers)
        if repeat > 1:
            cache.batch_repeat_interleave(repeat)
        cache._circuits_prefix = prefix.shape[1]  # type: ignore[attr-defined]
        return cache

    def continue_prefix(self, body: Tensor, cache: Any) -> Tensor:
        """The final residual ``[row, pos, d_model]`` of ``body`` (the tokens after the prefix) run after ``cache``
        (:meth:`prefix_cache`), with whatever hooks are on the model."""
        mask = torch.ones((body.shape[0], cache._circuits_prefix + body.shape[1]), dtype=body.dtype, device=body.device)
        return as_circuits_bridge(self.model)(body, past_key_values=cache, attention_mask=mask,
                                         stop_at_layer=self.model.cfg.n_layers)

    @torch.no_grad()
    def run_prefixes(self, tokens: Tensor, lengths: Tensor) -> Prefix | None:
        """Each row's first ``lengths[i]`` tokens of ``tokens [row, pos]`` run once per distinct prefix, without
        gradients, left-padded to one width with a mask (positions counted from each row's first real token, as the
        Bridge derives them from the mask); ``None`` when every length is 0. Continue with :meth:`continue_prefixes`.
        Only where :meth:`prefix_sharing` says Hugging Face's cache gives the full run's numbers."""
        kv = distinct_prefixes(tokens, lengths, lambda part, pmask: _run_bucket(self.model, part, pmask))
        return None if kv is None else Prefix(kv)

    def prefix_from_kv(self, keys: list[Tensor], values: list[Tensor], mask: Tensor) -> Prefix:
        """A :class:`Prefix` from per-layer keys and values ``[row, n, kv_head, d_head]`` taken from whole-prompt runs
        at :meth:`prefix_kv_hooks` (left-padded; ``mask [row, n]`` 1 where real)."""
        return Prefix(PrefixKV(list(keys), list(values), mask))

    def ungroup_prefix(self, prefix: Prefix) -> Prefix:
        """``prefix`` with its key/value heads repeated per query head (Hugging Face's ``repeat_kv`` order), for runs
        inside :meth:`split_inputs` (``ungroup=True``, where attention reads one key/value head per query head);
        unchanged without grouped-query attention."""
        group = int(self.model.cfg.n_heads) // self.n_kv_heads()
        if group == 1 or prefix.ungrouped:
            return prefix
        return Prefix(repeat_heads(prefix.kv, group), True)

    def select_prefix(self, prefix: Prefix, rows: Tensor) -> Prefix:
        """``prefix`` with its rows ``rows`` (indices, repeats allowed), in that order."""
        return Prefix(select_rows(prefix.kv, rows), prefix.ungrouped)

    def continue_prefixes(self, body: Tensor, prefix: Prefix | None, *, stop_at_layer: int | None = None) -> Tensor:
        """The residual stream after the last block (or entering block ``stop_at_layer``) ``[row, pos, d_model]`` of
        ``body [row, pos]`` (each row's tokens after its prefix) run after ``prefix`` (:meth:`run_prefixes`; ``None``:
        the body is the whole prompt), with whatever hooks are on the model and gradients through the body."""
        from transformers import DynamicCache

        bridge = as_circuits_bridge(self.model)
        stop = self.model.cfg.n_layers if stop_at_layer is None else stop_at_layer
        if prefix is None:
            return bridge(body, stop_at_layer=stop)
        cache = DynamicCache()
        for layer, (k, v) in enumerate(zip(prefix.kv.keys, prefix.kv.values)):
            cache.update(k.transpose(1, 2), v.transpose(1, 2), layer)
        mask = torch.cat([prefix.kv.mask, torch.ones_like(body)], 1)
        return bridge(body, past_key_values=cache, attention_mask=mask, stop_at_layer=stop)

    def prefix_keys(self, prefix: Prefix, layer: int) -> Tensor:
        """The prefix's keys ``[row, n, kv_head, d_head]`` that the key hook :meth:`rotary_key_hook` leaves out while
        :meth:`continue_prefixes` runs (it fires before the cache is appended, on the body alone), so that
        ``cat([prefix_keys, hook value], 1)`` holds every key attention reads."""
        return prefix.kv.keys[layer]

    def prefix_kv_hooks(self, layer: int) -> tuple[str, str] | None:
        """The hooks whose values over whole prompts are a prefix's keys and values as :meth:`prefix_from_kv` takes
        them: the keys attention caches (after rotary and QK norm: :meth:`rotary_key_hook`) and ``hook_v``; ``None``
        where :meth:`prefix_sharing` is off."""
        if not self.prefix_sharing():
            return None
        return self.rotary_key_hook(layer), get_act_name("v", layer)

    def block_runner(self, suffix: Tensor, keys: list[Tensor], values: list[Tensor],
                     mask: Tensor | None) -> Callable[[int, Tensor], Tensor] | None:
        """A function ``run(layer, x)`` that runs block ``layer`` alone on residual ``x [rows, pos, d_model]`` of the
        ``suffix [G, pos]`` tokens (rows: ``rows / G`` copies of the ``G`` rows, in order) after the keys and values
        ``[G, n, kv_head, d_head]`` per layer of the positions before them (taken at :meth:`prefix_kv_hooks`;
        left-padded, ``mask [G, n]`` or ``None`` for no padding); ``None`` where blocks do not run alone after a cache.
        On the Bridge a block takes what the Hugging Face model hands its decoder layers (the attention mask, rotary
        tables per layer type, positions): one pass of the ``G`` suffix rows after their keys and values records them
        per block, and each call hands them on with the rows repeated and a cache holding that layer's keys alone."""
        from transformers import DynamicCache

        model = self.model
        if self.prefix_kv_hooks(0) is None:
            return None
        G = len(suffix)
        seen: dict[int, dict[str, Any]] = {}

        def record(layer: int):
            def pre(module: Any, args: tuple, kwargs: dict) -> None:
                seen[layer] = {k: v for k, v in kwargs.items() if k not in ("hidden_states", "past_key_values")}
            return pre

        handles = [block.register_forward_pre_hook(record(l), with_kwargs=True) for l, block in enumerate(model.blocks)]
        try:
            with torch.no_grad():
                self.continue_prefixes(suffix, self.prefix_from_kv(keys, values, torch.ones_like(keys[0][:, :, 0, 0],
                                  dtype=torch.long) if mask is None else mask))
        finally:
            for h in handles:
                h.remove()
        if len(seen) != len(model.blocks):
            return None

        def run(layer: int, x: Tensor) -> Tensor:
            reps = len(x) // G
            cache = DynamicCache()  # this layer's keys and values alone (the block reads no other layer)
            cache.update(keys[layer].repeat(reps, 1, 1, 1).transpose(1, 2),
                         values[layer].repeat(reps, 1, 1, 1).transpose(1, 2), layer)
            kwargs = {k: _rows(v, G, reps) for k, v in seen[layer].items()}
            out = model.blocks[layer](x, past_key_values=cache, **kwargs)
            return out[0] if isinstance(out, tuple) else out

        return run

    @contextmanager
    def split_inputs(self, *, ungroup: bool = True, attn_result: bool = False) -> Iterator[None]:
        """While active, every head reads its own copies of the residual stream for its query, key and value inputs
        (``hook_q_input``/``hook_k_input``/``hook_v_input``, ``[batch, pos, head, d_model]``), each MLP its own
        (``hook_mlp_in``) and, with ``attn_result``, heads write ``hook_result``. With ``ungroup`` on a grouped-query
        model the key and value heads are ungrouped to one per query head (as TransformerLens 3's
        ``ungroup_grouped_query_attention``): the Bridge splits inputs per key/value head only, so each layer's HF
        ``k_proj``/``v_proj`` weights are swapped for their heads repeated per query head (the same numbers: each query
        head reads its group's key and value) and the attention told of no grouping; everything is restored on exit."""
        model = self.model
        cfg = model.cfg
        H, kv = int(cfg.n_heads), self.n_kv_heads()
        group = H // kv
        saved_flags = (bool(getattr(cfg, "use_split_qkv_input", False)), bool(getattr(cfg, "use_hook_mlp_in", False)),
                       bool(getattr(cfg, "use_attn_result", False)))
        swapped: list[tuple[Any, str, Any]] = []  # (module, attribute, old value)
        configs: list[tuple[Any, Any]] = []
        try:
            model.set_use_split_qkv_input(True)
            model.set_use_hook_mlp_in(True)
            if attn_result:
                model.set_use_attn_result(True)
            if ungroup and group > 1:
                for block in model.blocks:
                    hfa = block.attn.original_component
                    for proj in (hfa.k_proj, hfa.v_proj):
                        for attr in ("weight", "bias"):
                            p = getattr(proj, attr, None)
                            if p is None:
                                continue
                            heads = p.reshape(kv, -1, *p.shape[1:]).repeat_interleave(group, dim=0)
                            swapped.append((proj, attr, p))
                            setattr(proj, attr, torch.nn.Parameter(heads.reshape(-1, *p.shape[1:]), requires_grad=False))
                    swapped.append((hfa, "num_key_value_groups", hfa.num_key_value_groups))
                    hfa.num_key_value_groups = 1
                    c = getattr(block.attn, "config", None)
                    if c is not None and c is not cfg:
                        configs.append((c, c.n_key_value_heads))
                        c.n_key_value_heads = H
                configs.append((cfg, cfg.n_key_value_heads))
                cfg.n_key_value_heads = H
            yield
        finally:
            for c, v in reversed(configs):
                c.n_key_value_heads = v
            for module, attr, old in reversed(swapped):
                setattr(module, attr, old)
            model.set_use_split_qkv_input(saved_flags[0])
            model.set_use_hook_mlp_in(saved_flags[1])
            model.set_use_attn_result(saved_flags[2])

    def spread(self, n_devices: int, first: str | torch.device | None = None) -> Model:
        """On the Bridge, a model is placed over GPUs when it loads (``load_model(..., n_devices=n)``, accelerate's
        ``device_map``); one device moves it there."""
        if n_devices != 1:
            raise ValueError("a TransformerBridge is spread over GPUs when it loads: load_model(..., n_devices=N)")
        if first is not None:
            self.model.to(first)
        return self.model

    def tunable_tensors(self) -> dict[str, TunableTensor]:
        """TransformerLens name -> :class:`~circuits.models.hf_weights.TunableTensor` of the Hugging Face weights behind
        each name (K/V named ``_W_K``/``_W_V`` where heads share them, as on 3.9; folded norms left out)."""
        from circuits.models.hf_weights import bridge_tunable_tensors

        return bridge_tunable_tensors(self.model)

    def untunable_parameters(self) -> list[str]:
        """Parameters of a family :mod:`circuits.models.hf_weights` does not map (full SFT would leave them frozen)."""
        from circuits.models.hf_weights import unmapped_parameters

        return unmapped_parameters(self.model, self.tunable_tensors())

    def training_residual(self, tokens: Tensor) -> Tensor:
        """The residual stream after the last block, ``[batch, pos, d_model]``, before the final norm (with gradients):
        :meth:`final_residual`, except on TransformerLens 3.9's own ``TransformerBridge`` (which the parity tests hold
        beside a ``HookedTransformer``), whose ``stop_at_layer=n_layers`` returns logits: that run is stopped from the
        last block's ``hook_resid_post`` instead."""
        if backend_line() != 3:
            return self.final_residual(tokens)
        seen: dict[str, Tensor] = {}

        def grab(x: Tensor, hook: object) -> None:
            seen["x"] = x
            raise _FinalResidual

        try:
            self.model.run_with_hooks(tokens, fwd_hooks=[(f"blocks.{self.model.cfg.n_layers - 1}.hook_resid_post", grab)])
        except _FinalResidual:
            pass
        return seen["x"]

    @torch.no_grad()
    def link_processed_weights(self) -> Model:
        """Make a Bridge compute with its parameters, so that gradients reach them: TransformerLens 3.9's Bridge runs a
        processed gated MLP through ``_processed_W_in``/``_W_gate``/``_W_out`` tensors that share the Hugging Face
        weights' storage but are detached copies (no gradient reaches ``up_proj.weight``); each such tensor is replaced
        by the parameter it views (same values). TransformerLens 4.3 computes with the parameters already."""
        model = self.model
        by_storage = {(p.untyped_storage().data_ptr(), p.storage_offset(), tuple(p.shape), p.stride()): p
                      for p in model.parameters()}
        for module in model.modules():
            for attr, value in list(vars(module).items()):
                if not attr.startswith("_processed_") or not isinstance(value, Tensor) \
                        or isinstance(value, torch.nn.Parameter):
                    continue
                p = by_storage.get((value.untyped_storage().data_ptr(), value.storage_offset(), tuple(value.shape),
                                    value.stride()))
                if p is not None:
                    object.__setattr__(module, attr, p)  # not registered: the parameter keeps its one name
        return model

    def checkpoint_blocks(self) -> None:
        """Each block's ``forward`` wrapped in place with activation checkpointing. A Bridge's blocks get HF's cache and
        position objects as keywords: bound (cache off), not traversed by checkpoint; set on the block itself (a Bridge
        component passes attributes it does not have on to the HF module)."""
        import functools

        from torch.utils.checkpoint import checkpoint

        for block in self.model.blocks:
            forward = block.forward
            object.__setattr__(block, "forward", lambda *a, _f=forward, **k: checkpoint(
                functools.partial(_f, **_without_cache(k)), *a, use_reentrant=False))

    def cast_unsharded_buffers(self, device: str | torch.device, dtype: torch.dtype) -> list[tuple[Any, Tensor]]:
        """A processed Bridge's unembedding bias (zero, TransformerLens's ``b_U``) is a buffer: FSDP casts parameters
        only, so linear biases held as buffers are put in ``dtype`` on ``device``."""
        saved = []
        for module in self.model.modules():
            if isinstance(module, torch.nn.Linear) and isinstance(module._buffers.get("bias"), Tensor):
                saved.append((module, module._buffers["bias"]))
                module._buffers["bias"] = module._buffers["bias"].to(device=device, dtype=dtype)
        return saved

    def gather_parameters(self, keys: set[str]) -> dict[str, Tensor]:
        """The parameters named ``keys`` by their own (``named_parameters``) names, gathered whole to the CPU: a
        Bridge's ``state_dict()`` names are TransformerLens-style aliases."""
        return {k: (p.full_tensor() if hasattr(p, "full_tensor") else p).detach().cpu()
                for k, p in self.model.named_parameters() if k in keys}  # every rank, in the same order

    def checkpoint_state(self, optimizer: torch.optim.Optimizer, init: bool = False) -> dict:
        """A sharded Bridge's parameters and AdamW state by parameter name, as the DCP checkpoint holds them.

        ``torch.distributed.checkpoint.state_dict`` names parameters from ``model.state_dict()``, which a
        ``TransformerBridge`` overrides with TransformerLens-style aliases (``blocks.0.attn.q.weight``) while its
        ``named_parameters()`` give the Hugging Face paths, so the optimizer state it saves cannot be matched again on
        resume. This dict uses ``named_parameters()`` names for both; a load fills it in place. ``init``: give
        parameters that have no AdamW state yet (a fresh run being resumed) zero state, which the load then fills."""
        model_sd: dict[str, Any] = {}
        optim_sd: dict[str, Any] = {}
        for name, p in self.model.named_parameters():
            model_sd[name] = p.data  # the local shard (a DTensor): DCP saves and loads it in place
            if not p.requires_grad:
                continue
            if init and p not in optimizer.state:
                optimizer.state[p] = {"step": torch.zeros((), dtype=torch.float32), "exp_avg": torch.zeros_like(p.data),
                                      "exp_avg_sq": torch.zeros_like(p.data)}
            if p in optimizer.state:
                optim_sd[name] = optimizer.state[p]
        return {"model": model_sd, "optim": optim_sd}

    def restore_checkpoint_state(self, optimizer: torch.optim.Optimizer, state: dict) -> None:
        """Nothing: :meth:`checkpoint_state` holds the parameters and AdamW's state themselves (loaded in place)."""

    def decoder(self, tokens: Tensor, mask: Tensor) -> HFCacheDecoder:
        """A :class:`HFCacheDecoder`."""
        return HFCacheDecoder(self, tokens, mask)

    @staticmethod
    def reference_weights(hf_model: Any) -> dict[str, Tensor]:
        """The TransformerLens-named tensors read from the Hugging Face weights (TransformerLens 4 converts no more;
        equal to 3.9's conversion, tested)."""
        from circuits.models.hf_weights import tl_state_dict

        return tl_state_dict(hf_model)
