"""Where a model's files come from, on the transformers side: embedded names, GGUF files and their cache, tokenizers.

Nothing here talks to TransformerLens (:mod:`circuits.models.loading` converts what this module reads). A GGUF file
is dequantized by transformers once; its float32 Hugging Face model (safetensors) and tokenizer are cached in
``$CIRCUITS_CACHE`` or ``~/.cache/circuits`` (a folder keyed by the file's path, size and time), written atomically.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

import torch

from circuits.io import atomic_dir, write_json
from circuits.models.embedded import EmbeddedModelMissing, cache_root, embedded_model

# Bump when the cached format changes (2: the dequantized Hugging Face model, not a converted state dict).
CACHE_FORMAT = 2


class ModelLoadError(ValueError):
    """A model name or path that :func:`circuits.models.load_model` cannot load, with what it accepts."""


def embedded_gguf_path(name: str = "smollm2") -> Path:
    """The GGUF file of an embedded model, found without importing its package."""
    model = embedded_model(name)
    if model is None:
        raise ModelLoadError(f"No embedded model {name!r}.")
    try:
        return model.gguf_path()
    except EmbeddedModelMissing as err:
        raise ModelLoadError(str(err)) from None


def gguf_cache_dir(path: Path) -> Path:
    stat = path.stat()
    key = hashlib.sha256(f"{path.resolve()}|{stat.st_size}|{stat.st_mtime_ns}|{CACHE_FORMAT}".encode()).hexdigest()[:16]
    return cache_root() / f"{path.stem}-{key}"


def read_gguf(path: Path) -> tuple[Any, Any]:
    """A GGUF file's model (dequantized to float32 by transformers) and tokenizer."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    try:
        model = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=torch.float32)
        tokenizer = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
    except Exception as err:  # transformers raises many types for unreadable or unsupported GGUF files
        raise ModelLoadError(f"Could not read GGUF file {path}: {err}. Accepted: a GGUF file of a family "
                             "transformers reads (Llama, Mistral, Qwen2, Qwen3, Gemma 2/3, ...).") from err
    # transformers keeps a GGUF quantizer attached to the dequantized model, which refuses to save; the same
    # weights in a plain model of the same class can be cached and exported.
    config = model.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    config.architectures = [type(model).__name__]
    plain = type(model)(config).to(torch.float32)
    plain.load_state_dict(model.state_dict())
    plain.generation_config = model.generation_config
    return plain.eval(), tokenizer


def gguf_cache(path: Path, label: str = "") -> Path:
    """The cache of a GGUF file: ``hf_model/`` (its dequantized float32 model, safetensors) and ``tokenizer/``,
    written once, atomically, so no later load dequantizes again."""
    cache = gguf_cache_dir(path)
    if not (cache / "done").is_file():
        hf_model, tokenizer = read_gguf(path)
        with atomic_dir(cache) as tmp:
            hf_model.save_pretrained(tmp / "hf_model", safe_serialization=True)
            tokenizer.save_pretrained(tmp / "tokenizer")
            write_json(tmp / "source.json", {"source": str(path), "label": label, "format": CACHE_FORMAT})
            (tmp / "done").write_text("ok")
    return cache


def source_path(name_or_path: str | os.PathLike) -> Path:
    name = str(name_or_path)
    return embedded_gguf_path(name) if embedded_model(name) is not None else Path(name).expanduser()


def load_tokenizer(name_or_path: str | os.PathLike = "smollm2") -> Any:
    """A model source's own tokenizer, without its weights: from the conversion cache of a GGUF file when it
    exists, else read from the file once and cached on its own; from a Hugging Face folder as it is."""
    from transformers import AutoTokenizer

    path = source_path(name_or_path)
    if path.suffix != ".gguf":
        return AutoTokenizer.from_pretrained(path, local_files_only=True)
    cache = gguf_cache_dir(path)
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
    """The Hugging Face ``transformers`` model behind a local source (float32, eval mode), for equivalence checks
    and for writing tuned models back out (:mod:`circuits.sft.export`). A GGUF file's is transformers' own
    dequantization of it, cached (:func:`gguf_cache`)."""
    from transformers import AutoModelForCausalLM

    path = source_path(name_or_path)
    if path.suffix == ".gguf":
        path = gguf_cache(path) / "hf_model"
    return AutoModelForCausalLM.from_pretrained(path, local_files_only=True, dtype=torch.float32).eval()
