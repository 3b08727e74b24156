"""The fine-tuning job (``circuits finetune``, Tables 1 and 2): what to tune, the data, the device, the run.

:func:`run` (``run(config, out)``) is the job's one entry point: it checks the data files and the device before the
model loads, leaves a run already finished in ``out`` as it is (its saved result returned), loads the model (fp32 on
the CPU for sharded full SFT, whose fp32 shards are the masters), builds and tokenizes the training mixture and
trains (:func:`circuits.sft.train.finetune`, resumable). :func:`components_from` takes the heads and MLPs to tune
from an identify result (``--heads-from``); :func:`training_set` is the tokenized mixture the tables train on too.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from circuits.models.backend import Model

from circuits import distributed as D
from circuits.data.benchmarks import check_data_files
from circuits.identify.result import load_identify
from circuits.models.loading import load_model
from circuits.sft.config import check_component_counts
from circuits.sft.data import TokenizedExample, build_training_set, tokenize_examples
from circuits.sft.optim import check_device
from circuits.sft.parallel import strategy_for
from circuits.sft.result import FinetuneResult
from circuits.sft.train import FinetuneConfig, finetune, run_state
from circuits.types import Head

# --data source -> the benchmark data file it reads (arithmetic is generated)
DATA_FILES = {"gsm8k": "gsm8k_train", "adapters": "adapters"}


def components_from(heads_from: str | Path, top_k: int = 32, top_mlps: int = 0) -> tuple[list[Head], list[int]]:
    """The heads (its key heads, then the rest of its ranking: the paper's "top k") and MLPs to tune, from a
    ``circuits identify`` result folder."""
    result = load_identify(heads_from)
    return result.top_heads(top_k) if top_k else [], [c.layer for c in result.scores(None).top(top_mlps, "mlps", first=result.key_rule)] if top_mlps else []


def select(top_k: int = 32, top_mlps: int = 0, heads_from: str | None = None, **fields: Any) -> FinetuneConfig:
    """A :class:`FinetuneConfig` whose heads and MLPs, when not listed in ``fields``, come from ``heads_from``
    (``top_k`` heads, ``top_mlps`` MLPs); what to tune left unsaid is one line saying how to say it."""
    check_component_counts(top_k, top_mlps)
    if not fields.get("full"):
        if heads_from and not fields.get("heads"):
            fields["heads"] = tuple(components_from(heads_from, top_k)[0])
        if top_mlps and not fields.get("mlps"):
            if not heads_from:
                raise ValueError("--top-mlps needs --heads-from")
            fields["mlps"] = tuple(components_from(heads_from, 0, top_mlps)[1])
        if not (fields.get("heads") or fields.get("mlps")):
            raise ValueError("say what to tune: --heads-from DIR [--top-k K], --heads L.H,..., --mlps, or --full")
    return FinetuneConfig(**fields)


def check_data(config: FinetuneConfig) -> None:
    """The benchmark files of ``config.sources`` exist (before the model loads: a missing one is one line)."""
    data = [DATA_FILES[s] for s in config.sources if s in DATA_FILES]
    if data:
        check_data_files(data, config.data_dir)


def device_for(config: FinetuneConfig, device: str | None = None, n_devices: int = 1) -> tuple[str, bool]:
    """The device this process trains on, and whether full SFT is sharded; bad combinations are one line."""
    sharded = strategy_for(config).name == "sharded"  # also checks that the global batch splits over the ranks
    if sharded and n_devices > 1:
        raise ValueError("--n-devices is for Precise SFT; full SFT across GPUs is sharded with FSDP (torchrun)")
    if D.is_distributed() or sharded:
        device = D.use_devices(n_devices)
    else:
        device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    check_device(config.dtype, device)
    return device, sharded


def training_set(config: FinetuneConfig, tokenizer: Any) -> list[TokenizedExample]:
    """The training mixture of ``config`` (sources, sizes, seed), tokenized to ``config.max_length``."""
    examples = build_training_set(config.sources, config.data_dir, config.n_arithmetic, config.limit_per_source,
                                  config.seed)
    return tokenize_examples(tokenizer, examples, config.max_length)


def run(config: FinetuneConfig, out: str | Path, *, model: Model | None = None, progress: bool = True,
        device: str | None = None, n_devices: int = 1) -> FinetuneResult:
    """The ``circuits finetune`` job: train ``config`` into ``out`` (resuming a run of the same config there) and
    return its result; a run already finished there is returned as saved, before any model loads. ``model``: train
    this one in place instead of loading ``config.model``. Raises :class:`~circuits.sft.train.TrainingDiverged` on a
    NaN/inf loss (the last good checkpoint kept)."""
    check_data(config)
    if model is None:
        device, sharded = device_for(config, device, n_devices)
    if run_state(out, config) == "finished":  # nothing is touched
        if D.is_main():
            print(f"already finished with this config: {out} holds its result.json and delta.pt; nothing to do "
                  "(use another --out, or --overwrite to train again)")
        return FinetuneResult.load(out)
    if model is None:
        # Sharded full SFT keeps fp32 shards as masters: the model is loaded in fp32 on the CPU and FSDP moves each
        # rank's shards to its GPU; compute runs in --dtype.
        model = load_model(config.model, device="cpu" if sharded else device,
                           dtype="float32" if sharded else config.dtype, n_devices=1 if sharded else n_devices)
    return finetune(model, training_set(config, model.tokenizer), config, out, progress=progress)
