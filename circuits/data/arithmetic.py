"""Arithmetic prompts in the few-shot form the small models need, shared by fine-tuning (two-digit training
equations) and evaluation (held-out forms never trained on: single digits, three-digit operands, word forms,
decimals)."""

from __future__ import annotations

import random
from dataclasses import dataclass

# The few-shot prefix SmolLM2 needs to answer single-digit sums (~97% with it).
EQUATION_PREFIX = "1 + 2 = 3\n4 + 4 = 8\n5 + 1 = 6\n"
WORD_PREFIX = "1 plus 2 equals 3\n4 plus 4 equals 8\n5 plus 1 equals 6\n"
DECIMAL_PREFIX = "1.5 plus 2.1 equals 3.6\n4.2 plus 4.4 equals 8.6\n5.3 plus 1.2 equals 6.5\n"
ARITHMETIC_FORMS: tuple[str, ...] = ("single", "multidigit", "word", "decimal")


@dataclass(frozen=True)
class Example:
    """A training example: the loss is taken on ``target`` only."""

    prompt: str
    target: str
    source: str = ""


@dataclass(frozen=True)
class ArithmeticItem:
    prompt: str
    answer: float
    form: str


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


