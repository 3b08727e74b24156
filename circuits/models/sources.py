"""Where a model's files come from, on the transformers side: embedded names, GGUF files and their cache, tokenizers.

Nothing here talks to TransformerLens (:mod:`circuits.models.loading` converts what this module reads). A GGUF file
is dequantized by transformers once; its float32 Hugging Face model (safetensors) and tokenizer are cached in
``$CIRCUITS_CACHE`` or ``~/.cache/circuits`` (a folder keyed by the file's bytes: the same file installed in many
environments shares one folder), written atomically. Folders of an older cache format that this module named are
removed when a new one is written (they were keyed by the file's path: one 1.2 GB folder per environment).
"""

from __future__ import annotations

import copy
import functools
import hashlib
import glob
import json
import os
import re
import shutil
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch

from circuits.io import atomic_dir, write_json
from circuits.models.embedded import EmbeddedModelMissing, cache_root, embedded_model

# Bump when the cached format changes (2: the dequantized Hugging Face model, not a converted state dict; 3: keyed
# by the file's sha256, not its path).
CACHE_FORMAT = 3
_DIGEST_CHUNK = 1 << 24


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


def file_digest(path: Path) -> str:
    """The sha256 of a file's bytes, hashed once per (path, size, modification time) and remembered in the cache's
    ``digests/`` folder (a 7B GGUF file takes seconds to hash)."""
    stat = path.stat()
    seen = hashlib.sha256(f"{path.resolve()}|{stat.st_size}|{stat.st_mtime_ns}".encode()).hexdigest()[:32]
    memo = cache_root() / "digests" / seen
    if memo.is_file():
        digest = memo.read_text().strip()
        if re.fullmatch(r"[0-9a-f]{64}", digest):
            return digest
    sha = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(_DIGEST_CHUNK):
            sha.update(chunk)
    digest = sha.hexdigest()
    memo.parent.mkdir(parents=True, exist_ok=True)
    tmp = memo.with_name(f".{seen}.{os.getpid()}")
    tmp.write_text(digest)
    os.replace(tmp, memo)
    return digest


def gguf_cache_dir(path: Path) -> Path:
    """The cache folder of a GGUF file: named by its stem and a key of its bytes and the cache format."""
    key = hashlib.sha256(f"{file_digest(path)}|{CACHE_FORMAT}".encode()).hexdigest()[:16]
    return cache_root() / f"{path.stem}-{key}"


def stale_cache_dirs(path: Path) -> list[Path]:
    """Folders this module wrote for a file of this stem in an older cache format: a converted folder whose
    ``source.json`` records a format below :data:`CACHE_FORMAT`, or a tokenizer folder without the format mark
    that format 3 writes. Never a folder of the current format, nor one of a name this module does not write."""
    current = gguf_cache_dir(path)
    named = re.compile(re.escape(path.stem) + r"-[0-9a-f]{16}(-tokenizer)?")
    stale = []
    for folder in sorted(cache_root().glob(f"{glob.escape(path.stem)}-*")):
        if folder.is_symlink() or not folder.is_dir() or not named.fullmatch(folder.name) or \
                folder.name.startswith(current.name):  # a link is someone's, not a folder this module wrote
            continue
        if folder.name.endswith("-tokenizer"):
            if not (folder / "circuits-cache.json").is_file():
                stale.append(folder)
            continue
        try:
            source = json.loads((folder / "source.json").read_text())
        except (OSError, ValueError):
            continue  # no record of ours (or one being written): left alone
        if isinstance(source, dict) and isinstance(source.get("format"), int) and source["format"] < CACHE_FORMAT:
            stale.append(folder)
    return stale


def remove_stale_cache(path: Path) -> None:
    """Remove :func:`stale_cache_dirs`, saying so in one warning (a line on the command line)."""
    stale = stale_cache_dirs(path)
    if not stale:
        return
    size = sum(f.stat().st_size for folder in stale for f in folder.rglob("*") if f.is_file())
    for folder in stale:
        shutil.rmtree(folder, ignore_errors=True)
    warnings.warn(f"removed {len(stale)} cache folder(s) of an older format for {path.name} ({size / 1e9:.1f} GB) "
                  f"from {cache_root()}", stacklevel=2)


def read_gguf(path: Path) -> tuple[Any, Any]:
    """A GGUF file's model (dequantized to float32 by transformers) and tokenizer."""
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.initialization import no_init_weights

    try:
        with parsed_once():
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
    with no_init_weights():  # every parameter is replaced below: no random initialisation first (1.7 s)
        plain = type(model)(config).to(torch.float32)
    plain.load_state_dict(model.state_dict(), assign=True)  # the dequantized tensors themselves, not a copy (1.3 s)
    if getattr(config, "tie_word_embeddings", False):
        plain.tie_weights()  # assigned, the tied unembedding became a tensor of its own
    plain.generation_config = model.generation_config
    return plain.eval(), tokenizer


@contextmanager
def parsed_once() -> Iterator[None]:
    """Within this block, ``gguf``'s reader of a file and its tensor-name map of an architecture are each built once,
    and the reader slices the file as a plain numpy array.

    transformers' GGUF loading (its legacy path, which Llama-family files take) opens a new ``gguf.GGUFReader`` for the
    config, again for the weights and again for the tokenizer's config, and builds ``gguf.get_tensor_name_map(arch,
    n_layers)`` once for every module of the model while it maps tensor names (397 times, 0.02 s each), and parses
    the same fields into Python values for each of the three. A reader
    parses every one of the vocabulary's tokens and merges (98,000 strings for SmolLM2) as slices of a ``np.memmap``,
    each slice passing through memmap's Python ``__getitem__`` and ``__array_finalize__`` (3.4 s of CPU a reader); the
    same slices of a plain ``ndarray`` view of the same mapped file are the same bytes (0.95 s). The reader and the
    map are pure functions of the read-only file and their arguments, so one of each serves every call (and the
    fields parsed without tensors once, a copy for each call): the same
    config, weights and tokenizer (tests/unit/test_gguf_parse.py). Both names are restored on leaving; transformers
    imports them from ``gguf`` at each call, which is what lets this replace them."""
    import gguf
    import numpy as np

    reader_class, name_map = gguf.GGUFReader, gguf.get_tensor_name_map

    class PlainReader(reader_class):  # type: ignore[misc, valid-type]
        @property
        def data(self) -> Any:
            return self._plain

        @data.setter
        def data(self, mapped: Any) -> None:  # GGUFReader.__init__ assigns its np.memmap here
            self._plain = mapped.view(np.ndarray)  # the mapping, without memmap's per-slice hooks

    readers: dict[str, Any] = {}

    def reader(path: str | os.PathLike, mode: str = "r") -> Any:
        if mode != "r":  # a writable reader is transformers' business; never shared
            return reader_class(path, mode)
        key = os.path.realpath(path)
        if key not in readers:
            readers[key] = PlainReader(path, mode)
        return readers[key]

    from transformers import modeling_gguf_pytorch_utils as gguf_loading

    load_checkpoint = gguf_loading.load_gguf_checkpoint
    metadata: dict[str, Any] = {}

    def load_metadata(path: str | os.PathLike, return_tensors: bool = False, **kwargs: Any) -> Any:
        """The config and tokenizer fields (no tensors: asked for by the config and by the tokenizer) parsed once,
        each caller given its own copy (they pop from it)."""
        if return_tensors or kwargs:
            return load_checkpoint(path, return_tensors, **kwargs)
        key = os.path.realpath(path)
        if key not in metadata:
            metadata[key] = load_checkpoint(path, False)
        return copy.deepcopy(metadata[key])

    gguf.GGUFReader, gguf.get_tensor_name_map = reader, functools.lru_cache(maxsize=None)(name_map)
    gguf_loading.load_gguf_checkpoint = load_metadata
    try:
        yield
    finally:
        gguf.GGUFReader, gguf.get_tensor_name_map = reader_class, name_map
        gguf_loading.load_gguf_checkpoint = load_checkpoint


def gguf_cache(path: Path, label: str = "") -> Path:
    """The cache of a GGUF file: ``hf_model/`` (its dequantized float32 model, safetensors) and ``tokenizer/``,
    written once, atomically, so no later load dequantizes again."""
    cache = gguf_cache_dir(path)
    if not (cache / "done").is_file():
        hf_model, tokenizer = read_gguf(path)
        with atomic_dir(cache) as tmp:
            hf_model.save_pretrained(tmp / "hf_model", safe_serialization=True)
            tokenizer.save_pretrained(tmp / "tokenizer")
            write_json(tmp / "source.json", {"source": str(path), "label": label, "format": CACHE_FORMAT,
                                             "sha256": file_digest(path)})
            (tmp / "done").write_text("ok")
        remove_stale_cache(path)
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
    with parsed_once():  # the file's reader built once for the tokenizer's config and its vocabulary
        tokenizer = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
    with atomic_dir(alone) as tmp:
        tokenizer.save_pretrained(tmp)
        write_json(tmp / "circuits-cache.json", {"source": str(path), "format": CACHE_FORMAT})
    remove_stale_cache(path)
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
