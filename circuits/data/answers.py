"""Answers of several tokens (issue 42): a pair read at a later answer position.

Tokenizers that split numbers into digits (SmolLM2, LLaMA 2, Mistral, Gemma, Qwen) write "12" as "1" then "2"; the
engines read one answer token at END. :func:`at_answer_position` turns each pair into the pair that reads the answer's
token ``k`` instead: both prompts are teacher-forced with the answer's first ``k`` tokens, so END moves to END + k and
every engine, metric and plain loop works on the new pairs unchanged.

The counterfactual is forced with the **reference's** answer tokens, never with its own answer: the two runs then
differ only where the prompts differ, so a patch at END + k carries only what the question changed (the
counterfactual's own answer would also change the forced tokens, and the paper's operator counterfactual has none).
No built-in metric reads the counterfactual's own answer (``logit_diff`` subtracts the counterfactual run's top token
at END + k), so no count of its tokens is needed or checked.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from circuits.data.pair_config import WHOLE_ANSWER, answer_position
from circuits.data.pairs import PromptPair


def check_answer_position(pairs: Sequence[PromptPair], position: int | str) -> None:
    """One ``ValueError`` line, before any work, when a pair's answer is too short for ``position``: every answer
    needs more than ``k`` tokens to be read at END + ``k``; ``whole`` reads any length."""
    position = answer_position(position)
    if position == WHOLE_ANSWER or position == 0:
        return
    assert isinstance(position, int)
    for i, p in enumerate(pairs, 1):
        n = len(p.answer_ids)
        if n <= position:
            raise ValueError(
                f"--answer-position {position}: pair {i} ({p.reference[-30:]!r} -> {p.answer!r}) has an answer of {n} "
                f"token{'s' if n != 1 else ''}, so it has no token at END + {position}; accepted: positions 0.."
                f"{n - 1} for it (give pairs whose answers all have at least {position + 1} tokens, or 'whole')")


def force_answer(pair: PromptPair, k: int, tokenizer: Any = None) -> PromptPair:
    """``pair`` read at answer token ``k``: both prompts followed by the answer's first ``k`` tokens (the reference's
    answer, for the counterfactual too), its answer the rest (``answer_token_id`` its token ``k``). ``k = 0``: the pair
    itself. With ``tokenizer``, the texts follow the tokens (the forced tokens decoded onto both prompts)."""
    if k == 0:
        return pair
    ids = pair.answer_ids
    if not 0 < k < len(ids):
        raise ValueError(f"answer position {k} of an answer of {len(ids)} tokens ({pair.answer!r})")
    forced = tuple(ids[:k])
    text = tokenizer.decode(list(forced)) if tokenizer is not None else ""
    rest = pair.answer[len(text):] if text and pair.answer.startswith(text) else (
        tokenizer.decode(list(ids[k:])) if tokenizer is not None else pair.answer)
    return replace(pair, reference=pair.reference + text, counterfactual=pair.counterfactual + text, answer=rest,
                   answer_token_id=ids[k], answer_token_ids=tuple(ids[k:]) if len(ids) - k > 1 else (),
                   reference_token_ids=pair.reference_token_ids + forced,
                   counterfactual_token_ids=pair.counterfactual_token_ids + forced)


def at_answer_position(pairs: Sequence[PromptPair], position: int | str, tokenizer: Any = None) -> list[PromptPair]:
    """Every pair read at answer token ``position`` (:func:`force_answer`), after :func:`check_answer_position`."""
    position = answer_position(position)
    if position == WHOLE_ANSWER:
        raise ValueError("at_answer_position reads one answer token; the whole answer is one sweep per position "
                         "(circuits.patching.engines.end_sweep_answers.sweep_answer)")
    check_answer_position(pairs, position)
    assert isinstance(position, int)
    return [force_answer(p, position, tokenizer) for p in pairs]
