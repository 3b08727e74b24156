"""The seam between ``circuits`` and TransformerLens, with two implementations chosen at import by the installed
TransformerLens: 3.9 gives :mod:`circuits.models._hooked` (``HookedTransformer``), 4.3 or a later 4.x gives
:mod:`circuits.models._bridge` (``TransformerBridge``); :data:`NAME` says which (``"hooked"``/``"bridge"``). Any
other version fails at import with one line naming what is supported (:func:`check_version`).

Every TransformerLens internal that the engines (:mod:`circuits.patching`), validation (:mod:`circuits.validate`),
explanations (:mod:`circuits.explain`) and evaluation (:mod:`circuits.evaluation`) use comes from here.
:mod:`circuits.models.loading` keeps the loading internals. ``tests/unit/test_backend.py`` asserts that no module
outside :mod:`circuits.models` imports more of ``transformer_lens`` than the model and cache classes, and that both
implementations define every name below.

What a backend provides (the contract):

- types: :data:`Model` (the model class, for annotations and ``isinstance``), :data:`ActivationCache` and
  :data:`FactoredMatrix`; a model has ``cfg`` (``n_layers``, ``n_heads``, ``d_model``, ``d_head``, ``d_mlp``,
  ``d_vocab``, ``n_key_value_heads``, ``dtype``, ``device``), ``blocks[l]`` with ``ln1``/``ln2``/``attn``/``mlp``
  (and ``ln1_post``/``ln2_post`` where a norm follows a sublayer), ``ln_final``, ``unembed``, ``run_with_hooks``,
  ``run_with_cache``, ``hooks`` and ``to_tokens``; the same hook names and shapes on both (``hook_k``/``hook_v``
  carry ``n_kv_heads`` heads), and ``model(tokens, stop_at_layer=n_layers)`` returns the residual stream after the
  last block on both (:func:`final_residual`);
- hook names: :func:`act_name` (``act_name("z", 3)`` is ``"blocks.3.attn.hook_z"``), :func:`rotary_key_hook`;
- model facts the two lines keep in different places: :func:`architecture` (HF architecture name),
  :func:`n_kv_heads`, :func:`post_norms` (Gemma 2/3), :func:`end_unsupported` (what the END engine refuses);
- attention at one position, piece by piece (:func:`circuits.patching.end_layers.attention_at_end`):
  :func:`attn_qkv` (``W_Q/b_Q/W_K/b_K/W_V/b_V``, K/V with ``n_kv_heads`` heads, biases zero where absent),
  :func:`attn_out` (``W_O/b_O``), :func:`qk_norms` (per-head norms before rotary, or ``None``), :func:`rotary`
  (rotary at each row's own position, per layer), :func:`score_scale` (the factor on ``q . k``),
  :func:`score_softcap`, :func:`sliding_window` (per layer, ``None`` for global), :func:`attention_scores` (scaled,
  soft-capped scores of given queries and keys);
- output: :func:`unembed_weights` (``W_U``, ``b_U`` zero where absent), :func:`logit_softcap`,
  :func:`final_residual`;
- a shared prefix run once: :func:`prefix_sharing` (whether it gives the full run's numbers on this model),
  :func:`prefix_cache` (run a prefix with hooks, rows repeated) and :func:`continue_prefix` (final residual of the
  rest); on 3.9 TransformerLens's own frozen cache, on the Bridge Hugging Face's ``DynamicCache``;
- many distinct prefixes run once, bodies continued with gradients (attribution, EAP-IG and the per-position
  engine ask for these, never for a backend): :func:`run_prefixes` (each row's first ``n[i]`` tokens, distinct ones
  run once without gradients, left-padded with a mask: a :data:`Prefix`, or ``None`` where no row has one),
  :func:`continue_prefixes` (the final residual, or the residual entering a block, of each row's body after its
  prefix, hooks on, gradients through the body; ``None`` runs the body as a whole prompt), :func:`prefix_keys` (the
  prefix's keys that :func:`rotary_key_hook` leaves out while continuing: none on 3.9's rotary models, all of them
  on the Bridge), :func:`ungroup_prefix` (key/value heads repeated per query head, for runs inside
  :func:`split_inputs`), :func:`prefix_kv_hooks` (the hooks whose whole-prompt values are a prefix's keys and values,
  or ``None`` where they are not) and :func:`prefix_from_kv` (a :data:`Prefix` from them); :func:`block_runner` (one
  block alone on a suffix after those keys and values, the per-position engine's rows joining at their sender's
  layer; ``None`` where blocks do not run alone). All of these apply
  only where :func:`prefix_sharing` is true (else engines run whole prompts: the same numbers);
- TransformerLens 3 internals (no engine reads them any more; :mod:`circuits.evaluation.lm_eval` still builds a
  :data:`KeyValueCache` on 3.9; :data:`TL_CACHE` says whether the model reads them): :data:`KeyValueCache`, :data:`KeyValueCacheEntry`,
  :func:`frozen_cache_entry` (refused on the Bridge), :data:`AbstractAttention` (``None`` on the Bridge),
  :func:`simple_attn_linear`;
- receivers' own inputs (edges): :func:`split_inputs`, a context in which every head reads its own copies of the
  residual for its query, key and value inputs (``hook_q_input``/``hook_k_input``/``hook_v_input``, one per query
  head with ``ungroup``), each MLP its own (``hook_mlp_in``), and with ``attn_result`` heads write ``hook_result``
  (on the Bridge, grouped key/value heads are ungrouped by repeating the HF ``k_proj``/``v_proj`` heads for the
  context: the same numbers);
- soft-capping: :func:`apply_softcap`, :func:`softcap_enabled`; :data:`POST_NORM_ARCHITECTURES`;
- devices: :func:`block_devices`, :func:`spread` (3.9; the Bridge is spread when it loads), :func:`layer_device`,
  :func:`output_device`, :func:`check_dtype`.
"""

from __future__ import annotations

from circuits.versions import SUPPORTED, UnsupportedTransformerLens, backend_line  # the one rule (tl4env)


def check_version(installed: str | None = None) -> str:
    """``"hooked"`` for TransformerLens 3.9.x, ``"bridge"`` for 4.3 <= version < 5; any other version (or none
    installed) raises :class:`UnsupportedTransformerLens` with one line naming what is supported
    (:func:`circuits.versions.backend_line`, which ``circuits.models`` runs first on import)."""
    return "hooked" if backend_line(installed) == 3 else "bridge"


NAME = check_version()

if NAME == "hooked":
    from circuits.models._hooked import (  # noqa: F401
        Prefix, continue_prefixes, prefix_from_kv, prefix_keys, prefix_kv_hooks, block_runner, run_prefixes,
        ungroup_prefix,
        POST_NORM_ARCHITECTURES, AbstractAttention, ActivationCache, FactoredMatrix, KeyValueCache,
        KeyValueCacheEntry, Model, TL_CACHE, act_name, apply_softcap, architecture, attention_scores, attn_out, attn_qkv, block_devices,
        check_dtype, continue_prefix, end_unsupported, final_residual, frozen_cache_entry, layer_device,
        logit_softcap, n_kv_heads, output_device, post_norms, prefix_cache, prefix_sharing, qk_norms, rotary,
        rotary_key_hook, score_scale, score_softcap, simple_attn_linear, sliding_window, softcap_enabled, spread,
        split_inputs, unembed_weights)
else:
    from circuits.models._bridge import (  # type: ignore[assignment]  # noqa: F401
        Prefix, continue_prefixes, prefix_from_kv, prefix_keys, prefix_kv_hooks, block_runner, run_prefixes,
        ungroup_prefix,
        POST_NORM_ARCHITECTURES, AbstractAttention, ActivationCache, FactoredMatrix, KeyValueCache,
        KeyValueCacheEntry, Model, TL_CACHE, act_name, apply_softcap, architecture, attention_scores, attn_out, attn_qkv, block_devices,
        check_dtype, continue_prefix, end_unsupported, final_residual, frozen_cache_entry, layer_device,
        logit_softcap, n_kv_heads, output_device, post_norms, prefix_cache, prefix_sharing, qk_norms, rotary,
        rotary_key_hook, score_scale, score_softcap, simple_attn_linear, sliding_window, softcap_enabled, spread,
        split_inputs, unembed_weights)

__all__ = ["NAME", "Prefix", "continue_prefixes", "prefix_from_kv", "prefix_keys", "prefix_kv_hooks",
           "block_runner", "run_prefixes", "ungroup_prefix", "POST_NORM_ARCHITECTURES", "SUPPORTED", "AbstractAttention", "ActivationCache", "FactoredMatrix",
           "KeyValueCache", "KeyValueCacheEntry", "Model", "TL_CACHE", "UnsupportedTransformerLens", "act_name",
           "apply_softcap", "architecture", "attention_scores", "attn_out", "attn_qkv", "block_devices", "check_dtype", "check_version",
           "continue_prefix", "end_unsupported", "final_residual", "frozen_cache_entry", "layer_device",
           "logit_softcap", "n_kv_heads", "output_device", "post_norms", "prefix_cache", "prefix_sharing",
           "qk_norms", "rotary", "rotary_key_hook", "score_scale", "score_softcap", "simple_attn_linear",
           "sliding_window", "softcap_enabled", "split_inputs", "spread", "unembed_weights"]


# --- Fine-tuning (circuits.sft): TransformerLens-named parameters and the final residual, on either backend -------
# (tl4sft) Precise SFT plans, masks, steps and saves tensors under TransformerLens's names and per-head layout; on a
# TransformerBridge those are views of the Hugging Face weights (circuits.models.hf_weights.TunableTensor).

import torch  # noqa: E402

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


class _FinalResidual(Exception):  # noqa: N818  (control flow, not an error)
    pass


def training_residual(model: Model, tokens: torch.Tensor) -> torch.Tensor:
    """The residual stream after the last block, ``[batch, pos, d_model]``, before the final norm (with gradients):
    :func:`final_residual`, except on a plain ``TransformerBridge`` (TransformerLens 3.9's own, which the parity
    tests hold beside a ``HookedTransformer``), whose ``stop_at_layer=n_layers`` returns logits: that run is stopped
    from the last block's ``hook_resid_post`` instead."""
    if not is_bridge(model) or NAME == "bridge":
        return final_residual(model, tokens)
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
