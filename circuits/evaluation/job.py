"""The evaluation job (``circuits evaluate``): a model, optionally with a fine-tuning delta, scored on the benchmarks.

:func:`run` (``run(config, out)``) is its one entry point: the delta, the device and the data files are checked before
the model loads (each a line of its own), then the model is loaded in ``config.dtype`` (``n_devices``: spread over
that many GPUs), the delta applied, the tasks scored and the result saved to ``out`` (a folder, or one ``.json``
file)."""

from __future__ import annotations

from pathlib import Path

import torch

from circuits import distributed
from circuits.evaluation.config import EvalConfig
from circuits.evaluation.result import EvalResult
from circuits.evaluation.tasks import check_data, evaluate
from circuits.models.backend import Model
from circuits.models.loading import load_model
from circuits.sft.delta import apply_delta, read_delta
from circuits.sft.optim import check_device


def check(config: EvalConfig, device: str | None = None) -> tuple[dict | None, str]:
    """What can be checked before the model loads (one process, the delta, the device, the data files), each a line
    of its own; returns the delta (None without one) and the device."""
    if distributed.is_distributed():
        raise ValueError("evaluate runs in one process; launch it without torchrun (--n-devices spreads a big model "
                         "over a node's GPUs)")
    delta = read_delta(config.delta, config.model) if config.delta else None  # checked before the model loads
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    check_device(config.dtype, device)
    check_data(config)  # before the model loads: a missing data folder or file is one line
    return delta, device


def run(config: EvalConfig, out: str | Path, *, model: Model | None = None, progress: bool = True,
        device: str | None = None, n_devices: int = 1, overwrite: bool = False) -> EvalResult:
    """Score ``config.model`` (with ``config.delta`` applied) on ``config.tasks``; saved to ``out``. ``model``: the
    base model already loaded (the delta is applied to it); ``progress`` is taken for the one job signature
    (:mod:`circuits.jobs`): the benchmarks draw no progress bar."""
    delta, device = check(config, device)
    if model is None:
        model = load_model(config.model, device=device, dtype=config.dtype, n_devices=n_devices)
    if delta is not None:
        apply_delta(model, delta)
    result = evaluate(model, config)
    result.save(out, overwrite=overwrite)
    return result
