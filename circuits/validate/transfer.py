"""Do the key heads found on the templates matter elsewhere? (Figure 4, Appendices D-E, MMLU.)

Each transfer set is a list of prompts (as :class:`PromptPair` whose counterfactual is the prompt
itself) whose target is the answer's first token: SVAMP questions ending "The answer is", multi-digit
sums (``281 + 135 = ``), decimals (``4.2 plus 2.5 equals to ``) and time spans (``The war lasted 5
years from 1723 to 172`` -> ``8``). Small models get a shared few-shot prefix of solved examples in
the same form (it runs once per knockout thanks to :mod:`circuits.ablation`'s prefix cache).

These prompts do not align with the templates' positions, so the knockout uses pooled means (one
mean per head over every position of the template counterfactual prompts; see
:func:`circuits.ablation.compute_means`). MMLU is scored by the log-likelihood of the answer letter
among A-D after ``Answer:``.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch
from circuits.models.backend import Model

from circuits.data.benchmarks import ChoiceItem, MathItem
from circuits.data.pairs import PromptError, PromptPair, encode, first_answer_token, make_pair, prefix_length_of
from circuits.data.word_problems import ANSWER_CUE
from circuits.io import read_json, write_json
from circuits.config import count, option
from circuits.identify.config import KeyHeadSource
from circuits.validate.config import TransferConfig
from circuits.patching.core.uncertainty import wilson_interval
from circuits.results import Result
from circuits.types import Head
from circuits.validate.knockout import AblationValues, knockout, knockout_logits


def prompt_item(tokenizer: Any, prompt: str, answer: str, task: str, prefix: str = "") -> PromptPair:
    """A prompt whose target is the first token of ``answer`` (counterfactual = the prompt itself)."""
    text = prefix + prompt
    tok = first_answer_token(tokenizer, text, answer)
    pair = make_pair(tokenizer, text, text, answer[:1], template_id=task, operation=task, allow_identical=True)
    return replace(pair, answer=answer, answer_token_id=tok,
                   prefix_length=prefix_length_of(tokenizer, prefix, pair.reference_token_ids))


def _multi_digit(rng: random.Random) -> tuple[str, str]:
    a, b = rng.randint(100, 899), rng.randint(100, 899)
    return f"{a} + {b} = ", str(a + b)


def _decimal(rng: random.Random) -> tuple[str, str]:
    a, b = rng.randint(10, 49), rng.randint(10, 49)
    return f"{a / 10} plus {b / 10} equals to ", f"{(a + b) / 10:.1f}"


_EVENTS = ("war", "festival", "project", "drought", "voyage", "strike")


def _time_span(rng: random.Random) -> tuple[str, str]:
    a = rng.randint(1, 5)
    y = rng.randint(10, 19) * 100 + rng.randint(0, 9) * 10 + rng.randint(0, 9 - a)
    prompt = f"The {rng.choice(_EVENTS)} lasted {a} years from {y} to {str(y + a)[:-1]}"
    return prompt, str(y + a)[-1]


_SYNTHETIC = {"multi_digit": _multi_digit, "decimal": _decimal, "time_span": _time_span}


def synthetic_set(tokenizer: Any, task: str, n: int, seed: int = 0, shots: int = 3) -> list[PromptPair]:
    """``n`` prompts of a Figure 4 format, with a prefix of ``shots`` solved examples (one per line)."""
    rng = random.Random(seed)
    make = _SYNTHETIC[task]
    prefix = "".join("{}{}\n".format(*make(rng)) for _ in range(shots))
    items = []
    while len(items) < n:
        prompt, answer = make(rng)
        try:
            items.append(prompt_item(tokenizer, prompt, answer, task, prefix))
        except PromptError:
            continue
    return items


def word_problem_set(
    tokenizer: Any, problems: Sequence[MathItem], n: int, shots: int = 2, seed: int = 0, task: str = "svamp", max_tokens: int = 400
) -> list[PromptPair]:
    """Word problems ending ``The answer is``; the first ``shots`` shuffled problems form the prefix
    (and are not evaluated)."""
    rng = random.Random(seed)
    probs = list(problems)
    rng.shuffle(probs)
    prefix = "".join(f"{p.question}{ANSWER_CUE}{p.answer_text}.\n" for p in probs[:shots])
    items = []
    for p in probs[shots:]:
        if len(items) >= n:
            break
        try:
            item = prompt_item(tokenizer, p.question + ANSWER_CUE, p.answer_text, task, prefix)
        except PromptError:
            continue
        if len(item.reference_token_ids) <= max_tokens:
            items.append(item)
    return items


def transfer_knockout(
    model: Model, sets: dict[str, list[PromptPair]], means: AblationValues, heads: Sequence[Head]
) -> dict[str, dict[str, float]]:
    """Figure 4: accuracy and answer probability on each set before and after knocking out ``heads``."""
    out = {}
    for name, items in sets.items():
        before = knockout(model, items, [], means=means)
        after = knockout(model, items, list(heads), means=means)
        out[name] = {
            "n": len(items),
            "accuracy_before": before.accuracy,
            "accuracy_after": after.accuracy,
            "prob_before": before.answer_prob,
            "prob_after": after.answer_prob,
            "relative_drop": (after.accuracy - before.accuracy) / before.accuracy if before.accuracy else None,
        }
    return out


ACCURACIES = ("accuracy_before", "accuracy_after", "accuracy_random_heads")
CI_LEVEL = 0.95  # the coverage of the intervals a transfer result saves, draws and prints


def accuracy_intervals(row: dict[str, Any], level: float = CI_LEVEL) -> dict[str, tuple[float, float]]:
    """Wilson score intervals over a set's ``n`` items (each right or wrong, a binomial count) of each accuracy in
    ``row`` (before, after, random heads): ``{"accuracy_before": (low, high), ...}``."""
    n = int(row.get("n") or 0)
    return {k: wilson_interval(row[k], n, level) for k in ACCURACIES if row.get(k) is not None}


def with_intervals(row: dict[str, Any], level: float = CI_LEVEL) -> dict[str, Any]:
    """``row`` with ``ci_<accuracy>`` ``[low, high]`` beside each accuracy (:func:`accuracy_intervals`) and
    ``ci_level``: what a transfer result saves (a result saved before them loads without them)."""
    return {**row, **{f"ci_{k}": list(v) for k, v in accuracy_intervals(row, level).items()}, "ci_level": level}


# --- MMLU -------------------------------------------------------------------------------------

LETTERS = ("A", "B", "C", "D")


def mmlu_prompt(item: ChoiceItem) -> str:
    subject = item.subject.replace("_", " ")
    lines = [f"The following is a multiple choice question about {subject}.", "", item.question.strip()]
    lines += [f"{l}. {c}" for l, c in zip(LETTERS, item.choices)]
    return "\n".join(lines) + "\nAnswer:"


def mmlu_items(tokenizer: Any, questions: Sequence[ChoiceItem], max_tokens: int = 320) -> list[PromptPair]:
    items = []
    for q in questions:
        text = mmlu_prompt(q)
        ids = encode(tokenizer, text)
        if len(ids) > max_tokens:
            continue
        answer_id = first_answer_token(tokenizer, text, " " + q.answer_label)
        items.append(PromptPair(text, text, q.answer_label, answer_id, tuple(ids), tuple(ids), template_id="mmlu",
                                operation="mmlu"))
    return items


def letter_ids(tokenizer: Any) -> list[int]:
    return [first_answer_token(tokenizer, "Answer:", " " + l) for l in LETTERS]


def mmlu_accuracy(
    model: Model, items: Sequence[PromptPair], means: AblationValues, heads: Sequence[Head] = ()
) -> float:
    """Share of questions whose answer letter has the highest logit among A-D."""
    if not items:
        return float("nan")
    ids = letter_ids(model.tokenizer)
    logits = knockout_logits(model, items, means, list(heads), batch_size=8)[:, ids]
    gold = torch.tensor([ids.index(p.answer_token_id) for p in items])
    return float((logits.argmax(-1) == gold).float().mean())


@dataclass(eq=False, repr=False)
class TransferResult(Result[TransferConfig]):
    """Figure 4 (and the MMLU check): accuracy on each set before and after knocking out the key heads, and
    after knocking out as many random heads."""

    kind = "transfer"

    results: dict[str, dict[str, Any]]  # set -> n, accuracy_before, accuracy_after, accuracy_random_heads, ...
    key_heads: list[Head]
    random_heads: list[Head] = field(default_factory=list)
    examples: dict[str, str] = field(default_factory=dict)

    def intervals(self) -> dict[str, dict[str, tuple[float, float]]]:
        """Per set, the interval of each accuracy over its items: the saved ``ci_*`` fields, or (a result saved
        before them) the same Wilson intervals computed from ``n`` and the accuracy."""
        out = {}
        for name, row in self.results.items():
            level = row.get("ci_level", CI_LEVEL)
            computed = accuracy_intervals(row, level)
            out[name] = {k: tuple(row[f"ci_{k}"]) if f"ci_{k}" in row else v for k, v in computed.items()}
        return out

    def figure(self):
        from circuits.viz.figures import before_after_figure

        from circuits.types import top_heads_label

        names = list(self.results)
        r = self.results
        heads = top_heads_label(len(self.key_heads), self.config.key_rule)
        ci = self.intervals()
        level = next((row["ci_level"] for row in r.values() if "ci_level" in row), CI_LEVEL)
        return before_after_figure(names, [r[k]["accuracy_before"] for k in names], [r[k]["accuracy_after"] for k in names],
                                   f"Transfer of the knockout of the {heads} (Figure 4, MMLU)",
                                   control=[r[k].get("accuracy_random_heads") for k in names], knocked=heads,
                                   intervals=[[ci[k].get(a) for a in ACCURACIES] for k in names],
                                   ns=[r[k].get("n") for k in names], level=level)

    def _write(self, folder: Path) -> None:
        write_json(folder / "data.json", {"results": self.results, "key_heads": [list(h) for h in self.key_heads],
                                          "random_heads": [list(h) for h in self.random_heads], "examples": self.examples})

    @classmethod
    def _read(cls, folder: Path, config: TransferConfig) -> TransferResult:
        d = read_json(folder / "data.json")
        return cls(config, d["results"], [Head(*h[:2]) for h in d["key_heads"]],
                   [Head(*h[:2]) for h in d.get("random_heads", [])], d.get("examples", {}))


@dataclass(frozen=True)
class WordProblemConfig(KeyHeadSource):
    """What decides Table 4: the word-problem set, its few-shot prompt, and how many key heads are compared."""

    dataset: str = option("gsm8k")
    n: int = count(48)
    shots: int = count(1, minimum=0, maximum=8, help="solved examples before each question (0: none)")
    top: int = count(10)


@dataclass(eq=False, repr=False)
class WordProblemHeads(Result[WordProblemConfig]):
    """Table 4: key heads found on word problems, their overlap with the template key heads, and knockouts.

    ``datasets[name]`` holds ``n_questions``, ``n_correct``, ``accuracy``, ``key_heads`` (``[layer, head, effect]``),
    ``shared_with_templates`` and the knockout accuracies (own heads, template heads, shared, own-only)."""

    kind = "word_problems"

    template_heads: list[Head]
    datasets: dict[str, dict[str, Any]]

    def figure(self):
        from circuits.viz.figures import word_problem_table_figure

        return word_problem_table_figure(self.datasets)

    def _write(self, folder: Path) -> None:
        write_json(folder / "data.json", {"template_heads": [list(h) for h in self.template_heads], "datasets": self.datasets})

    @classmethod
    def _read(cls, folder: Path, config: WordProblemConfig) -> WordProblemHeads:
        d = read_json(folder / "data.json")
        return cls(config, [Head(*h[:2]) for h in d["template_heads"]], d["datasets"])
