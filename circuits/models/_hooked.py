"""The HookedTransformer backend (TransformerLens 3.9): :class:`HookedBackend`, registered as ``"hooked"``, the
:class:`circuits.models.backend.Backend` that :func:`circuits.models.load_model` loads through and attaches to the
models it loads when TransformerLens 3.x is installed (importable only there; the contract's docstrings are
:class:`~circuits.models.backend.Backend`'s).

Device placement. TransformerLens's forward pass already follows a layer split: before block ``i`` it moves the
residual stream to ``get_device_for_block_index(i, cfg)`` (consecutive layers on consecutive GPUs from
``cfg.device``, ``cfg.n_devices`` of them). Its constructor in 3.9 does not place the blocks that way
(``move_model_modules_to_device`` puts every module on one device), so :meth:`HookedBackend.spread` does: the
embedding with block 0, block ``i`` on its device, the final norm and the unembedding with the last block, where the
forward pass leaves the residual stream. The END-only engine asks ``layer_device`` and ``output_device`` where each
piece lives and moves its small END tensors there.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Callable, Iterator

import torch
from torch import Tensor
from transformer_lens import HookedTransformer
from transformer_lens.cache.key_value_cache import TransformerLensKeyValueCache
from transformer_lens.utilities.architectures import POST_NORM_ARCHITECTURES
from transformer_lens.utils import get_act_name

from circuits.models.attention import SharedPrefix
from circuits.models.backend import Backend, block_devices, register
from circuits.models.hf_weights import TunableTensor
from circuits.models._prefix import PrefixKV, distinct_prefixes, repeat_heads, select_rows

_OLMO = ("OlmoeForCausalLM", "Olmo2ForCausalLM", "Olmo3ForCausalLM")

Model = HookedTransformer


# --- many distinct prefixes run once, their bodies continued with gradients (attribution, EAP-IG, positions) ------


@dataclass
class Prefix:
    """Left-padded prefixes run once (:meth:`run_prefixes`, :meth:`prefix_from_kv`): their keys and values
    (``kv``, unrotated, as TransformerLens 3's cache holds them: ``hook_v``'s values, and ``hook_k``'s after the
    model's per-head QK norm where it has one) and TransformerLens 3's frozen cache over them;
    ``ungrouped``: one key/value head per query head (:meth:`ungroup_prefix`)."""

    kv: PrefixKV
    cache: TransformerLensKeyValueCache
    ungrouped: bool = False


def _frozen_cache(model: Model, kv: PrefixKV) -> TransformerLensKeyValueCache:
    cache = TransformerLensKeyValueCache.init_cache(model.cfg, model.cfg.device, len(kv.mask))
    for e, k, v in zip(cache.entries, kv.keys, kv.values):
        e.past_keys, e.past_values = k, v
    cache.previous_attention_mask = kv.mask
    cache.freeze()
    return cache


def _cached_keys(model: Model, layer: int, keys: Tensor) -> Tensor:
    """Keys ``[row, n, kv_head, d_head]`` as ``hook_k`` holds them, as TransformerLens 3's cache holds them: after
    the per-head QK norm (Qwen3, Gemma 3), which 3.9 applies after ``hook_k`` and before the cache is appended
    (``AbstractAttention.calculate_qkv_matrices``, the same call); unchanged without one."""
    if not model.cfg.use_qk_norm:
        return keys
    attn = model.blocks[layer].attn
    return attn._apply_qk_norm(keys, attn.k_norm)


def _run_bucket(model: Model, part: Tensor, pmask: Tensor) -> tuple[list[Tensor], list[Tensor]]:
    cache = TransformerLensKeyValueCache.init_cache(model.cfg, model.cfg.device, len(part))
    model(part, past_kv_cache=cache, attention_mask=pmask, stop_at_layer=model.cfg.n_layers)
    return [e.past_keys for e in cache.entries], [e.past_values for e in cache.entries]


class CachedDecoder:
    """Greedy decoding with TransformerLens's own key/value cache: the prompt once, then one token per step."""

    def __init__(self, backend: HookedBackend, tokens: Tensor, mask: Tensor) -> None:
        self.backend, self.tokens, self.mask = backend, tokens, mask
        cfg = backend.model.cfg
        self.cache = TransformerLensKeyValueCache.init_cache(cfg, cfg.device, len(tokens))

    def residual(self) -> Tensor:
        return self.backend.final_residual(self.tokens, attention_mask=self.mask, past_kv_cache=self.cache)

    def append(self, next_tokens: Tensor) -> None:
        self.tokens = next_tokens[:, None]
        self.mask = torch.ones_like(self.tokens)


@register
class HookedBackend(Backend):
    """A ``HookedTransformer``'s backend: TransformerLens 3.9 keeps what the contract reads in the model's config
    and its own attention modules, and runs a shared prefix through its own key/value cache."""

    name = "hooked"
    model_class = HookedTransformer
    line = 3

    def architecture(self) -> str:
        return str(self.model.cfg.original_architecture)

    def n_kv_heads(self) -> int:
        return int(self.model.cfg.n_key_value_heads or self.model.cfg.n_heads)

    def post_norms(self) -> bool:
        return bool(self.model.cfg.use_normalization_before_and_after)

    def end_unsupported(self) -> list[str]:
        cfg = self.model.cfg
        problems = []
        if cfg.parallel_attn_mlp:
            problems.append("parallel attention/MLP blocks (the MLP would read resid_pre, not resid_mid)")
        if cfg.attn_only:
            problems.append("attention-only models (no MLP sweep)")
        if cfg.original_architecture in POST_NORM_ARCHITECTURES:
            problems.append(f"post-norm blocks ({cfg.original_architecture} normalises sublayer outputs with ln1/ln2)")
        if cfg.positional_embedding_type not in ("rotary", "standard"):
            problems.append(f"positional embedding {cfg.positional_embedding_type!r} (END attention adds no "
                            "position bias)")
        if cfg.use_qk_norm and cfg.positional_embedding_type != "rotary":
            problems.append("QK norm without rotary (the cached keys are read before the norm)")
        if cfg.original_architecture in _OLMO:
            problems.append("QK norm over whole projections (OLMo)")
        if cfg.use_attention_sinks:
            problems.append("attention sinks (an extra softmax column)")
        if cfg.clip_qkv is not None or cfg.use_logn_attn or cfg.use_dynamic_ntk_rope:
            problems.append("clipped Q/K/V, log-n attention scaling or dynamic NTK RoPE")
        if cfg.use_split_qkv_input or cfg.use_attn_in:
            problems.append("split Q/K/V inputs (use_split_qkv_input/use_attn_in)")
        if cfg.attention_dir != "causal":
            problems.append("bidirectional attention")
        return problems

    def rotary_key_hook(self, layer: int) -> str:
        if self.model.cfg.positional_embedding_type == "rotary":
            return f"blocks.{layer}.attn.hook_rot_k"
        return get_act_name("k", layer)

    def attn_qkv(self, layer: int) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor]:
        attn = self.model.blocks[layer].attn
        grouped = bool(self.model.cfg.n_key_value_heads)
        W_K, b_K = (attn._W_K, attn._b_K) if grouped else (attn.W_K, attn.b_K)
        W_V, b_V = (attn._W_V, attn._b_V) if grouped else (attn.W_V, attn.b_V)
        return attn.W_Q, attn.b_Q, W_K, b_K, W_V, b_V

    def attn_out(self, layer: int) -> tuple[Tensor, Tensor]:
        attn = self.model.blocks[layer].attn
        return attn.W_O, attn.b_O

    def qk_norms(self, layer: int) -> tuple[Any, Any] | None:
        if not self.model.cfg.use_qk_norm:
            return None
        attn = self.model.blocks[layer].attn
        return attn.q_norm, attn.k_norm

    def rotary(self, layer: int, x: Tensor, pos: Tensor) -> Tensor:
        model = self.model
        if model.cfg.positional_embedding_type != "rotary":
            return x
        attn = model.blocks[layer].attn
        rd = model.cfg.rotary_dim
        x_rot, x_pass = x[..., :rd], x[..., rd:]
        cos = attn.rotary_cos[pos][:, None, :].to(x.dtype)  # [pair, 1, rd]
        sin = attn.rotary_sin[pos][:, None, :].to(x.dtype)
        rotated = x_rot * cos + attn.rotate_every_two(x_rot) * sin
        return torch.cat([rotated, x_pass], dim=-1)

    def score_scale(self, layer: int) -> float:
        """What attention multiplies ``q . k`` by (``1 / attn_scale``)."""
        return 1.0 / float(self.model.blocks[layer].attn.attn_scale)

    def score_softcap(self, layer: int) -> float:
        return float(self.model.cfg.attn_scores_soft_cap)

    def sliding_window(self, layer: int) -> int | None:
        return int(self.model.cfg.window_size) if self.model.blocks[layer].attn.attn_type == "local" else None

    def attention_scores(self, layer: int, q: Tensor, k: Tensor) -> Tensor:
        return self.model.blocks[layer].attn.calculate_attention_scores(q, k)

    def unembed_weights(self) -> tuple[Tensor, Tensor]:
        return self.model.unembed.W_U, self.model.unembed.b_U

    def logit_softcap(self) -> float:
        return float(self.model.cfg.output_logits_soft_cap)

    @classmethod
    def load(cls, name: str, dtype: torch.dtype, device: str | torch.device, fold_ln: bool, use_cache: bool,
             n_devices: int) -> Model:
        """:func:`circuits.models.loading.load_hooked`; over several GPUs, built on the CPU and then spread."""
        from circuits.models.loading import load_hooked

        if n_devices > 1:
            return cls(load_hooked(name, dtype, "cpu", fold_ln, use_cache)).spread(n_devices, device)
        return load_hooked(name, dtype, device, fold_ln, use_cache)

    @classmethod
    def official_name(cls, name: str) -> str | None:
        from circuits.models.loading import hooked_official_name

        return hooked_official_name(name)

    def final_residual(self, tokens: Tensor, **kwargs: Any) -> Tensor:
        return self.model(tokens, stop_at_layer=self.model.cfg.n_layers, **kwargs)

    def prefix_sharing(self) -> bool:
        """Whether :meth:`prefix_cache` and :meth:`continue_prefix` work for this model (always, on 3.9)."""
        return True

    @torch.no_grad()
    def prefix_cache(self, prefix: Tensor, hooks: list, repeat: int) -> TransformerLensKeyValueCache:
        """Run ``prefix`` (``[row, pos]`` tokens) once with ``hooks`` into a frozen key/value cache whose rows are each
        repeated ``repeat`` times in order (a view for one prefix row), for the rows that continue it."""
        model = self.model
        cache = TransformerLensKeyValueCache.init_cache(model.cfg, prefix.device, len(prefix))
        with model.hooks(fwd_hooks=hooks):
            model(prefix, past_kv_cache=cache, attention_mask=torch.ones_like(prefix), stop_at_layer=model.cfg.n_layers)
        cache.freeze()

        def rep(t: Tensor) -> Tensor:
            return t.expand(repeat, *t.shape[1:]) if len(t) == 1 else t.repeat_interleave(repeat, dim=0)

        for e in cache.entries:
            e.past_keys, e.past_values = rep(e.past_keys), rep(e.past_values)
        cache.previous_attention_mask = rep(cache.previous_attention_mask)
        return cache

    def continue_prefix(self, body: Tensor, cache: TransformerLensKeyValueCache) -> Tensor:
        return self.model(body, past_kv_cache=cache, attention_mask=torch.ones_like(body), stop_at_layer=self.model.cfg.n_layers)

    @torch.no_grad()
    def run_prefixes(self, tokens: Tensor, lengths: Tensor) -> Prefix | None:
        """Each row's first ``lengths[i]`` tokens of ``tokens [row, pos]`` run once per distinct prefix, without
        gradients and without hooks' effects beyond the model's own, left-padded to one width with a mask (as
        TransformerLens batches generation); ``None`` when every length is 0. Continue with :meth:`continue_prefixes`."""
        kv = distinct_prefixes(tokens, lengths, lambda part, pmask: _run_bucket(self.model, part, pmask))
        return None if kv is None else Prefix(kv, _frozen_cache(self.model, kv))

    def prefix_from_kv(self, keys: list[Tensor], values: list[Tensor], mask: Tensor) -> Prefix:
        """A :class:`Prefix` from per-layer keys and values ``[row, n, kv_head, d_head]`` taken from whole-prompt runs
        at :meth:`prefix_kv_hooks` (left-padded; ``mask [row, n]`` 1 where real)."""
        kv = PrefixKV([_cached_keys(self.model, l, k) for l, k in enumerate(keys)], list(values), mask)
        return Prefix(kv, _frozen_cache(self.model, kv))

    def ungroup_prefix(self, prefix: Prefix) -> Prefix:
        """``prefix`` with its key/value heads repeated per query head, for runs inside
        :meth:`split_inputs` (``ungroup=True``); unchanged without grouped-query attention."""
        group = int(self.model.cfg.n_heads) // self.n_kv_heads()
        if group == 1 or prefix.ungrouped:
            return prefix
        kv = repeat_heads(prefix.kv, group)
        return Prefix(kv, _frozen_cache(self.model, kv), True)

    def select_prefix(self, prefix: Prefix, rows: Tensor) -> Prefix:
        """``prefix`` with its rows ``rows`` (indices, repeats allowed), in that order."""
        kv = select_rows(prefix.kv, rows)
        return Prefix(kv, _frozen_cache(self.model, kv), prefix.ungrouped)

    def continue_prefixes(self, body: Tensor, prefix: Prefix | None, *, stop_at_layer: int | None = None) -> Tensor:
        """The residual stream after the last block (or entering block ``stop_at_layer``) ``[row, pos, d_model]`` of
        ``body [row, pos]`` (each row's tokens after its prefix) run after ``prefix`` (:meth:`run_prefixes`; ``None``:
        the body is the whole prompt), with whatever hooks are on the model and gradients through the body."""
        model = self.model
        stop = model.cfg.n_layers if stop_at_layer is None else stop_at_layer
        if prefix is None:
            return model(body, stop_at_layer=stop)
        cfg = model.cfg
        saved = cfg.n_key_value_heads
        try:
            if prefix.ungrouped:  # the cache's head count is checked against n_key_value_heads
                cfg.n_key_value_heads = cfg.n_heads
            return model(body, past_kv_cache=prefix.cache, attention_mask=torch.ones_like(body), stop_at_layer=stop)
        finally:
            cfg.n_key_value_heads = saved

    def prefix_keys(self, prefix: Prefix, layer: int) -> Tensor:
        """The prefix's keys ``[row, n, kv_head, d_head]`` that the key hook :meth:`rotary_key_hook` leaves out while
        :meth:`continue_prefixes` runs, so that ``cat([prefix_keys, hook value], 1)`` holds every key attention reads:
        none on 3.9's rotary models (``hook_rot_k`` rotates the cached keys with the body's), the cached keys where
        ``hook_k`` fires before the cache is appended."""
        keys = prefix.kv.keys[layer]
        return keys[:, :0] if self.model.cfg.positional_embedding_type == "rotary" else keys

    def prefix_kv_hooks(self, layer: int) -> tuple[str, str] | None:
        """The hooks whose values over whole prompts are a prefix's keys and values as :meth:`prefix_from_kv` and
        :meth:`block_runner` take them: ``hook_k`` and ``hook_v`` (where the model has a per-head QK norm, applied
        after ``hook_k``, both apply it to the keys they are given, as 3.9's cache holds them: :func:`_cached_keys`)."""
        return get_act_name("k", layer), get_act_name("v", layer)

    def block_runner(self, suffix: Tensor, keys: list[Tensor], values: list[Tensor],
                     mask: Tensor | None) -> Callable[[int, Tensor], Tensor] | None:
        """A function ``run(layer, x)`` that runs block ``layer`` alone on residual ``x [rows, pos, d_model]`` of the
        ``suffix [G, pos]`` tokens (rows: ``rows / G`` copies of the ``G`` rows, in order) after the keys and values
        ``[G, n, kv_head, d_head]`` per layer of the positions before them (taken at :meth:`prefix_kv_hooks`;
        left-padded, ``mask [G, n]`` or ``None`` for no padding); ``None`` where blocks do not run alone after a cache.
        On 3.9: TransformerLens's frozen one-layer cache (the keys after the model's QK norm: :func:`_cached_keys`)."""
        G = len(suffix)
        full = None if mask is None else torch.cat([mask, torch.ones_like(suffix)], 1)
        keys = [_cached_keys(self.model, l, k) for l, k in enumerate(keys)]

        def run(layer: int, x: Tensor) -> Tensor:
            reps = len(x) // G
            entry = SharedPrefix(keys[layer], values[layer], mask)  # each prefix read once for its rows (fused path)
            return self.model.blocks[layer](x, past_kv_cache_entry=entry, attention_mask=None if full is None else full.repeat(reps, 1))

        return run

    @contextmanager
    def split_inputs(self, *, ungroup: bool = True, attn_result: bool = False) -> Iterator[None]:
        """While active, every head reads its own copies of the residual stream for its query, key and value inputs
        (``hook_q_input``/``hook_k_input``/``hook_v_input``, ``[batch, pos, head, d_model]``, one per query head with
        ``ungroup``: TransformerLens's ``ungroup_grouped_query_attention``), each MLP its own (``hook_mlp_in``) and,
        with ``attn_result``, heads write ``hook_result``; the flags are restored on exit."""
        model = self.model
        cfg = model.cfg
        saved = (cfg.use_split_qkv_input, cfg.use_hook_mlp_in, cfg.use_attn_result, cfg.ungroup_grouped_query_attention)
        try:
            model.set_use_split_qkv_input(True)
            model.set_use_hook_mlp_in(True)
            if attn_result:
                model.set_use_attn_result(True)
            if ungroup:
                cfg.ungroup_grouped_query_attention = True
            yield
        finally:
            model.set_use_split_qkv_input(saved[0])
            model.set_use_hook_mlp_in(saved[1])
            model.set_use_attn_result(saved[2])
            cfg.ungroup_grouped_query_attention = saved[3]

    def spread(self, n_devices: int, first: str | torch.device | None = None) -> Model:
        """Place ``model``'s layers over ``n_devices`` GPUs (in place) so that TransformerLens's forward pass, the
        training loop and the END-only engine run it across them. Load the model on the CPU first (a model that does not
        fit one GPU cannot be built on one)."""
        model = self.model
        first = torch.device(first if first is not None else ("cuda:0" if torch.cuda.is_available() else "cpu"))
        if n_devices < 1:
            raise ValueError(f"n_devices must be >= 1, got {n_devices}")
        if n_devices > 1:
            if first.type != "cuda":
                raise ValueError("n_devices > 1 spreads a model over GPUs; none is visible here")
            if (first.index or 0) + n_devices > torch.cuda.device_count():
                raise ValueError(f"n_devices {n_devices} from {first} needs GPUs up to cuda:{(first.index or 0) + n_devices - 1}"
                                 f"; this machine has {torch.cuda.device_count()}")
        devices = block_devices(model.cfg.n_layers, first, n_devices)
        model.cfg.device = str(first)
        model.cfg.n_devices = n_devices
        for i, block in enumerate(model.blocks):
            block.to(devices[i])
        for name in ("embed", "hook_embed", "pos_embed", "hook_pos_embed"):
            if hasattr(model, name):
                getattr(model, name).to(devices[0])
        for name in ("ln_final", "unembed"):
            if hasattr(model, name):
                getattr(model, name).to(devices[-1])
        return model

    def tunable_tensors(self) -> dict[str, TunableTensor]:
        """TransformerLens name -> :class:`~circuits.models.hf_weights.TunableTensor`: the model's own parameters."""
        return {n: TunableTensor(n, n, p) for n, p in self.model.named_parameters()}

    def untunable_parameters(self) -> list[str]:
        """None: every parameter of a ``HookedTransformer`` has a TransformerLens name."""
        return []

    def training_residual(self, tokens: Tensor) -> Tensor:
        """The residual stream after the last block (:meth:`final_residual`), with gradients."""
        return self.final_residual(tokens)

    def link_processed_weights(self) -> Model:
        """``model``: a ``HookedTransformer`` computes with its parameters."""
        return self.model

    def checkpoint_blocks(self) -> None:
        """Each block's ``forward`` wrapped in place with activation checkpointing."""
        from torch.utils.checkpoint import checkpoint

        for block in self.model.blocks:
            forward = block.forward
            block.forward = lambda *a, _f=forward, **k: checkpoint(_f, *a, use_reentrant=False, **k)  # type: ignore[method-assign]

    def cast_unsharded_buffers(self, device: str | torch.device, dtype: torch.dtype) -> list[tuple[Any, Tensor]]:
        """None to cast: a ``HookedTransformer``'s weights are all parameters."""
        return []

    def gather_parameters(self, keys: set[str]) -> dict[str, Tensor]:
        """The full state dict on the CPU (``torch.distributed.checkpoint``'s full-state gather; its names are the
        parameters' own)."""
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

        return get_model_state_dict(self.model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))

    def checkpoint_state(self, optimizer: torch.optim.Optimizer, init: bool = False) -> dict:
        """``torch.distributed.checkpoint.state_dict``'s model and optimizer state dicts (sharded)."""
        from torch.distributed.checkpoint.state_dict import get_state_dict

        model_sd, optim_sd = get_state_dict(self.model, optimizer)
        return {"model": model_sd, "optim": optim_sd}

    def restore_checkpoint_state(self, optimizer: torch.optim.Optimizer, state: dict) -> None:
        """``set_state_dict`` of the loaded state (the load resharded it when the world size changed)."""
        from torch.distributed.checkpoint.state_dict import set_state_dict

        set_state_dict(self.model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"])

    def decoder(self, tokens: Tensor, mask: Tensor) -> CachedDecoder:
        """A :class:`CachedDecoder` (TransformerLens's cache gives the full run's numbers)."""
        return CachedDecoder(self, tokens, mask)

    @staticmethod
    def reference_weights(hf_model: Any) -> dict[str, Tensor]:
        """TransformerLens 3.9's own conversion of the Hugging Face weights (unfolded, fp32, CPU)."""
        from circuits.models.loading import convert_hf_weights, tl_config_from_hf

        return convert_hf_weights(hf_model, tl_config_from_hf(hf_model.config, torch.float32, "cpu"))
