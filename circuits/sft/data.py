"""Training data of Precise/full SFT (Section 5.3): the mixture, tokenized, and batched.

An example is a ``(prompt, target)`` pair of strings; the loss is taken on the target tokens only. Word
problems use the same fixed prompt as evaluation (:func:`circuits.data.benchmarks.word_problem_prompt`);
arithmetic training items are two-digit ``+``/``-`` equations (:mod:`circuits.data.arithmetic`), whose
evaluation forms are never trained on.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor

from circuits.data import benchmarks as bd
from circuits.sft.config import TRAIN_SOURCES
from circuits.data.arithmetic import Example, arithmetic_train_items
from circuits.data.benchmarks import word_problem_prompt

TrainSource = Literal["gsm8k", "adapters", "arithmetic"]


def build_training_set(
    sources: tuple[str, ...] = TRAIN_SOURCES,
    data_dir: str | None = None,
    n_arithmetic: int = 2000,
    limit_per_source: int | None = None,
    seed: int = 0,
) -> list[Example]:
    """The SFT mixture: GSM8K train rationales, LLM-Adapters rationales minus all test questions, arithmetic."""
    unknown = set(sources) - set(TRAIN_SOURCES)
    if unknown:
        raise ValueError(f"Unknown training sources {sorted(unknown)}; accepted: {TRAIN_SOURCES}")
    rng = random.Random(seed)
    out: list[Example] = []
    for source in sources:
        if source == "arithmetic":
            part = arithmetic_train_items(n_arithmetic if limit_per_source is None else min(n_arithmetic, limit_per_source), seed)
        else:
            items = bd.load_gsm8k("train", data_dir) if source == "gsm8k" else bd.adapters_train_items(data_dir)
            rng.shuffle(items)
            if limit_per_source is not None:
                items = items[:limit_per_source]
            part = [Example(word_problem_prompt(it.question), f" {it.rationale}\n\n", source) for it in items]
        out += part
    rng.shuffle(out)
    return out


@dataclass(frozen=True)
class TokenizedExample:
    ids: tuple[int, ...]
    n_prompt: int  # loss on positions predicting ids[n_prompt:]


def tokenize_examples(tokenizer, examples: list[Example], max_length: int) -> list[TokenizedExample]:
    """Prompt and target tokenized separately (as lm-eval does), truncated from the left of the prompt."""
    out = []
    for ex in examples:
        p = tokenizer(ex.prompt, add_special_tokens=False).input_ids
        t = tokenizer(ex.target, add_special_tokens=False).input_ids[:max_length - 1]
        p = p[-(max_length - len(t)):]
        out.append(TokenizedExample(tuple(p + t), len(p)))
    return out


def collate(batch: list[TokenizedExample], pad_id: int) -> tuple[Tensor, Tensor]:
    """Right-padded ``tokens [batch pos]`` and ``loss_mask [batch pos-1]`` (1 where position predicts a target).

    Right padding needs no attention mask: causal attention never lets a real position see a pad.
    """
    length = max(len(ex.ids) for ex in batch)
    tokens = torch.full((len(batch), length), pad_id, dtype=torch.long)
    mask = torch.zeros((len(batch), length - 1))
    for i, ex in enumerate(batch):
        tokens[i, : len(ex.ids)] = torch.tensor(ex.ids)
        mask[i, max(ex.n_prompt - 1, 0) : len(ex.ids) - 1] = 1.0
    return tokens, mask
