"""The runs the multi-process tests make twice: on 2 ranks (``dist_worker.py`` under torchrun) and in one process
(``tests/unit/test_distributed.py``), from the same tiny model, data and configs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from circuits import sft as ft
from circuits.data.arithmetic import Example
from circuits.data.pairs import build_pairs
from circuits.patching import sweep as _sweep
from circuits.sft import train
from circuits.sft.data import tokenize_examples
from circuits.types import all_heads
from circuits.validate import knockout_curve

HEADS = ((1, 0), (1, 3), (2, 1))


def examples(model, n: int = 9):
    """9 examples in batches of 4: each epoch ends with a one-example step, where one of 2 ranks has no sample."""
    exs = [Example(f"{a} + {b} = ", f"{a + b}\n") for a, b in zip(range(1, n + 1), range(3, n + 3))]
    return tokenize_examples(model.tokenizer, exs, max_length=32)


def sft_config(name: str, **kw: Any) -> ft.FinetuneConfig:
    """Steps of 4, 4 and 1 examples (two epochs for Precise SFT), a checkpoint every 2 steps."""
    base = dict(lr=1e-3, batch_size=4, micro_batch_size=2, epochs=2, warmup_ratio=0.25, checkpoint_every=2)
    # Full SFT: one epoch (each step updates the 49k-row embedding and unembedding: the slow part here).
    base |= dict(heads=HEADS, mlps=(0,)) if name == "precise" else dict(full=True, epochs=1)
    return ft.FinetuneConfig(**(base | kw))


def finetune(model, tokenized, config, out: Path):
    return ft.finetune(model, tokenized, config, out, progress=False)


def finetune_interrupted(model, tokenized, config, out: Path, at_step: int):
    """A run stopped (on every rank alike) after ``at_step - 1`` steps, before step ``at_step`` updates."""
    real = train.lr_at

    def stop(step, total, cfg):
        if step + 1 == at_step:
            raise KeyboardInterrupt
        return real(step, total, cfg)

    train.lr_at = stop
    try:
        return finetune(model, tokenized, config, out)
    finally:
        train.lr_at = real


def pairs(model):
    return build_pairs(model, "addition", n_pairs=6, seed=0, few_shot="on", filter_correct=False).pairs


def sweep(model, pairs, mode: str):
    return _sweep(model, pairs, mode, progress=False)  # type: ignore[arg-type]


def identify_argv(model_dir: str, out: Path) -> list[str]:
    return ["identify", "--model", str(model_dir), "--pairs", "6", "--few-shot", "on", "--no-filter-correct",
            "--key-rule", "top2", "--out", str(out)]


def knockout(model, pairs):
    ranking = all_heads(model.cfg.n_layers, model.cfg.n_heads)[::-1]
    return knockout_curve(model, pairs, ranking, ks=(0, 1, 2, 4), seeds=(0, 1))
