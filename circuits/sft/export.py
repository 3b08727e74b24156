"""A tuned model out of the toolkit: the base model with a delta's tuned slices, as a Hugging Face checkpoint.

``export_model(delta, out)`` (``circuits export --delta results/ft/precise/delta.pt --out my-model/``) writes
``model.safetensors``, ``config.json`` (the original architecture, e.g. ``LlamaForCausalLM``), the generation
config and the tokenizer, in the original architecture's parameter names, so that
``AutoModelForCausalLM.from_pretrained("my-model")``, vLLM or lm-eval's own ``hf`` backend load it without circuits.
It also writes ``circuits_export.json``: the base model, the delta and the heads and MLPs that were tuned.

Training keeps TransformerLens's folded norms (``circuits finetune`` loads with ``fold_ln``, exact up to rounding),
so the export divides each norm weight out of the tuned rows that were folded with it
(:mod:`circuits.models.hf_weights`); untuned parameters are copied from the base model as they are. Tests check that
the exported model's logits in transformers equal the tuned ``HookedTransformer``'s, and the tuned
``TransformerBridge``'s (a delta is in TransformerLens's layout on both backends, :mod:`circuits.sft.delta`).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch

from circuits.sft.config import SAVE_DTYPES, ExportConfig  # noqa: F401  (ExportConfig: its config, here as before)
from circuits.io import OutputError, atomic_dir, output_lock, write_json
from circuits.sft.delta import read_delta
from circuits.sft.plan import TuningPlan



def _check_shapes(delta: dict[str, Any], reference: dict[str, torch.Tensor], source: str) -> None:
    """Every tuned tensor exists in the base model with the delta's shape (else the delta is for another model)."""
    plan = TuningPlan.from_json(delta["plan"])
    for t in plan.tensors:
        value = delta["tensors"][t.name]
        base = reference.get(t.name)
        if base is None:
            raise ValueError(f"The delta tunes {t.name}, which {source} does not have: it was made for another model "
                             "(pass the base model it was trained on with --model)")
        expected = tuple(base.shape) if t.rows is None else (len(t.rows), *base.shape[1:])
        if t.rows is not None and max(t.rows) >= base.shape[0]:
            expected = ()
        if tuple(value.shape) != expected:
            raise ValueError(f"The delta's {t.name} has shape {tuple(value.shape)} but {source} needs {expected or 'fewer rows'}: "
                             "it was made for another model (pass the base model it was trained on with --model)")


_FOLDED_BY = {"W_Q": "ln1", "W_K": "ln1", "_W_K": "ln1", "W_V": "ln1", "_W_V": "ln1", "W_in": "ln2", "W_gate": "ln2",
              "W_O": None, "W_out": None}
# Fine-tuning moves a weight slice by a small fraction of its size; values made for another model of the same shape
# are unrelated to the base's (relative distance about sqrt(2) for weights of equal scale).
MAX_RELATIVE_CHANGE = 1.0


def _check_close_to_base(delta: dict[str, Any], reference: dict[str, torch.Tensor], folded: bool, source: str) -> None:
    """The tuned weight slices are near the base model's (folded like training saw them), else the delta was made
    for another model with the same shapes."""
    plan = TuningPlan.from_json(delta["plan"])
    for t in plan.tensors:
        parts = t.name.split(".")
        if parts[0] != "blocks" or parts[-1] not in _FOLDED_BY:
            continue
        base = reference[t.name].double()
        norm = _FOLDED_BY[parts[-1]]
        if folded and norm is not None:
            w = reference[f"blocks.{parts[1]}.{norm}.w"].double()
            base = base * (w[None, :, None] if base.ndim == 3 else w[:, None])
        if t.rows is not None:
            base = base[list(t.rows)]
        change = float((delta["tensors"][t.name].double() - base).norm() / base.norm().clamp_min(1e-12))
        if change > MAX_RELATIVE_CHANGE:
            raise ValueError(f"The delta's {t.name} differs from {source}'s by {change:.2f} of its size, far more than "
                             "fine-tuning moves it: the delta was made for another model (pass the base model it was "
                             "trained on with --model)")


def run(config: ExportConfig, out: str | os.PathLike) -> Path:
    """The ``circuits export`` job: :func:`export_model` of ``config`` into ``out``; returns the folder written."""
    return export_model(config.delta, out, model=config.model, folded=config.folded, dtype=config.dtype)


def export_model(delta: str | os.PathLike, out: str | os.PathLike, *, model: str | None = None, folded: bool = True,
           dtype: str = "float32") -> Path:
    """Write the base model with ``delta``'s tuned slices as a Hugging Face checkpoint in ``out``.

    Args:
        delta: a ``delta.pt`` from ``circuits finetune`` (or :func:`circuits.sft.extract_delta`).
        out: a new or empty folder (written atomically: nothing is left half-written).
        model: the base model (embedded name, ``.gguf`` file or Hugging Face folder); default: the one the delta
            names (``circuits finetune`` records its ``--model``).
        folded: whether training loaded the model with folded norms (``circuits finetune`` does).
        dtype: dtype of the saved weights (``float32`` keeps the logits equal to the tuned model's within 1e-4).
    """
    config = ExportConfig(delta=str(delta), model=model, folded=folded, dtype=dtype)
    out = Path(out)
    _check_out(out)
    with output_lock(out):  # a second export into the same --out is refused, not silently swapped in
        _check_out(out)  # what the first writer left, seen once the lock is held
        return _export(config, delta, out, model, folded, dtype)


def _check_out(out: Path) -> None:
    """``out`` is a new or empty folder, and not the current folder or one of its parents (which atomic_dir would
    swap out from under the shell)."""
    target, here = Path(os.path.realpath(out)), Path(os.path.realpath(Path.cwd()))
    if target == here or target in here.parents:
        raise OutputError(f"--out {out} is the current folder or one of its parents; name a new folder, e.g. "
                          "--out my-model")
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise OutputError(f"{out} already exists and is not an empty folder; export into a new folder")


def _export(config: ExportConfig, delta: str | os.PathLike, out: Path, model: str | None, folded: bool,
            dtype: str) -> Path:
    from circuits.models import backend
    from circuits.models.hf_weights import write_back
    from circuits.models.loading import load_hf_reference, load_tokenizer

    data = read_delta(delta)
    bad = [name for name, t in data.get("tensors", {}).items() if isinstance(t, torch.Tensor) and
           not bool(torch.isfinite(t).all())]
    if bad:
        raise ValueError(f"{delta}: tuned tensor {bad[0]} holds NaN or infinite values (a diverged run); nothing "
                         "exported")
    source = model or data.get("meta", {}).get("model")
    if not source:
        raise ValueError(f"{delta} does not name its base model; pass it with --model")
    hf = load_hf_reference(source)
    tokenizer = load_tokenizer(source)
    reference = backend.installed().reference_weights(hf)  # TransformerLens-named, unfolded (this line's route)
    _check_shapes(data, reference, str(source))
    _check_close_to_base(data, reference, folded, str(source))
    plan = TuningPlan.from_json(data["plan"])
    values = [(t.name, t.rows, data["tensors"][t.name]) for t in plan.tensors]
    hf = write_back(hf, values, reference, folded=folded)
    hf = hf.to(getattr(torch, dtype))
    with atomic_dir(out) as tmp:
        hf.save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)
        write_json(tmp / "circuits_export.json", {
            "base_model": str(source), "delta": str(delta), "config": config.to_json(),
            "architecture": type(hf).__name__, "heads": [list(h) for h in plan.heads], "mlps": list(plan.mlps),
            "full": plan.full, "tuned_tensors": [t.name for t in plan.tensors]})
    return out
