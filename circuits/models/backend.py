"""The seam between ``circuits`` and TransformerLens: every TransformerLens internal that the engines
(:mod:`circuits.patching`), validation (:mod:`circuits.validate`), explanations (:mod:`circuits.explain`) and
evaluation (:mod:`circuits.evaluation`) use comes from here, so that a second backend (TransformerLens 4's
``TransformerBridge``) plugs in at this one module. :mod:`circuits.models.loading` keeps the loading internals
(configs, state dicts, official names), and :mod:`circuits.models.attention` and :mod:`circuits.models.forward`
are TransformerLens-specific code built on the names below. ``tests/unit/test_backend.py`` asserts that no
module outside :mod:`circuits.models` imports more of ``transformer_lens`` than ``HookedTransformer`` and
``ActivationCache``.

What a backend provides (the contract a TransformerLens 4 backend implements):

- types: :data:`Model` (the model class, for annotations and ``isinstance``), :data:`ActivationCache` and
  :data:`FactoredMatrix` (the low-rank OV/QK products of :mod:`circuits.explain.head_circuits`);
  a model has ``cfg`` (``n_layers``, ``n_heads``, ``d_model``, ``d_head``, ``d_mlp``, ``n_key_value_heads``,
  ``dtype``, ``device``, ``n_devices``, ``original_architecture``, normalisation and soft-cap fields),
  ``blocks[l]`` with ``ln1``/``ln2``/``attn``/``mlp`` (and ``ln1_post``/``ln2_post`` where a norm follows a
  sublayer), ``ln_final``, ``unembed``, ``run_with_hooks``, ``run_with_cache``, ``hooks`` and ``to_tokens``;
- hook names: :func:`act_name` (``act_name("z", 3)`` is ``"blocks.3.attn.hook_z"``; sites ``resid_pre``,
  ``resid_mid``, ``resid_post``, ``q``, ``k``, ``v``, ``z``, ``pattern``, ``attn_scores``, ``attn_out``,
  ``mlp_in``, ``pre``, ``post``, ``mlp_out``, ``embed``);
- the key/value cache: :data:`KeyValueCache` (``init_cache(cfg, device, batch)``, one entry per layer) and
  :data:`KeyValueCacheEntry` (``past_keys``/``past_values`` ``[batch, pos, kv_head, d_head]`` as ``hook_k`` and
  ``hook_v`` hold them, unrotated; ``frozen=True`` leaves it unchanged by a forward) -- what a forward over a
  suffix reads for the positions before it;
- attention pieces: :data:`AbstractAttention` (the attention module class, whose forward
  :mod:`circuits.models.attention` replaces by a fused one), :func:`simple_attn_linear` (a ``[d_model] ->
  [head, d_head]`` projection as the module computes it);
- soft-capping: :func:`apply_softcap`, :func:`softcap_enabled`;
- :data:`POST_NORM_ARCHITECTURES`: architectures whose blocks normalise sublayer outputs with ``ln1``/``ln2``
  (the END engine refuses them);
- device placement of a model spread over GPUs: :func:`block_devices`, :func:`spread`, :func:`layer_device`,
  :func:`output_device`, and :func:`check_dtype`.

Device placement. TransformerLens's forward pass already follows a layer split: before block ``i`` it moves the
residual stream to ``get_device_for_block_index(i, cfg)`` (consecutive layers on consecutive GPUs from
``cfg.device``, ``cfg.n_devices`` of them). Its constructor in 3.9 does not place the blocks that way
(``move_model_modules_to_device`` puts every module on one device), so :func:`spread` does: the embedding with
block 0, block ``i`` on its device, the final norm and the unembedding with the last block, where the forward pass
leaves the residual stream. The END-only engine asks :func:`layer_device` and :func:`output_device` where each
piece lives and moves its small END tensors there.
"""

from __future__ import annotations

import torch
from transformer_lens import ActivationCache, FactoredMatrix, HookedTransformer
from transformer_lens.cache.key_value_cache import TransformerLensKeyValueCache
from transformer_lens.cache.key_value_cache_entry import TransformerLensKeyValueCacheEntry
from transformer_lens.components.abstract_attention import AbstractAttention
from transformer_lens.utilities.activation_functions import apply_softcap, softcap_enabled
from transformer_lens.utilities.architectures import POST_NORM_ARCHITECTURES
from transformer_lens.utilities.attention import simple_attn_linear
from transformer_lens.utilities.multi_gpu import get_device_for_block_index
from transformer_lens.utils import get_act_name

Model = HookedTransformer
KeyValueCache = TransformerLensKeyValueCache
KeyValueCacheEntry = TransformerLensKeyValueCacheEntry

__all__ = ["POST_NORM_ARCHITECTURES", "AbstractAttention", "ActivationCache", "FactoredMatrix", "KeyValueCache", "KeyValueCacheEntry",
           "Model", "act_name", "apply_softcap", "block_devices", "check_dtype", "frozen_cache_entry",
           "layer_device", "output_device", "simple_attn_linear", "softcap_enabled", "spread"]


def act_name(site: str, layer: int | None = None) -> str:
    """The hook name of ``site`` in block ``layer`` (``act_name("z", 3)`` is ``"blocks.3.attn.hook_z"``)."""
    return get_act_name(site, layer)


def frozen_cache_entry(keys: torch.Tensor, values: torch.Tensor) -> TransformerLensKeyValueCacheEntry:
    """One layer's key/value cache holding ``keys`` and ``values`` ``[batch, pos, kv_head, d_head]`` (unrotated,
    as ``hook_k``/``hook_v`` hold them), left unchanged by the forward that reads it."""
    return TransformerLensKeyValueCacheEntry(past_keys=keys, past_values=values, frozen=True)



def block_devices(n_layers: int, first: str | torch.device, n_devices: int) -> list[torch.device]:
    """The device of each block when ``n_layers`` are split over ``n_devices`` GPUs from ``first`` (TransformerLens's
    rule: block ``i`` on ``first + i * n_devices // n_layers``)."""

    class _Cfg:  # the two fields the rule reads
        device = str(first)

    cfg = _Cfg()
    cfg.n_devices, cfg.n_layers = n_devices, n_layers  # type: ignore[attr-defined]
    return [get_device_for_block_index(i, cfg) for i in range(n_layers)]  # type: ignore[arg-type]


def spread(model: Model, n_devices: int, first: str | torch.device | None = None) -> Model:
    """Place ``model``'s layers over ``n_devices`` GPUs (in place) so that TransformerLens's forward pass, the
    training loop and the END-only engine run it across them. Load the model on the CPU first (a model that does not
    fit one GPU cannot be built on one)."""
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


def check_dtype(dtype: str, device: str | torch.device) -> None:
    """fp16 is for GPUs: on a CPU it is slow and partly unsupported, and bf16 has its memory with fp32's range."""
    if dtype in ("float16", "fp16") and torch.device(device).type == "cpu":
        raise ValueError("dtype float16 needs a GPU (this run is on the CPU); use bfloat16 or float32 on a CPU")


def layer_device(model: Model, layer: int) -> torch.device:
    """Where block ``layer``'s weights are (and so where its END-only pieces must run)."""
    return next(model.blocks[layer].parameters()).device


def output_device(model: Model) -> torch.device:
    """Where the final norm and the unembedding run."""
    return model.unembed.W_U.device


# --- Fine-tuning (circuits.sft): TransformerLens-named parameters and the final residual, on either backend -------
# (tl4sft) Precise SFT plans, masks, steps and saves tensors under TransformerLens's names and per-head layout; on a
# TransformerBridge those are views of the Hugging Face weights (circuits.models.hf_weights.TunableTensor).

from circuits.models.hf_weights import TunableTensor  # noqa: E402  (torch only; importable on both lines)


def is_bridge(model: object) -> bool:
    """Whether ``model`` is a TransformerLens ``TransformerBridge`` (it wraps a Hugging Face model)."""
    return hasattr(model, "original_model") and hasattr(model, "adapter")


def tunable_tensors(model: Model) -> dict[str, TunableTensor]:
    """TransformerLens name -> :class:`~circuits.models.hf_weights.TunableTensor` of every parameter fine-tuning can
    tune: a ``HookedTransformer``'s own parameters, or on a Bridge the Hugging Face weights behind each name (K/V
    named ``_W_K``/``_W_V`` where heads share them, as on 3.9; folded norms left out)."""
    from circuits.models.hf_weights import bridge_tunable_tensors

    if is_bridge(model):
        return bridge_tunable_tensors(model)
    return {n: TunableTensor(n, n, p) for n, p in model.named_parameters()}


def untunable_parameters(model: Model) -> list[str]:
    """Parameters of ``model`` that no TransformerLens name covers (full SFT would leave them frozen): none on a
    ``HookedTransformer``; on a Bridge, those of a family :mod:`circuits.models.hf_weights` does not map."""
    from circuits.models.hf_weights import unmapped_parameters

    return unmapped_parameters(model, tunable_tensors(model)) if is_bridge(model) else []


class _FinalResidual(Exception):
    pass


def final_residual(model: Model, tokens: torch.Tensor) -> torch.Tensor:
    """The residual stream after the last block, ``[batch, pos, d_model]``, before the final norm (with gradients).
    TransformerLens 3.9's ``stop_at_layer=n_layers`` returns it; a Bridge returns logits there, so the run is
    stopped from the last block's ``hook_resid_post`` instead."""
    if not is_bridge(model):
        return model(tokens, stop_at_layer=model.cfg.n_layers)
    seen: dict[str, torch.Tensor] = {}

    def grab(x: torch.Tensor, hook: object) -> None:
        seen["x"] = x
        raise _FinalResidual

    try:
        model.run_with_hooks(tokens, fwd_hooks=[(f"blocks.{model.cfg.n_layers - 1}.hook_resid_post", grab)])
    except _FinalResidual:
        pass
    return seen["x"]


@torch.no_grad()
def link_processed_weights(model: Model) -> Model:
    """Make a Bridge compute with its parameters, so that gradients reach them: TransformerLens 3.9's Bridge runs a
    processed gated MLP through ``_processed_W_in``/``_W_gate``/``_W_out`` tensors that share the Hugging Face
    weights' storage but are detached copies (no gradient reaches ``up_proj.weight``); each such tensor is replaced
    by the parameter it views (same values). TransformerLens 4.3 computes with the parameters already."""
    if not is_bridge(model):
        return model
    by_storage = {(p.untyped_storage().data_ptr(), p.storage_offset(), tuple(p.shape), p.stride()): p
                  for p in model.parameters()}
    for module in model.modules():
        for attr, value in list(vars(module).items()):
            if not attr.startswith("_processed_") or not isinstance(value, torch.Tensor) \
                    or isinstance(value, torch.nn.Parameter):
                continue
            p = by_storage.get((value.untyped_storage().data_ptr(), value.storage_offset(), tuple(value.shape),
                                value.stride()))
            if p is not None:
                object.__setattr__(module, attr, p)  # not registered: the parameter keeps its one name
    return model
