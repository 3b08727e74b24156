from collections import Counter

import pytest

from circuits.data.benchmarks import MathItem
from circuits.data.word_problems import ANSWER_CUE, find_asking_phrase, word_problem_pair, word_problem_pairs

PROBLEMS = [
    MathItem("Tom has 3 apples. He buys 5 more. How many apples does Tom have now?", 8, id="p0"),
    MathItem("A shirt costs $12. Calculate the number of dollars Ann pays for 2 shirts.", 24, id="p1"),
    MathItem("What is the cost if each pen is 4 dollars? How much does Bob pay for 3 pens?", 12, id="p2"),
    MathItem("Sam reads 4 pages a day for 5 days.", 20, id="p3"),
]


def test_last_asking_phrase_is_found():
    rw = find_asking_phrase(PROBLEMS[2].question)
    assert rw.phrase == "How much" and PROBLEMS[2].question[rw.start : rw.end] == "How much"
    assert find_asking_phrase(PROBLEMS[3].question) is None


@pytest.mark.parametrize("problem", PROBLEMS[:3], ids=lambda p: p.id)
def test_rewrite_changes_only_the_asking_phrase(problem, tokenizer):
    tok = tokenizer
    pair, why = word_problem_pair(tok, problem, prefix="Q1 solved. The answer is 3.\n")
    assert why == "ok"
    rw = find_asking_phrase(problem.question)
    ref, cf = pair.reference, pair.counterfactual
    start = ref.index(problem.question) + rw.start
    assert ref[:start] == cf[:start]
    tail = len(problem.question) - rw.end + len(ANSWER_CUE)
    assert ref[-tail:] == cf[-tail:]
    assert ref[start : len(ref) - tail] == rw.phrase
    assert cf[start : len(cf) - tail] in rw.alternatives
    assert len(pair.reference_token_ids) == len(pair.counterfactual_token_ids)
    changed = [i for i, (a, b) in enumerate(zip(pair.reference_token_ids, pair.counterfactual_token_ids)) if a != b]
    assert changed and set(changed) <= set(pair.roles["operator"])
    assert tok.decode([pair.answer_token_id]).strip() == problem.answer_text[0]


def test_unrewritable_questions_are_counted(tokenizer):
    pairs, reasons = word_problem_pairs(tokenizer, PROBLEMS)
    assert len(pairs) == 3 and reasons == Counter({"ok": 3, "no asking phrase": 1})
