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


# What the non-engine consumers (explain, validate, evaluation) ask of either model type. Each works on a
# HookedTransformer (TransformerLens 3.9) and on a TransformerBridge (TransformerLens 4.3), telling them apart by what
# the model has (a Bridge wraps its Hugging Face model as ``original_model``), so they import nothing of either line.


def is_bridge(model: Model) -> bool:
    """Whether ``model`` is a TransformerLens ``TransformerBridge`` (wrapping a Hugging Face model)."""
    return hasattr(model, "original_model")


class _FinalResidual(Exception):
    """Raised by the hook that read the last block's output, to skip the final norm and the unembedding."""

    def __init__(self, resid: torch.Tensor):
        super().__init__()
        self.resid = resid


def final_resid(model: Model, tokens: torch.Tensor, **kwargs) -> torch.Tensor:
    """The residual stream after the last block, ``[batch, pos, d_model]``, under the hooks already attached (what
    TransformerLens 3.9's ``model(tokens, stop_at_layer=n_layers)`` returns; on a Bridge ``stop_at_layer=n_layers``
    runs the whole model and returns logits, so the last block's ``hook_resid_post`` is read and the run stopped
    there). ``kwargs`` go to the forward (``attention_mask``; ``past_kv_cache`` on TransformerLens 3.9 only)."""
    L = model.cfg.n_layers
    if not is_bridge(model):
        return model(tokens, stop_at_layer=L, **kwargs)
    if "past_kv_cache" in kwargs:
        raise ValueError("final_resid: a TransformerBridge takes no TransformerLens key/value cache; "
                         "run the whole prompt (accepted kwargs: attention_mask)")

    def stop(resid: torch.Tensor, hook=None):
        raise _FinalResidual(resid)

    try:
        with model.hooks(fwd_hooks=[(act_name("resid_post", L - 1), stop)]):
            model(tokens, **kwargs)
    except _FinalResidual as done:
        return done.resid
    raise RuntimeError(f"the forward never reached {act_name('resid_post', L - 1)}")


def attn_out_biases(model: Model) -> torch.Tensor:
    """Every layer's attention output bias ``[layer, d_model]`` (zeros where the model has none: a Bridge gives
    ``None`` where TransformerLens 3.9 keeps zero tensors)."""
    out = []
    for block in model.blocks:
        b = getattr(block.attn, "b_O", None)
        out.append(torch.zeros(model.cfg.d_model, device=model.W_U.device) if b is None else b.detach())
    return torch.stack([b.to(out[0].device) for b in out])


def attn_scale(model: Model, layer: int) -> float:
    """What block ``layer`` divides its attention scores by (``sqrt(d_head)`` unless the model says otherwise:
    TransformerLens 3.9's ``attn.attn_scale``; on a Bridge ``1 / scaling`` of the Hugging Face attention module)."""
    attn = model.blocks[layer].attn
    if not is_bridge(model):
        return float(attn.attn_scale)
    return 1.0 / float(attn.original_component.scaling)


def per_query_head(model: Model, W: torch.Tensor, dim: int = -3) -> torch.Tensor:
    """Key or value weights with one slice per query head along ``dim``: a Bridge's ``W_K``/``W_V`` hold the
    ``n_key_value_heads`` grouped heads (query head ``h`` reads K/V head ``h // (n_heads // n_kv)``), TransformerLens
    3.9's already repeat them per query head (unchanged here)."""
    n_heads, n = model.cfg.n_heads, W.shape[dim]
    if n == n_heads:
        return W
    if n_heads % n:
        raise ValueError(f"{n} key/value heads do not divide {n_heads} query heads")
    return W.repeat_interleave(n_heads // n, dim=dim)
