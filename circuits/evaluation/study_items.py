"""The Precise SFT study's items and per-item scores, and its intervals over seeds and items.

Items (:func:`study_items`): the test split is held-out arithmetic by form (:func:`circuits.data.arithmetic.
arithmetic_eval_items`, seed 1234 as ``circuits evaluate``), two-digit addition (SmolLM2's weakness) never in any
run's training set, and optionally MMLU / CommonsenseQA questions, word problems (GSM8K, AddSub, SingleEq, SVAMP)
and general text for perplexity (:func:`general_items`: the records ``circuits evaluate`` builds, by its own code). The
validation split, which alone picks each arm's lr, draws the same forms from other seeds and is checked disjoint
from the test items and every training set (:func:`check_disjoint`).

Scores (:func:`score_items`): one forward pass per item through
:meth:`circuits.evaluation.lm_eval.HookedTransformerLM.score_tokens`, the same code for every arm (a LoRA arm's
merged model is loaded as any model is): an arithmetic item is correct when greedy decoding reproduces the answer's
tokens and the newline after them; a multiple-choice item when its answer letter has the highest log-probability. The
log-probability of the right answer is kept too (the validation split ranks lrs by its mean). A word problem is
generated greedily and checked as ``circuits evaluate`` checks it (:meth:`~circuits.evaluation.lm_eval.
HookedTransformerLM.generate_until` to :data:`~circuits.evaluation.tasks.MATH_UNTIL`, then
:func:`~circuits.evaluation.tasks.process_numeric`); a perplexity document keeps its rolling log-likelihood
(:meth:`~circuits.evaluation.lm_eval.HookedTransformerLM.loglikelihood_rolling`, lm-eval's windows) as ``logp``.

Intervals (:func:`interval`, :func:`difference`): percentile bootstrap that resamples runs (seeds) and items with
replacement, items shared between the arms compared (a paired difference on the same items), as
:mod:`circuits.patching.core.uncertainty` resamples pairs. With ``weights`` (perplexity: each document's words) the
mean of every resample is weighted, so a document's negative log-likelihood per word weighted by its words gives
the log of lm-eval's word perplexity (total negative log-likelihood over total words) on each resample.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from circuits.data.arithmetic import ARITHMETIC_FORMS, EQUATION_PREFIX, arithmetic_eval_items
from circuits.data.benchmarks import MATH_TASKS as WORD_TASKS
from circuits.patching.core.uncertainty import bootstrap_p, percentile_interval, resample_pairs

TEST_SEED = 1234  # circuits evaluate's held-out arithmetic
VAL_SEEDS = (4321, 98765)  # the validation split's draws of the same forms, and of two-digit addition
TWO_DIGIT_SEED = 2718


KINDS = ("choice", "generate", "text")


@dataclass(frozen=True)
class Item:
    """One evaluation item. ``kind`` ``choice``: ``choices`` are the continuations scored after ``context``;
    ``answer`` indexes the right one; one choice: correct when greedy decoding reproduces it; several: when it has the
    highest log-probability. ``generate`` (a word problem): correct when the number of the greedy answer equals
    ``choices[0]`` (``logp`` 0: not scored). ``text`` (a perplexity document, ``context``): ``logp`` is its rolling
    log-likelihood (``correct`` 0: not scored)."""

    task: str
    context: str
    choices: tuple[str, ...]
    answer: int = 0
    kind: str = "choice"


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


def _records(task: str, n: int, data_dir: str | None, **settings: Any) -> list[dict]:
    """The first ``n`` of ``circuits evaluate``'s records of ``task`` (shuffled by its seed, as ``--limit n`` takes
    them)."""
    from circuits.evaluation.config import EvalConfig
    from circuits.evaluation.tasks import task_records

    records = task_records(task, EvalConfig(tasks=(task,), data_dir=data_dir, **settings))
    if len(records) < n:
        flag = {"perplexity": "--perplexity", "mmlu": "--mmlu", "commonsenseqa": "--commonsenseqa"}.get(task,
                                                                                                   "--word-problems")
        raise ValueError(f"{flag} {n}: {task} holds {len(records)} items; ask for at most that many")
    return records[:n]


def _choice_items(task: str, n: int, shots: int, data_dir: str | None) -> list[Item]:
    return [Item(task, r["prompt"], tuple(f" {label}" for label in r["labels"]), int(r["answer"]))
            for r in _records(task, n, data_dir, mmlu_shots=shots, csqa_shots=shots)]


def general_items(perplexity: int = 0, word_problems: int = 0, word_tasks: Sequence[str] = WORD_TASKS,
                  math_shots: int = 0, data_dir: str | None = None) -> list[Item]:
    """``word_problems`` questions of each of ``word_tasks`` (``circuits evaluate``'s prompts, ``math_shots`` solved
    GSM8K examples before each) and ``perplexity`` documents of its held-out general text (0: none of them)."""
    out: list[Item] = []
    if word_problems:
        for task in word_tasks:
            out += [Item(task, r["prompt"], (repr(float(r["answer"])),), 0, "generate")
                    for r in _records(task, word_problems, data_dir, math_shots=math_shots)]
    if perplexity:
        out += [Item("perplexity", r["text"], (), 0, "text") for r in _records("perplexity", perplexity, data_dir)]
    return out


def eval_tasks(mmlu: int, commonsenseqa: int, perplexity: int, word_problems: int,
               word_tasks: Sequence[str]) -> tuple[str, ...]:
    """The ``circuits evaluate`` tasks whose data these counts read (for its data check before any work)."""
    return ((("mmlu",) if mmlu else ()) + (("commonsenseqa",) if commonsenseqa else ())
            + (tuple(word_tasks) if word_problems else ()) + (("perplexity",) if perplexity else ()))


def words(items: Sequence[Item]) -> list[int]:
    """Per item: a perplexity document's words (lm-eval's count, the denominator of its word perplexity), else 0."""
    from lm_eval.api.task import ConfigurableTask

    return [ConfigurableTask.count_words(it.context) if it.kind == "text" else 0 for it in items]


def study_items(per_form: int, two_digit: int, val_per_form: int, train_prompts: set[str], mmlu: int = 0,
                commonsenseqa: int = 0, shots: int = 5, data_dir: str | None = None, *,
                general: Sequence[Item] = ()) -> tuple[list[Item], list[Item]]:
    """The test and validation items (see the module docstring); ``train_prompts``: every prompt any run trains on;
    ``general``: the word problems and perplexity documents (:func:`general_items`), after the others, which stay as
    they were."""
    test = _arithmetic(arithmetic_eval_items(per_form, TEST_SEED))
    if two_digit:
        test += two_digit_items(two_digit, TWO_DIGIT_SEED, train_prompts)
    if mmlu:
        test += _choice_items("mmlu", mmlu, shots, data_dir)
    if commonsenseqa:
        test += _choice_items("commonsenseqa", commonsenseqa, shots, data_dir)
    test += list(general)
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
        if (it.task.startswith(("arithmetic", "two_digit")) or it.kind == "generate") and it.context in train_prompts:
            raise ValueError(f"test item {it.context[-40:]!r} is trained on")


def score_items(model: Any, items: Sequence[Item], batch_size: int = 16,
                max_gen_toks: int = 256) -> dict[str, list[float]]:
    """Per item, in order: ``correct`` (0 or 1) and ``logp`` (log-probability of the right answer; of a perplexity
    document, its rolling log-likelihood); see :class:`Item` for what each kind scores. ``max_gen_toks`` caps a word
    problem's answer."""
    from types import SimpleNamespace

    from circuits.evaluation.lm_eval import HookedTransformerLM
    from circuits.evaluation.tasks import MATH_UNTIL, process_numeric

    lm = HookedTransformerLM(model, batch_size=batch_size, max_gen_toks=max_gen_toks)
    encode = lm.tok_encode
    correct, logp = [0.0] * len(items), [0.0] * len(items)
    pairs, owner = [], []
    for i, it in enumerate(items):
        if it.kind not in KINDS:
            raise ValueError(f"item {i}: unknown kind {it.kind!r}; accepted: {', '.join(KINDS)}")
        if it.kind != "choice":
            continue
        ctx = encode(it.context)
        for choice in it.choices:
            pairs.append((ctx, encode(choice)))
            owner.append(i)
    per: dict[int, list[tuple[float, bool]]] = {}
    for i, s in zip(owner, lm.score_tokens(pairs) if pairs else []):
        per.setdefault(i, []).append(s)
    for i, s in per.items():
        it = items[i]
        if len(it.choices) == 1:
            correct[i] = float(s[0][1])
        else:
            best = max(range(len(s)), key=lambda j: s[j][0])
            correct[i] = float(best == it.answer)
        logp[i] = float(s[it.answer][0])
    # word problems and perplexity: the requests lm-eval hands circuits evaluate's model, through the same methods
    gen = [i for i, it in enumerate(items) if it.kind == "generate"]
    if gen:
        asks = [SimpleNamespace(args=(items[i].context, {"until": list(MATH_UNTIL), "max_gen_toks": max_gen_toks}))
                for i in gen]
        for i, text in zip(gen, lm.generate_until(asks)):
            correct[i] = float(process_numeric({"answer": items[i].choices[0]}, [text])["acc"])
    docs = [i for i, it in enumerate(items) if it.kind == "text"]
    if docs:
        for i, total in zip(docs, lm.loglikelihood_rolling([SimpleNamespace(args=(items[i].context,)) for i in docs])):
            logp[i] = float(total)
    return {"correct": correct, "logp": logp}


def tasks_of(items: Sequence[Item]) -> dict[str, list[int]]:
    """Task -> indices of its items; ``arithmetic`` pools the held-out forms."""
    out: dict[str, list[int]] = {}
    for i, it in enumerate(items):
        out.setdefault(it.task, []).append(i)
        if it.task.startswith("arithmetic:"):
            out.setdefault("arithmetic", []).append(i)
    return dict(sorted(out.items()))


def _mean(x: torch.Tensor, weights: torch.Tensor | None) -> float:
    return float(x.mean()) if weights is None else float((x * weights).sum() / (weights.sum() * x.shape[0]))


def _resampled(x: torch.Tensor, r: torch.Tensor, i: torch.Tensor, weights: torch.Tensor | None) -> torch.Tensor:
    """The mean of ``x [run, item]`` on each resample (runs ``r``, items ``i``), weighted by the resampled items'
    ``weights`` where given."""
    drawn = x[r[:, :, None], i[:, None, :]]
    if weights is None:
        return drawn.mean(dim=(1, 2))
    w = weights.double()[i][:, None, :]
    return (drawn * w).sum(dim=(1, 2)) / (w.sum(dim=(1, 2)) * drawn.shape[1])


def _weights(weights: Any, n: int) -> torch.Tensor | None:
    if weights is None:
        return None
    w = torch.as_tensor(weights, dtype=torch.float64)
    if w.shape != (n,) or not bool((w > 0).all()):
        raise ValueError(f"weights must be {n} positive numbers, one per item; got shape {tuple(w.shape)}")
    return w


def interval(runs: torch.Tensor, n_boot: int, seed: int = 0, level: float = 0.95,
             weights: Any = None) -> tuple[float, float, float]:
    """Mean of ``runs [run, item]`` and its percentile interval over resamples of runs and items (with ``weights``
    per item: the weighted mean)."""
    runs = runs.double()
    w = _weights(weights, runs.shape[1])
    r = resample_pairs(runs.shape[0], n_boot, seed)
    i = resample_pairs(runs.shape[1], n_boot, seed + 1)
    lo, hi = percentile_interval(_resampled(runs, r, i, w), level)
    return _mean(runs, w), float(lo), float(hi)


def difference(a: torch.Tensor, b: torch.Tensor, n_boot: int, seed: int = 0, level: float = 0.95,
               weights: Any = None) -> tuple[float, float, float, float]:
    """Mean of ``a`` minus mean of ``b`` (``[run, item]`` each, the same items; with ``weights`` per item, weighted
    means), its percentile interval over resamples of each arm's runs and of the items (the same item resample for
    both: paired on items), and the bootstrap p-value of "no difference"."""
    if a.shape[1] != b.shape[1]:
        raise ValueError(f"a paired difference needs the same items, got {a.shape[1]} and {b.shape[1]}")
    a, b = a.double(), b.double()
    w = _weights(weights, a.shape[1])
    i = resample_pairs(a.shape[1], n_boot, seed + 1)
    ra, rb = resample_pairs(a.shape[0], n_boot, seed), resample_pairs(b.shape[0], n_boot, seed + 2)
    draws = _resampled(a, ra, i, w) - _resampled(b, rb, i, w)
    lo, hi = percentile_interval(draws, level)
    d = float(a.mean() - b.mean()) if w is None else _mean(a, w) - _mean(b, w)
    return d, float(lo), float(hi), bootstrap_p(draws)
