"""Delta files: the tuned slices of a fine-tuned model, which put onto the base model reproduce it exactly.

A delta holds the tuned rows' *values* (not differences), and the tuning plan that locates them, so applying
it is exact; ``delta.pt`` of a Precise SFT run is a few MB where the model is hundreds.
"""

from __future__ import annotations

import os

import torch
from transformer_lens import HookedTransformer

from circuits.sft import plan as hm

DELTA_FORMAT = 1


def extract_delta(model: HookedTransformer, plan: hm.TuningPlan, meta: dict | None = None,
                  values: dict[str, torch.Tensor] | None = None) -> dict:
    """The tuned slices' values (not differences: applying them is exact) with the plan that locates them.

    ``values``: the tuned values by tensor name (rows only for sliced tensors), e.g. the optimizer's fp32 masters
    of a bf16/fp16 run, which is what a training run stores; by default they are read from the model. Applied onto
    a model of lower precision they are cast to it, which reproduces the trained model exactly.
    """
    params = dict(model.named_parameters())
    tensors = {}
    for entry in plan.tensors:
        if values is not None:
            tensors[entry.name] = values[entry.name].detach().to(torch.float32).clone().cpu()
            continue
        p = params[entry.name].detach()
        tensors[entry.name] = (p if entry.rows is None else p[list(entry.rows)]).clone().cpu()
    return {"format": DELTA_FORMAT, "plan": plan.to_json(), "tensors": tensors, "meta": meta or {}}


def apply_delta(model: HookedTransformer, delta: dict | str | os.PathLike) -> HookedTransformer:
    """Write a delta's slices into ``model`` in place (and return it)."""
    if not isinstance(delta, dict):
        delta = torch.load(delta, map_location="cpu", weights_only=True)
    if delta.get("format") != DELTA_FORMAT:
        raise ValueError(f"Unsupported delta format {delta.get('format')!r}; expected {DELTA_FORMAT}")
    plan = hm.TuningPlan.from_json(delta["plan"])
    params = dict(model.named_parameters())
    with torch.no_grad():
        for entry in plan.tensors:
            if entry.name not in params:
                raise ValueError(f"Delta tensor {entry.name} does not exist in this model; was it made for another model?")
            p = params[entry.name]
            value = delta["tensors"][entry.name].to(device=p.device, dtype=p.dtype)
            if entry.rows is None:
                p.copy_(value)
            else:
                p.index_copy_(0, torch.tensor(entry.rows, dtype=torch.long, device=p.device), value)
    return model
