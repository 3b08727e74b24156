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
  :func:`score_softcap`, :func:`sliding_window` (per layer, ``None`` for global);
- output: :func:`unembed_weights` (``W_U``, ``b_U`` zero where absent), :func:`logit_softcap`,
  :func:`final_residual`;
- a shared prefix run once: :func:`prefix_sharing` (whether it gives the full run's numbers on this model),
  :func:`prefix_cache` (run a prefix with hooks, rows repeated) and :func:`continue_prefix` (final residual of the
  rest); on 3.9 TransformerLens's own frozen cache, on the Bridge Hugging Face's ``DynamicCache``;
- TransformerLens 3 internals some engines still use on 3.9: :data:`KeyValueCache`, :data:`KeyValueCacheEntry`,
  :func:`frozen_cache_entry` (refused on the Bridge), :data:`AbstractAttention` (``None`` on the Bridge),
  :func:`simple_attn_linear`;
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
        POST_NORM_ARCHITECTURES, AbstractAttention, ActivationCache, FactoredMatrix, KeyValueCache,
        KeyValueCacheEntry, Model, act_name, apply_softcap, architecture, attn_out, attn_qkv, block_devices,
        check_dtype, continue_prefix, end_unsupported, final_residual, frozen_cache_entry, layer_device,
        logit_softcap, n_kv_heads, output_device, post_norms, prefix_cache, prefix_sharing, qk_norms, rotary,
        rotary_key_hook, score_scale, score_softcap, simple_attn_linear, sliding_window, softcap_enabled, spread,
        unembed_weights)
else:
    from circuits.models._bridge import (  # type: ignore[assignment]  # noqa: F401
        POST_NORM_ARCHITECTURES, AbstractAttention, ActivationCache, FactoredMatrix, KeyValueCache,
        KeyValueCacheEntry, Model, act_name, apply_softcap, architecture, attn_out, attn_qkv, block_devices,
        check_dtype, continue_prefix, end_unsupported, final_residual, frozen_cache_entry, layer_device,
        logit_softcap, n_kv_heads, output_device, post_norms, prefix_cache, prefix_sharing, qk_norms, rotary,
        rotary_key_hook, score_scale, score_softcap, simple_attn_linear, sliding_window, softcap_enabled, spread,
        unembed_weights)

__all__ = ["NAME", "POST_NORM_ARCHITECTURES", "SUPPORTED", "AbstractAttention", "ActivationCache", "FactoredMatrix",
           "KeyValueCache", "KeyValueCacheEntry", "Model", "UnsupportedTransformerLens", "act_name", "apply_softcap",
           "architecture", "attn_out", "attn_qkv", "block_devices", "check_dtype", "check_version",
           "continue_prefix", "end_unsupported", "final_residual", "frozen_cache_entry", "layer_device",
           "logit_softcap", "n_kv_heads", "output_device", "post_norms", "prefix_cache", "prefix_sharing",
           "qk_norms", "rotary", "rotary_key_hook", "score_scale", "score_softcap", "simple_attn_linear",
           "sliding_window", "softcap_enabled", "spread", "unembed_weights"]
