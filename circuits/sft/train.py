"""Precise SFT and full SFT: one training loop, with or without per-head gradient masks (Section 4.3, 5.3).

Precise SFT tunes only the Q/K/V/O slices of the selected heads (and, optionally, whole MLPs); the
tuning plan and gradient masks come from :mod:`circuits.sft.plan`. Full SFT is the same loop with
:func:`~circuits.sft.plan.full_plan`.

How frozen slices stay bit-identical: tensors with no tuned slice get ``requires_grad=False`` (so
backward stops at the lowest tuned layer and they get no gradient or optimizer state); for tensors
with some tuned rows, the optimizer owns an fp32 leaf copy of just those rows
(:class:`~circuits.sft.optim.SliceOptimizer`): the masked, rescaled gradient rows are added into it, AdamW
steps it (state and weight decay only for the tuned rows), and the rows are cast back into the model. Frozen
rows are never written.

Precision (``dtype``): the forward and backward passes run in the model's dtype; every tuned tensor or slice
has an fp32 master with fp32 AdamW state, and fp16 scales the loss (:mod:`circuits.sft.optim`), so a bf16 run
trains like an fp32 one instead of rounding its updates away.

Processes (:mod:`circuits.sft.parallel`): in one process the model trains in place; under ``torchrun`` Precise
SFT is data-parallel (tuned slices' gradients all-reduced) and full SFT is sharded with FSDP2; in both, the
global batch of a step is split over the ranks, so the losses and tuned values equal a one-process run's.

Outputs in ``out_dir`` (written by rank 0): ``config.json``, ``checkpoint.pt`` (resumable; replaced
atomically, so a NaN stop leaves the last good one; a ``checkpoint/`` DCP folder for sharded full SFT),
``delta.pt`` (the tuned values in fp32; :func:`apply_delta` puts them onto the base model),
``result.json`` (losses, samples/s, tuned parameter count).
"""

from __future__ import annotations

import math
import os
import random
import time
from pathlib import Path

import torch
from jaxtyping import Float, Int
from torch import Tensor
from circuits.models.backend import Model

from circuits import distributed as D
from circuits.config import same_config
from circuits.io import read_json, write_json
from circuits.models.forward import pad_token_id
from circuits.sft import plan as hm
from circuits.sft.config import FinetuneConfig
from circuits.sft.data import TokenizedExample, collate
from circuits.results import MARKER
from circuits.sft.delta import apply_delta
from circuits.sft.optim import LossScaler, SliceOptimizer, check_device
from circuits.sft.parallel import checkpointed_blocks, strategy_for
from circuits.sft.result import FinetuneResult

__all__ = ["FinetuneConfig", "LossScaler", "SliceOptimizer", "TrainingDiverged", "batch_schedule", "finetune",
           "lr_at", "plan_for", "sft_loss"]


class TrainingDiverged(RuntimeError):
    """The loss became NaN or inf; the last good checkpoint is kept."""


def plan_for(model: Model, config: FinetuneConfig) -> hm.TuningPlan:
    if config.full:
        return hm.full_plan(model)
    return hm.plan_tuning(model, config.heads, config.mlps, config.kv_policy, config.rescale)  # type: ignore[arg-type]


def lr_at(step: int, total_steps: int, config: FinetuneConfig) -> float:
    """Linear warm-up over ``ceil(warmup_ratio * total)`` steps, then linear decay to 0 (HF Trainer's default)."""
    warmup = math.ceil(config.warmup_ratio * total_steps)
    if step < warmup:
        return config.lr * (step + 1) / warmup
    return config.lr * max(0.0, (total_steps - step) / max(1, total_steps - warmup))


# --- the loop --------------------------------------------------------------------------------------


def sft_loss(model: Model, tokens: Int[Tensor, "batch pos"], loss_mask: Float[Tensor, "batch pos_minus_1"]) -> Float[Tensor, ""]:
    """Summed next-token cross-entropy over the target positions of ``loss_mask``.

    Only target positions are normed and unembedded: full ``[batch pos d_vocab]`` logits of a 49k
    vocabulary cost more than a layer per token and are mostly thrown away by the mask.
    """
    resid = model.backend.training_residual(tokens)[:, :-1]
    select = loss_mask.bool()
    # (a Bridge's norm returns fp32 under FSDP's bf16 compute; cfg.dtype is the compute dtype, a no-op elsewhere)
    normed = model.ln_final(resid[select][None]).to(model.cfg.dtype)
    logits = model.unembed(normed)[0]
    return torch.nn.functional.cross_entropy(logits.float(), tokens[:, 1:][select], reduction="sum")


def batch_schedule(n_examples: int, config: FinetuneConfig) -> list[list[list[int]]]:
    """Optimizer steps -> micro-batches -> example indices; a fresh seeded shuffle per epoch.

    Deterministic in (n_examples, config), which is what lets a resumed run skip the steps already done.
    """
    steps = []
    for epoch in range(config.epochs):
        order = list(range(n_examples))
        random.Random(config.seed * 1000 + epoch).shuffle(order)
        for start in range(0, n_examples, config.batch_size):
            batch = order[start : start + config.batch_size]
            steps.append([batch[i : i + config.micro_batch_size] for i in range(0, len(batch), config.micro_batch_size)])
    return steps[: config.max_steps] if config.max_steps else steps


RUN_FILES = ("config.json", "checkpoint.pt", "checkpoint", "delta.pt", "result.json", "circuits.json")
RUN_OPTIONS = ("activation_checkpointing",)  # changes memory only: a run may resume with another setting


def run_state(out: str | os.PathLike, config: FinetuneConfig) -> str:
    """What ``out`` holds for a run of ``config``: ``"new"`` (nothing yet), ``"resume"`` (the same run, unfinished)
    or ``"finished"`` (the same run, done). A run of another config is an error naming the fields that differ, and
    nothing is written."""
    out = Path(out)
    if not (out / "config.json").is_file():
        return "new"
    saved = {**read_json(out / "config.json"), **{k: getattr(config, k) for k in RUN_OPTIONS}}
    if not same_config(saved, config):
        now = config.to_json()
        diff = "; ".join(f"{k}={saved[k]!r} there, {now[k]!r} now" for k in now if k in saved and saved[k] != now[k])
        raise ValueError(f"{out} holds a fine-tuning run of another config ({diff or 'fields added since'}); use another "
                         "--out, or pass --overwrite to start over")
    return "finished" if (out / "result.json").is_file() and (out / MARKER).is_file() else "resume"


def clear_run(out: str | os.PathLike) -> None:
    """Remove the files a fine-tuning run writes in ``out`` (``--overwrite``); nothing else there is touched."""
    import shutil

    for name in RUN_FILES:
        path = Path(out) / name
        if path.is_dir():
            shutil.rmtree(path)
        elif path.exists():
            path.unlink()


def finetune(
    model: Model,
    examples: list[TokenizedExample],
    config: FinetuneConfig,
    out_dir: str | os.PathLike | None = None,
    progress: bool = True,
    resume: bool = True,
) -> FinetuneResult:
    """Train ``model`` in place on tokenized ``examples``; see the module docstring for the outputs.

    ``model`` must be in ``config.dtype`` (sharded full SFT: in float32, the masters; compute is ``config.dtype``).
    When ``torch.distributed`` is initialised, every rank calls this with the same model, examples and config, and
    each trains on its share of every step (:mod:`circuits.sft.parallel`); rank 0 writes. Sharded full SFT leaves
    ``model`` sharded in place (FSDP2): use ``delta.pt`` on a fresh base model afterwards.

    Resumes from ``out_dir``'s checkpoint when it exists and ``resume`` is set (the config must match: a run of
    another config is refused before anything is written). A run already finished there is not redone: its tuned
    values are put onto ``model`` and its saved result returned, its files left alone.
    Raises :class:`TrainingDiverged` on a NaN/inf loss, before any update with it.
    """
    if not examples:
        raise ValueError("No training examples")
    state = run_state(out_dir, config) if out_dir is not None and resume else "new"
    if state == "finished" and strategy_for(config).name != "sharded":
        if (Path(out_dir) / "delta.pt").is_file():
            apply_delta(model, Path(out_dir) / "delta.pt")
        return FinetuneResult.load(out_dir)
    strategy = strategy_for(config)
    check_device(config.dtype, next(model.parameters()).device if strategy.name != "sharded" else D.device())
    strategy.check_model(model)
    out = Path(out_dir) if out_dir is not None else None
    plan = plan_for(model, config)
    schedule = batch_schedule(len(examples), config)
    total_steps = len(schedule)
    pad_id = pad_token_id(model)
    was_training = model.training
    requires_grad = {n: p.requires_grad for n, p in model.named_parameters()}
    tuned_parameters = hm.count_tuned_parameters(model, plan)
    total_parameters = sum(p.numel() for p in model.parameters())
    scaler = strategy.scaler()
    start_step, losses = 0, []
    samples, train_time = 0, 0.0
    bar = None
    local = strategy.name != "sharded"
    try:
        optimizer = strategy.setup(model, plan)
        device = strategy.input_device(model)
        if out is not None:
            if resume:
                start_step, losses = strategy.load_checkpoint(out, model, optimizer, scaler)
            if D.is_main():  # after the checks: the folder says what it holds, and is marked as a fine-tuning run
                write_json(out / "config.json", config.to_json())
                write_json(out / MARKER, {"kind": FinetuneResult.kind, "version": FinetuneResult.version})
        last_checkpoint = start_step if start_step else None
        if progress and D.is_main():
            from tqdm.auto import tqdm

            bar = tqdm(total=total_steps, initial=start_step, desc="precise SFT" if not config.full else "full SFT",
                       unit="step")
        model.train()
        with checkpointed_blocks(model, config.activation_checkpointing and local):
            for step in range(start_step, total_steps):
                t0 = time.perf_counter()
                micro = schedule[step]
                # The loss is a mean over the step's target tokens of every rank, so summed gradients are the step's.
                n_target = sum(sum(len(examples[i].ids) - max(examples[i].n_prompt, 1) for i in mb) for mb in micro)
                step_loss = 0.0
                for mb in strategy.my_micro_batches(micro):
                    if mb:
                        tokens, mask = collate([examples[i] for i in mb], pad_id)
                    else:  # an FSDP rank with no sample left in this step still joins the collectives
                        tokens, mask = torch.full((1, 2), pad_id, dtype=torch.long), torch.zeros(1, 1)
                    loss = sft_loss(model, tokens.to(device), mask.to(device)) / max(n_target, 1)
                    (loss * scaler.scale if scaler.enabled else loss).backward()
                    step_loss += loss.item()
                step_loss = strategy.total(step_loss, device)
                if not math.isfinite(step_loss):
                    last = f"{strategy.checkpoint_path(out)} (after step {last_checkpoint})" \
                        if out and last_checkpoint else "none written yet"
                    raise TrainingDiverged(
                        f"Loss became {step_loss} at step {step + 1}; stopped before updating. Last good checkpoint: "
                        f"{last}. Try a lower lr{', or bfloat16 instead of float16' if config.dtype == 'float16' else ''}"
                        ", or check the data."
                    )
                strategy.reduce_gradients(optimizer)
                optimizer.set_lr(lr_at(step, total_steps, config))
                optimizer.step(scaler)
                optimizer.zero_grad()
                losses.append(step_loss)
                train_time += time.perf_counter() - t0
                samples += sum(len(mb) for mb in micro)
                if bar is not None:
                    bar.update(1)
                    bar.set_postfix(loss=f"{step_loss:.4f}", samples_per_s=f"{samples / train_time:.2f}")
                if out is not None and ((step + 1) % config.checkpoint_every == 0 or step + 1 == total_steps):
                    strategy.save_checkpoint(out, step + 1, losses, model, plan, optimizer, scaler)
                    last_checkpoint = step + 1
        result = FinetuneResult(
            config=config,
            steps=total_steps,
            samples=samples,
            samples_per_s=samples / train_time if train_time else 0.0,
            train_seconds=train_time,
            tuned_parameters=tuned_parameters,
            total_parameters=total_parameters,
            losses=losses,
            resumed_from=start_step,
            plan=plan.to_json(),
            skipped_steps=scaler.skipped,
            world_size=D.world_size(),
        )
        if out is not None:
            if config.save_delta:
                strategy.save_delta(out, model, plan, optimizer, {"model": config.model, "dtype": config.dtype})
            if D.is_main():
                result.save(out)
            D.barrier()
    finally:
        strategy.teardown(model)
        if bar is not None:
            bar.close()
        model.train(was_training)
        for n, p in model.named_parameters():
            p.requires_grad_(requires_grad[n])
            p.grad = None
    return result
