"""Training examples for Precise/full SFT and the arithmetic prompts shared with evaluation.

An example is a ``(prompt, target)`` pair of strings; the loss is taken on the target tokens only.
Word problems use the same fixed prompt as evaluation (:data:`WORD_PROBLEM_PROMPT`). Arithmetic
training items are two-digit ``+``/``-`` equations; evaluation of arithmetic
(:func:`arithmetic_eval_items`) uses forms never trained on: single digits, three-digit operands,
word forms (``plus ... equals``) and decimals.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor

from circuits import benchmark_data as bd

WORD_PROBLEM_PROMPT = "Question: {question}\nAnswer:"
# The few-shot prefix SmolLM2 needs to answer single-digit sums (~97% with it).
EQUATION_PREFIX = "1 + 2 = 3\n4 + 4 = 8\n5 + 1 = 6\n"
WORD_PREFIX = "1 plus 2 equals 3\n4 plus 4 equals 8\n5 plus 1 equals 6\n"
DECIMAL_PREFIX = "1.5 plus 2.1 equals 3.6\n4.2 plus 4.4 equals 8.6\n5.3 plus 1.2 equals 6.5\n"
TrainSource = Literal["gsm8k", "adapters", "arithmetic"]
TRAIN_SOURCES: tuple[str, ...] = ("gsm8k", "adapters", "arithmetic")
ARITHMETIC_FORMS: tuple[str, ...] = ("single", "multidigit", "word", "decimal")


@dataclass(frozen=True)
class Example:
    prompt: str
    target: str
    source: str = ""


@dataclass(frozen=True)
class ArithmeticItem:
    prompt: str
    answer: float
    form: str


def word_problem_prompt(question: str) -> str:
    return WORD_PROBLEM_PROMPT.format(question=question.strip())


def _fmt(x: float) -> str:
    return f"{x:.1f}" if x != int(x) else str(int(x))


def arithmetic_train_items(n: int, seed: int = 0) -> list[Example]:
    """``n`` two-digit ``A + B`` / ``A - B`` (A > B) equations after the equation prefix; targets end in a newline."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        a, b = rng.randint(10, 99), rng.randint(10, 99)
        if rng.random() < 0.5:
            out.append(Example(f"{EQUATION_PREFIX}{a} + {b} = ", f"{a + b}\n", "arithmetic"))
        else:
            a, b = max(a, b), min(a, b)
            out.append(Example(f"{EQUATION_PREFIX}{a} - {b} = ", f"{a - b}\n", "arithmetic"))
    return out


def arithmetic_eval_items(n_per_form: int = 50, seed: int = 1234) -> list[ArithmeticItem]:
    """Held-out arithmetic prompts (forms and operand ranges not in :func:`arithmetic_train_items`).

    single: ``A + B = `` with A, B in 1..9; multidigit: ``A + B = `` with A, B in 100..999;
    word: ``A plus B equals `` with A, B in 1..50; decimal: ``A plus B equals `` with one-decimal operands.
    """
    rng = random.Random(seed)
    items = []
    for form in ARITHMETIC_FORMS:
        for _ in range(n_per_form):
            if form == "single":
                a, b = rng.randint(1, 9), rng.randint(1, 9)
                items.append(ArithmeticItem(f"{EQUATION_PREFIX}{a} + {b} = ", a + b, form))
            elif form == "multidigit":
                a, b = rng.randint(100, 999), rng.randint(100, 999)
                items.append(ArithmeticItem(f"{EQUATION_PREFIX}{a} + {b} = ", a + b, form))
            elif form == "word":
                a, b = rng.randint(1, 50), rng.randint(1, 50)
                items.append(ArithmeticItem(f"{WORD_PREFIX}{a} plus {b} equals ", a + b, form))
            else:
                a, b = rng.randint(11, 99) / 10, rng.randint(11, 99) / 10
                items.append(ArithmeticItem(f"{DECIMAL_PREFIX}{_fmt(a)} plus {_fmt(b)} equals ", round(a + b, 1), form))
    return items


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
