"""Delta files: the tuned slices of a fine-tuned model, which put onto the base model reproduce it exactly.

A delta holds the tuned rows' *values* (not differences), and the tuning plan that locates them, so applying
it is exact; ``delta.pt`` of a Precise SFT run is a few MB where the model is hundreds.

One format for both backends: tensors are stored under TransformerLens's names in its per-head layout (``W_Q``
``[head, d_model, d_head]``, ``W_O`` ``[head, d_head, d_model]``, grouped K/V as ``_W_K``/``_W_V``). On a
TransformerBridge they are read from and written into the Hugging Face weights behind those names
(:meth:`~circuits.models.backend.Backend.tunable_tensors`), so a delta trained on either line applies on the other.
"""

from __future__ import annotations

import os
from pathlib import Path

import torch
from circuits.models.backend import Model

from circuits.io import load_torch
from circuits.sft import plan as hm

DELTA_FORMAT = 1


def extract_delta(model: Model, plan: hm.TuningPlan, meta: dict | None = None,
                  values: dict[str, torch.Tensor] | None = None) -> dict:
    """The tuned slices' values (not differences: applying them is exact) with the plan that locates them.

    ``values``: the tuned values by tensor name (rows only for sliced tensors), e.g. the optimizer's fp32 masters
    of a bf16/fp16 run, which is what a training run stores; by default they are read from the model. Applied onto
    a model of lower precision they are cast to it, which reproduces the trained model exactly.
    """
    params = model.backend.tunable_tensors() if values is None else {}
    tensors = {}
    for entry in plan.tensors:
        if values is not None:
            tensors[entry.name] = values[entry.name].detach().to(torch.float32).clone().cpu()
            continue
        tensors[entry.name] = params[entry.name].read(entry.rows).clone().cpu()
    return {"format": DELTA_FORMAT, "plan": plan.to_json(), "tensors": tensors, "meta": meta or {}}


def read_delta(path: str | os.PathLike, model_name: str | None = None) -> dict:
    """A delta file, checked before any model is loaded: readable, this format, a plan whose every tensor is stored
    with as many rows as the plan tunes, and (when ``model_name`` is given and the delta records one) made for that
    model. Each problem is one error naming the file."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"delta file not found: {path}")
    delta = load_torch(path, "delta")
    if not isinstance(delta, dict) or delta.get("format") != DELTA_FORMAT or not {"plan", "tensors"} <= set(delta):
        found = delta.get("format") if isinstance(delta, dict) else type(delta).__name__
        raise ValueError(f"{path} is not a circuits delta (format {found!r}; expected {DELTA_FORMAT}): pass the delta.pt "
                         "that `circuits finetune` wrote")
    try:
        plan = hm.TuningPlan.from_json(delta["plan"])
    except (KeyError, TypeError, ValueError) as err:
        raise ValueError(f"{path} has an unreadable tuning plan ({err}); it may be damaged") from None
    for entry in plan.tensors:
        value = delta["tensors"].get(entry.name)
        if not isinstance(value, torch.Tensor):
            raise ValueError(f"{path} lacks the tuned values of {entry.name}; it may be damaged")
        if entry.rows is not None and value.shape[0] != len(entry.rows):
            raise ValueError(f"{path}: {entry.name} holds {value.shape[0]} rows where its plan tunes {len(entry.rows)}; "
                             "it may be damaged")
    made_for = (delta.get("meta") or {}).get("model")
    if model_name is not None and made_for and str(made_for) != str(model_name):
        raise ValueError(f"{path} was made for model {made_for!r}, not {model_name!r}; pass --model {made_for}")
    return delta


def apply_delta(model: Model, delta: dict | str | os.PathLike) -> Model:
    """Write a delta's slices into ``model`` in place (and return it). Every tensor and shape is checked against the
    model before any is written, so a delta of another model leaves the model untouched."""
    if not isinstance(delta, dict):
        delta = read_delta(delta)
    if delta.get("format") != DELTA_FORMAT:
        raise ValueError(f"Unsupported delta format {delta.get('format')!r}; expected {DELTA_FORMAT}")
    plan = hm.TuningPlan.from_json(delta["plan"])
    params = model.backend.tunable_tensors()
    for entry in plan.tensors:
        if entry.name not in params:
            raise ValueError(f"The delta tunes {entry.name}, which this model does not have: it was made for another "
                             f"model ({(delta.get('meta') or {}).get('model', 'unknown')})")
        shape, value = params[entry.name].shape, delta["tensors"][entry.name]
        want = shape if entry.rows is None else (len(entry.rows), *shape[1:])
        if tuple(value.shape) != tuple(want) or (entry.rows is not None and max(entry.rows) >= shape[0]):
            raise ValueError(f"The delta's {entry.name} has shape {tuple(value.shape)} where this model needs "
                             f"{tuple(want)}: it was made for another model ({(delta.get('meta') or {}).get('model', 'unknown')})")
    with torch.no_grad():
        for entry in plan.tensors:
            params[entry.name].write(delta["tensors"][entry.name], entry.rows)
    return model
