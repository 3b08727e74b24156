"""Counterfactuals for word problems: rewrite the asking phrase (Appendix E, Table 4).

The paper makes a GSM8K counterfactual by rewriting the phrase that asks for the calculation with a
minimal edit ("Calculate the number of gigabytes" -> "Describe the location of gigabytes"), so the
question keeps its numbers and token positions but no longer asks for a number. The rule here:

1. find the **last** asking phrase of :data:`ASKING_PHRASES` in the question (whole words, as
   written: ``How many``, ``How much``, ``What is``, ``Calculate``, ...);
2. replace that phrase, and nothing else, by the first of its non-numeric alternatives
   (``How many`` -> ``Which of``, ``Calculate`` -> ``Describe``, ...) whose prompt has the same
   token length and differs from the reference only in tokens inside the phrase;
3. questions with no asking phrase, or with no alternative of equal token length, are skipped and
   counted by reason.

Prompts end with ``" The answer is "`` and the target is the answer's first token.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from circuits.data.benchmarks import MathItem
from circuits.data.pairs import PromptError, PromptPair, encode, first_answer_token, make_pair, prefix_length_of

ANSWER_CUE = " The answer is "
ASKING_PHRASES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("How many", ("Which of", "Which one", "Where are", "Who are")),
    ("How much", ("Which of", "Where is", "Who is", "Which one")),
    ("How long", ("Where is", "Which of", "Who is")),
    ("How old", ("Where is", "Who is")),
    ("How fast", ("Where is", "Who is")),
    ("how many", ("which of", "which one", "where are")),
    ("how much", ("which of", "where is", "which one")),
    ("What percentage", ("What location", "Which location", "What colour")),
    ("What is", ("Where is", "Who is")),
    ("What was", ("Where was", "Who was")),
    ("Calculate", ("Describe",)),
    ("Compute", ("Describe",)),
    ("Determine", ("Describe",)),
    ("Find", ("Name",)),
)
_PATTERN = re.compile(r"\b(" + "|".join(re.escape(p) for p, _ in ASKING_PHRASES) + r")\b")
_ALTERNATIVES = dict(ASKING_PHRASES)


@dataclass(frozen=True)
class Rewrite:
    """Where the asking phrase is (character span in the question) and its replacements to try."""

    start: int
    end: int
    phrase: str
    alternatives: tuple[str, ...]

    def apply(self, question: str, alternative: str) -> str:
        return question[: self.start] + alternative + question[self.end :]


def find_asking_phrase(question: str) -> Rewrite | None:
    """The last asking phrase of the question, or None."""
    matches = list(_PATTERN.finditer(question))
    if not matches:
        return None
    m = matches[-1]
    return Rewrite(m.start(), m.end(), m.group(1), _ALTERNATIVES[m.group(1)])


def word_problem_pair(tokenizer: Any, problem: MathItem, prefix: str = "") -> tuple[PromptPair | None, str]:
    """A reference/counterfactual pair for one problem, or ``(None, reason)`` when the rule cannot rewrite it."""
    rw = find_asking_phrase(problem.question)
    if rw is None:
        return None, "no asking phrase"
    ref = prefix + problem.question + ANSWER_CUE
    ref_ids = encode(tokenizer, ref)
    answer = problem.answer_text
    try:
        answer_id = first_answer_token(tokenizer, ref, answer)
    except PromptError:
        return None, "answer does not tokenize after the prompt"
    span = (len(prefix) + rw.start, len(prefix) + rw.end)
    enc = tokenizer(ref, return_offsets_mapping=True)
    phrase_pos = tuple(i for i, (s, e) in enumerate(enc["offset_mapping"]) if e > s and s < span[1] and span[0] < e)
    for alt in rw.alternatives:
        cf = prefix + rw.apply(problem.question, alt) + ANSWER_CUE
        cf_ids = encode(tokenizer, cf)
        if len(cf_ids) != len(ref_ids):
            continue
        changed = {i for i, (a, b) in enumerate(zip(ref_ids, cf_ids)) if a != b}
        if not changed <= set(phrase_pos):
            continue
        pair = make_pair(tokenizer, ref, cf, answer[:1], operation="word_problem")
        return replace(
            pair, answer_token_id=answer_id, answer=answer, template_id=problem.id,
            roles={"operator": phrase_pos}, prefix_length=prefix_length_of(tokenizer, prefix, ref_ids),
        ), "ok"
    return None, "no alternative of equal token length"


def word_problem_pairs(
    tokenizer: Any, problems: Sequence[MathItem], prefix: str = "", max_tokens: int = 400
) -> tuple[list[PromptPair], Counter]:
    """Pairs for every problem the rule can rewrite; the counter holds how many were skipped and why."""
    pairs, reasons = [], Counter()
    for p in problems:
        try:
            pair, why = word_problem_pair(tokenizer, p, prefix)
        except PromptError:
            pair, why = None, "answer does not tokenize after the prompt"
        if pair is not None and len(pair.reference_token_ids) > max_tokens:
            pair, why = None, f"longer than {max_tokens} tokens"
        reasons[why] += 1
        if pair is not None:
            pairs.append(pair)
    return pairs, reasons


def solved_prefix(problems: Sequence[MathItem]) -> str:
    """A few-shot prefix of solved problems in the prompt's own form (question, cue, answer)."""
    return "".join(f"{p.question}{ANSWER_CUE}{p.answer_text}.\n" for p in problems)
