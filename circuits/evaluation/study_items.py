"""The Precise SFT study's items and per-item scores, and its intervals over seeds and items.

Items (:func:`study_items`): the test split is held-out arithmetic by form (:func:`circuits.data.arithmetic.
arithmetic_eval_items`, seed 1234 as ``circuits evaluate``), two-digit addition (SmolLM2's weakness) never in any
run's training set, and optionally MMLU / CommonsenseQA questions (the records ``circuits evaluate`` builds). The
validation split, which alone picks each arm's lr, draws the same forms from other seeds and is checked disjoint
from the test items and every training set (:func:`check_disjoint`).

Scores (:func:`score_items`): one forward pass per item through
:meth:`circuits.evaluation.lm_eval.HookedTransformerLM.score_tokens`, the same code for every arm (a LoRA arm's
merged model is loaded as any model is): an arithmetic item is correct when greedy decoding reproduces the answer's
tokens and the newline after them; a multiple-choice item when its answer letter has the highest log-probability. The
log-probability of the right answer is kept too (the validation split ranks lrs by its mean).

Intervals (:func:`interval`, :func:`difference`): percentile bootstrap that resamples runs (seeds) and items with
replacement, items shared between the arms compared (a paired difference on the same items), as
:mod:`circuits.patching.core.uncertainty` resamples pairs.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from circuits.data.arithmetic import ARITHMETIC_FORMS, EQUATION_PREFIX, arithmetic_eval_items
from circuits.patching.core.uncertainty import bootstrap_p, percentile_interval, resample_pairs

TEST_SEED = 1234  # circuits evaluate's held-out arithmetic
VAL_SEEDS = (4321, 98765)  # the validation split's draws of the same forms, and of two-digit addition
TWO_DIGIT_SEED = 2718


@dataclass(frozen=True)
class Item:
    """One evaluation item: ``choices`` are the continuations scored after ``context``; ``answer`` indexes the right
    one. One choice: correct when greedy decoding reproduces it; several: when it has the highest log-probability."""

    task: str
    context: str
    choices: tuple[str, ...]
    answer: int = 0


def _number(x: float) -> str:
    return f"{x:.1f}" if x != int(x) else str(int(x))  # as the held-out items print their answers


def _arithmetic(items: Iterable[Any]) -> list[Item]:
    return [Item(f"arithmetic:{it.form}", it.prompt, (f"{_number(it.answer)}\n",)) for it in items]


def two_digit_items(n: int, seed: int, exclude: set[str]) -> list[Item]:
    """``n`` distinct two-digit additions ``A + B = `` (10..99) after the equation prefix, none in ``exclude``, in
    an order shuffled by ``seed``."""
    prompts = [(f"{EQUATION_PREFIX}{a} + {b} = ", a + b) for a in range(10, 100) for b in range(10, 100)]
    random.Random(seed).shuffle(prompts)
    out = [Item("two_digit", p, (f"{s}\n",)) for p, s in prompts if p not in exclude][:n]
    if len(out) < n:
        raise ValueError(f"only {len(out)} two-digit additions are left outside the training sets; ask for fewer")
    return out


def _choice_items(task: str, n: int, shots: int, data_dir: str | None) -> list[Item]:
    from circuits.evaluation.config import EvalConfig
    from circuits.evaluation.tasks import task_records

    config = EvalConfig(tasks=(task,), mmlu_shots=shots, csqa_shots=shots, data_dir=data_dir)
    return [Item(task, r["prompt"], tuple(f" {label}" for label in r["labels"]), int(r["answer"]))
            for r in task_records(task, config)[:n]]


def study_items(per_form: int, two_digit: int, val_per_form: int, train_prompts: set[str], mmlu: int = 0,
                commonsenseqa: int = 0, shots: int = 5, data_dir: str | None = None) -> tuple[list[Item], list[Item]]:
    """The test and validation items (see the module docstring); ``train_prompts``: every prompt any run trains on."""
    test = _arithmetic(arithmetic_eval_items(per_form, TEST_SEED))
    if two_digit:
        test += two_digit_items(two_digit, TWO_DIGIT_SEED, train_prompts)
    if mmlu:
        test += _choice_items("mmlu", mmlu, shots, data_dir)
    if commonsenseqa:
        test += _choice_items("commonsenseqa", commonsenseqa, shots, data_dir)
    taken = {it.context for it in test} | train_prompts
    val = [it for it in _arithmetic(arithmetic_eval_items(3 * val_per_form, VAL_SEEDS[0])) if it.context not in taken]
    by_form: dict[str, list[Item]] = {}
    for it in val:
        if it.context not in {v.context for v in by_form.get(it.task, [])}:
            by_form.setdefault(it.task, []).append(it)
    val = [it for form in ARITHMETIC_FORMS for it in by_form.get(f"arithmetic:{form}", [])[:val_per_form]]
    val += two_digit_items(val_per_form, VAL_SEEDS[1], taken)
    check_disjoint(test, val, train_prompts)
    return test, val


def check_disjoint(test: Sequence[Item], val: Sequence[Item], train_prompts: set[str]) -> None:
    """No validation item is a test item, and neither is a training prompt; else a ValueError naming one."""
    test_ctx = {it.context for it in test}
    for it in val:
        if it.context in test_ctx or it.context in train_prompts:
            raise ValueError(f"validation item {it.context[-40:]!r} is also a test item or trained on")
    for it in test:
        if it.task.startswith(("arithmetic", "two_digit")) and it.context in train_prompts:
            raise ValueError(f"test item {it.context[-40:]!r} is trained on")


def score_items(model: Any, items: Sequence[Item], batch_size: int = 16) -> dict[str, list[float]]:
    """Per item, in order: ``correct`` (0 or 1) and ``logp`` (log-probability of the right answer)."""
    from circuits.evaluation.lm_eval import HookedTransformerLM

    lm = HookedTransformerLM(model, batch_size=batch_size)
    encode = lm.tok_encode
    pairs, owner = [], []
    for i, it in enumerate(items):
        ctx = encode(it.context)
        for choice in it.choices:
            pairs.append((ctx, encode(choice)))
            owner.append(i)
    scored = lm.score_tokens(pairs)
    per: list[list[tuple[float, bool]]] = [[] for _ in items]
    for i, s in zip(owner, scored):
        per[i].append(s)
    correct, logp = [], []
    for it, s in zip(items, per):
        if len(it.choices) == 1:
            correct.append(float(s[0][1]))
        else:
            best = max(range(len(s)), key=lambda j: s[j][0])
            correct.append(float(best == it.answer))
        logp.append(float(s[it.answer][0]))
    return {"correct": correct, "logp": logp}


def tasks_of(items: Sequence[Item]) -> dict[str, list[int]]:
    """Task -> indices of its items; ``arithmetic`` pools the held-out forms."""
    out: dict[str, list[int]] = {}
    for i, it in enumerate(items):
        out.setdefault(it.task, []).append(i)
        if it.task.startswith("arithmetic:"):
            out.setdefault("arithmetic", []).append(i)
    return dict(sorted(out.items()))


def interval(runs: torch.Tensor, n_boot: int, seed: int = 0, level: float = 0.95) -> tuple[float, float, float]:
    """Mean of ``runs [run, item]`` and its percentile interval over resamples of runs and items."""
    runs = runs.double()
    r = resample_pairs(runs.shape[0], n_boot, seed)
    i = resample_pairs(runs.shape[1], n_boot, seed + 1)
    draws = runs[r[:, :, None], i[:, None, :]].mean(dim=(1, 2))
    lo, hi = percentile_interval(draws, level)
    return float(runs.mean()), float(lo), float(hi)


def difference(a: torch.Tensor, b: torch.Tensor, n_boot: int, seed: int = 0,
               level: float = 0.95) -> tuple[float, float, float, float]:
    """Mean of ``a`` minus mean of ``b`` (``[run, item]`` each, the same items), its percentile interval over
    resamples of each arm's runs and of the items (the same item resample for both: paired on items), and the
    bootstrap p-value of "no difference"."""
    if a.shape[1] != b.shape[1]:
        raise ValueError(f"a paired difference needs the same items, got {a.shape[1]} and {b.shape[1]}")
    a, b = a.double(), b.double()
    i = resample_pairs(a.shape[1], n_boot, seed + 1)
    ra, rb = resample_pairs(a.shape[0], n_boot, seed), resample_pairs(b.shape[0], n_boot, seed + 2)
    draws = a[ra[:, :, None], i[:, None, :]].mean(dim=(1, 2)) - b[rb[:, :, None], i[:, None, :]].mean(dim=(1, 2))
    lo, hi = percentile_interval(draws, level)
    return float(a.mean() - b.mean()), float(lo), float(hi), bootstrap_p(draws)
