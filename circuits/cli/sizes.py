"""A model's number of layers and heads read without torch or its weights, so a flag bounded by them (``--ks``,
``--n-key-heads``: ``count(..., per_model="heads")`` in :mod:`circuits.config`) is refused in one line before the
model loads (issue 40: ``--ks 0,1000`` came after the 8 s load).

Read, in this order: the identify result a job takes its heads from (its ``summary.json``'s ``head_effects``, one
row per layer, one value per head); a local Hugging Face folder's ``config.json`` (its text model's
``num_hidden_layers``, ``num_attention_heads``); a GGUF file's header (``<arch>.block_count``,
``<arch>.attention.head_count``), the embedded models' included where their file is at hand. Anything else (a hub
name) gives None: its bounds are checked once it is loaded (:func:`circuits.config.check_model_ranges`), as before.
Imports neither torch nor numpy nor transformer_lens."""

from __future__ import annotations

import importlib.util
import json
import struct
import sys
from pathlib import Path
from typing import Any, BinaryIO

Sizes = tuple[int, int]  # (n_layers, n_heads)


def declared_sizes(model: str, heads_from: str = "") -> Sizes | None:
    """``(n_layers, n_heads)`` of ``model`` (or of the model of the identify result in ``heads_from``), read without
    loading it, else None."""
    if heads_from:
        sizes = _identify_sizes(Path(heads_from).expanduser())
        if sizes is not None:
            return sizes
    path = Path(str(model)).expanduser()
    try:
        if path.is_dir() and (path / "config.json").is_file():
            return _hf_sizes(json.loads((path / "config.json").read_text()))
        if path.suffix.lower() == ".gguf" and path.is_file():
            return gguf_sizes(path)
        found = _embedded_gguf(str(model))
        return gguf_sizes(found) if found is not None else None
    except (OSError, ValueError, KeyError, TypeError, struct.error):
        return None  # unreadable here: the loader says what is wrong, in its own line


def check_pairs_file(config: Any) -> Any:
    """``config``, after a ``--pairs-file`` given on the command line that does not exist, or whose lines the job would
    refuse once torch and the model have loaded (not JSON, a missing field, bad ``roles``, no ``counterfactual_answer``
    under ``--second-logit label``): one line naming the file and line. The lines the job reads first (``--pairs``)
    are checked without the tokenizer (:func:`circuits.data.roles.pairs_file_lines`). (Called on the flags' config,
    before a ``--heads-from`` result's fields replace it: a pairs file that result recorded is not read again.)"""
    pairs_file = getattr(config, "pairs_file", "")
    if not (isinstance(pairs_file, str) and pairs_file):
        return config
    if not Path(pairs_file).expanduser().is_file():
        raise ValueError(f"{pairs_file} not found" if not Path(pairs_file).expanduser().is_dir() else
                         f"--pairs-file {pairs_file} is a folder; give the JSONL file")
    from circuits.data.roles import pairs_file_lines

    try:
        pairs_file_lines(pairs_file, getattr(config, "n_pairs", None),
                         label=getattr(config, "second_logit", "") == "label")
    except (OSError, ValueError) as err:
        if str(err).startswith("--pairs-file"):
            raise
        said = str(err)[len(pairs_file):].lstrip(",: ") if str(err).startswith(pairs_file) else str(err)
        raise ValueError(f"--pairs-file {pairs_file}: {said}") from None
    return config


def check_declared_ranges(config: Any) -> Any:
    """``config``, after what can be checked of it without torch: its ``per_model`` bounds and named ``--receivers``
    lie inside its model, where the model's sizes can be read without loading it (:func:`declared_sizes`). Each is one
    ValueError line, as the job would say it after the imports and the load."""
    from circuits.config import check_model_ranges

    model = getattr(config, "model", None)
    if not isinstance(model, str):
        return config
    sizes = declared_sizes(model, getattr(config, "heads_from", "") or "")
    if sizes is None:
        return config
    check_model_ranges(config, *sizes)
    receivers = getattr(config, "receivers", "")
    if isinstance(receivers, str) and receivers.strip() and not receivers.strip().lower().startswith("top"):
        from circuits.types import Receiver

        n_layers, n_heads = sizes
        for c in (r.component for r in Receiver.parse_many(receivers)):
            if c.layer >= n_layers or (c.kind == "head" and c.head >= n_heads):  # the loaded model's line
                raise ValueError(f"Component {c} is outside this model ({n_layers} layers x {n_heads} heads).")
    return config


def _identify_sizes(folder: Path) -> Sizes | None:
    try:
        rows = json.loads((folder / "summary.json").read_text()).get("head_effects")
    except (OSError, ValueError, AttributeError):
        return None
    if isinstance(rows, list) and rows and all(isinstance(r, list) and len(r) == len(rows[0]) for r in rows) and rows[0]:
        return len(rows), len(rows[0])
    return None


def _hf_sizes(config: dict[str, Any]) -> Sizes:
    text = config.get("text_config") or config  # a multimodal model's text part (Gemma 3)
    layers, heads = text["num_hidden_layers"], text["num_attention_heads"]
    if not (isinstance(layers, int) and isinstance(heads, int)):
        raise TypeError("num_hidden_layers and num_attention_heads are integers")
    return layers, heads


def _embedded_gguf(name: str) -> Path | None:
    """The GGUF file of the embedded model ``name`` where it is at hand without work (its wheel installed; Gemma's
    chunks already joined), read from the one registry, :mod:`circuits.models.embedded` (stdlib only), loaded from
    its file: importing it as ``circuits.models.embedded`` would import torch with its package."""
    module = sys.modules.get("circuits.models.embedded")
    if module is None:
        path = Path(__file__).parents[1] / "models" / "embedded.py"
        spec = importlib.util.spec_from_file_location("circuits._embedded_registry", path)
        if spec is None or spec.loader is None:
            return None
        module = sys.modules.get(spec.name) or importlib.util.module_from_spec(spec)
        if spec.name not in sys.modules:
            sys.modules[spec.name] = module  # dataclasses read their module while the class is made
            spec.loader.exec_module(module)
    found = module.embedded_model(name)
    return found.gguf_at_hand() if found is not None else None


# GGUF metadata value types (https://github.com/ggml-org/ggml/blob/master/docs/gguf.md): struct formats of the
# fixed-size ones; 8 is a string (uint64 length + bytes), 9 an array (uint32 type, uint64 count, values).
_FIXED = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
_STRING, _ARRAY = 8, 9


def gguf_sizes(path: str | Path) -> Sizes:
    """``(n_layers, n_heads)`` from a GGUF file's header: ``<arch>.block_count`` and ``<arch>.attention.head_count``
    (the largest, where it is given per layer), reading the metadata only, never the tensors."""
    with open(path, "rb") as f:
        if f.read(4) != b"GGUF":
            raise ValueError(f"{path} is not a GGUF file")
        version, = struct.unpack("<I", f.read(4))
        if version < 2:
            raise ValueError(f"{path}: GGUF version {version} is not read here")
        _, n_kv = struct.unpack("<QQ", f.read(16))
        values: dict[str, Any] = {}
        arch = None
        for _ in range(n_kv):
            key = _string(f)
            value = _value(f, struct.unpack("<I", f.read(4))[0])
            if key == "general.architecture":
                arch = value
            values[key] = value
            if arch and f"{arch}.block_count" in values and f"{arch}.attention.head_count" in values:
                heads = values[f"{arch}.attention.head_count"]
                return int(values[f"{arch}.block_count"]), int(max(heads) if isinstance(heads, list) else heads)
    raise ValueError(f"{path}: no block_count and attention.head_count in its header")


def _string(f: BinaryIO) -> str:
    n, = struct.unpack("<Q", f.read(8))
    return f.read(n).decode("utf-8", errors="replace")


def _value(f: BinaryIO, kind: int) -> Any:
    if kind in _FIXED:
        fmt = "<" + _FIXED[kind]
        return struct.unpack(fmt, f.read(struct.calcsize(fmt)))[0]
    if kind == _STRING:
        return _string(f)
    if kind == _ARRAY:
        inner, n = struct.unpack("<IQ", f.read(12))
        if inner in _FIXED and n > 64:  # a long array of numbers (token scores): skipped, never needed here
            f.seek(n * struct.calcsize("<" + _FIXED[inner]), 1)
            return None
        return [_value(f, inner) for _ in range(n)]
    raise ValueError(f"unknown GGUF value type {kind}")
