"""Evaluation: answer extraction, data splits, the lm-eval adapter against direct computation, and
task scoring against hand-computed values."""

from __future__ import annotations

import math

import pytest
import torch

from circuits.data import arithmetic
from circuits.data import benchmarks as bd
from circuits.evaluation import lm_eval as adapter
from circuits.evaluation import tasks as ev
from circuits.evaluation.lm_eval import HookedTransformerLM
from circuits.models.forward import length_batches, shared_prefix_lengths


class _Req:
    def __init__(self, *args):
        self.args = args


@pytest.fixture(scope="module")
def model(tiny_llama):
    return tiny_llama


def test_extract_answer():
    assert ev.extract_answer(" She has 3 + 4 = 7 apples.\nThe answer is 7.") == 7.0
    assert ev.extract_answer("The answer is $1,234.50 and then 99") == 1234.5
    assert ev.extract_answer("so 12 - 5 = 7") == 7.0
    assert ev.extract_answer("no number") is None
    assert ev.process_numeric({"answer": 72.0}, ["... The answer is 72."]) == {"acc": 1.0}
    assert ev.process_numeric({"answer": 72.0}, ["71"]) == {"acc": 0.0}
    assert bd.numbers_match(0.30000001, 0.3) and not bd.numbers_match(None, 1.0)


def test_held_out_splits_have_no_overlap():
    counts = {t: len(bd.load_math_eval(t)) for t in bd.MATH_TASKS}
    # measured: AddSub 79, SingleEq 102, SVAMP 200 items whose question text is not in math_data.json
    assert counts == {"gsm8k": 1319, "addsub": 79, "singleeq": 102, "svamp": 200}
    train = {bd.normalize_question(it.question) for it in bd.adapters_train_items()}
    for task in bd.MATH_TASKS:
        assert not train & {bd.normalize_question(it.question) for it in bd.load_math_eval(task)}
    gsm_train = bd.load_gsm8k("train")
    assert len(gsm_train) == 7473 and gsm_train[0].answer == 72.0
    assert gsm_train[0].rationale.endswith("The answer is 72.") and "<<" not in gsm_train[0].rationale


def test_mmlu_and_csqa_loaders():
    dev = bd.load_mmlu("dev")
    assert len(dev) == 285 and all(len(it.choices) == 4 for it in dev)
    assert dev[0].subject == "abstract_algebra" and dev[0].answer == 1 and dev[0].choices == ("0", "1", "2", "3")
    csqa = bd.load_commonsenseqa("dev")
    assert len(csqa) == 1221 and csqa[0].labels == ("A", "B", "C", "D", "E") and csqa[0].answer == 0


def _direct_logprob(model, ctx: list[int], cont: list[int]) -> float:
    tokens = torch.tensor([ctx + cont])
    with torch.no_grad():
        logp = torch.log_softmax(model(tokens)[0].float(), -1)
    return sum(float(logp[len(ctx) - 1 + i, t]) for i, t in enumerate(cont))


def test_adapter_loglikelihood_equals_direct(model):
    lm = HookedTransformerLM(model, batch_size=2)
    reqs = [_Req("2 + 3 =", " 5"), _Req("2 + 3 =", " 6"), _Req("The cat sat on", " the mat today"), _Req("", "hello world"),
            _Req("Answer: ", "A")]
    got = lm.loglikelihood(reqs)
    tok = lambda s: model.tokenizer(s, add_special_tokens=False).input_ids  # noqa: E731
    expected = [
        _direct_logprob(model, tok("2 + 3 ="), tok(" 5")),
        _direct_logprob(model, tok("2 + 3 ="), tok(" 6")),
        _direct_logprob(model, tok("The cat sat on"), tok(" the mat today")),
        _direct_logprob(model, [model.tokenizer.eos_token_id], tok("hello world")),
        _direct_logprob(model, tok("Answer:"), tok(" A")),  # trailing space moves into the continuation
    ]
    for (lp, _), e in zip(got, expected):
        assert lp == pytest.approx(e, abs=1e-4)
    ctx = tok("2 + 3 =")
    greedy = int(model(torch.tensor([ctx]))[0, -1].argmax())
    assert lm.loglikelihood([_Req("2 + 3 =", model.tokenizer.decode([greedy]))])[0][1] is True


def test_adapter_loglikelihood_rolling_equals_direct(model):
    text = "Paris is the capital of France. It lies on the Seine."
    ids = model.tokenizer(text, add_special_tokens=False).input_ids
    lm = HookedTransformerLM(model, batch_size=4)
    (got,) = lm.loglikelihood_rolling([_Req(text)])
    assert got == pytest.approx(_direct_logprob(model, [model.tokenizer.eos_token_id], ids), abs=1e-4)
    # Short windows: every token is still scored exactly once.
    small = HookedTransformerLM(model, batch_size=4, max_length=5)
    (windowed,) = small.loglikelihood_rolling([_Req(text)])
    assert math.isfinite(windowed) and windowed != got


def _naive_greedy(model, prompt: str, n: int) -> list[int]:
    ids = model.tokenizer(prompt, add_special_tokens=False).input_ids
    out = []
    for _ in range(n):
        nxt = int(model(torch.tensor([ids + out]))[0, -1].argmax())
        out.append(nxt)
    return out


def test_batched_cached_generation_equals_naive_loop(model):
    prompts = ["1 + 2 = 3\n4 + 4 = ", "Question: Tom has 3 apples. How many?\nAnswer:", "7"]
    lm = HookedTransformerLM(model, batch_size=3)
    got = lm.generate_greedy(prompts, max_new_tokens=6, until=[])
    for p, g in zip(prompts, got):
        assert g == model.tokenizer.decode(_naive_greedy(model, p, 6))


class _OracleLM(HookedTransformerLM):
    """Answers arithmetic right when the first operand is even; MMLU right when the prompt length is even."""

    def __init__(self, model, answers: dict[str, int]):
        super().__init__(model)
        self.answers = answers

    def generate_greedy(self, prompts, max_new_tokens, until):
        out = []
        for p in prompts:
            a, b = (float(x) for x in p.splitlines()[-1].replace("plus", "+").replace("equals", "=").split("=")[0].split("+"))
            out.append(f"{arithmetic._fmt(round(a + b, 1)) if a % 2 == 0 else '0'}\nmore")
        return out

    def loglikelihood(self, requests, disable_tqdm=False):
        res = []
        for r in requests:
            ctx, cont = r.args
            right = "ABCD"[self.answers[ctx]] if len(ctx) % 2 == 0 else "ABCD"[(self.answers[ctx] + 1) % 4]
            res.append((0.0 if cont.strip() == right else -1.0, False))
        return res


def test_task_scoring_matches_hand_computed(model):
    config = ev.EvalConfig(tasks=("arithmetic", "mmlu"), limit=12, mmlu_shots=1, arithmetic_per_form=5)
    arith = ev.task_records("arithmetic", config)[:12]
    mmlu = ev.task_records("mmlu", config)[:12]
    answers = {r["prompt"]: r["answer"] for r in mmlu}
    first = lambda r: float(r["prompt"].splitlines()[-1].split(" ")[0])  # noqa: E731
    expected_arith = sum(first(r) % 2 == 0 for r in arith) / 12
    expected_mmlu = sum(len(r["prompt"]) % 2 == 0 for r in mmlu) / 12
    original = adapter.HookedTransformerLM
    adapter.HookedTransformerLM = lambda m, **kw: _OracleLM(m, answers)
    try:
        out = ev.evaluate(model, config)
    finally:
        adapter.HookedTransformerLM = original
    assert out.tasks["arithmetic"]["acc"] == pytest.approx(expected_arith)
    assert out.tasks["mmlu"]["acc"] == pytest.approx(expected_mmlu)
    assert out.tasks["mmlu"]["n"] == 12
    assert 0 < expected_arith < 1 and 0 < expected_mmlu < 1


def test_eval_config_validation():
    with pytest.raises(ValueError, match="accepted"):
        ev.EvalConfig(tasks=("nope",))
    with pytest.raises(ValueError, match="^--mmlu-shots 6: must be at most 5$"):
        ev.EvalConfig(mmlu_shots=6)


def test_arithmetic_eval_forms_held_out_from_training():
    train = {e.prompt.splitlines()[-1] for e in arithmetic.arithmetic_train_items(500)}
    evals = arithmetic.arithmetic_eval_items(20)
    assert {it.form for it in evals} == set(arithmetic.ARITHMETIC_FORMS)
    assert not train & {it.prompt.splitlines()[-1] for it in evals}


def test_length_batches_cap_rows_and_attention_cells():
    lengths = [3000, 2000, 1500, 900, 900, 800, 10, 10, 10]
    batches = length_batches(lengths, batch_size=4, full_length=1024)
    assert [list(b) for b in batches] == [[0], [1], [2], [3, 4, 5, 6], [7, 8]]
    for b in batches:  # every batch within the budget (a single over-long row still runs alone)
        assert len(b) == 1 or len(b) * lengths[b.start] ** 2 <= 4 * 1024**2
    assert sum(len(b) for b in batches) == len(lengths)
    assert [list(b) for b in length_batches([5] * 5, batch_size=2)] == [[0, 1], [2, 3], [4]]


def test_shared_prefix_lengths_group_rows_by_their_common_prefix():
    shots = list(range(100, 140))  # a 40-token few-shot part
    rows = [shots + [1, 2, 3], [7, 7], shots + [1, 2, 4, 5], shots + [9], list(range(100, 110)) + [5] * 40, shots]
    pre = shared_prefix_lengths(rows, min_prefix=32)
    # rows 0, 2, 3 share the shots and one more token at most; row 5 is exactly the shots, so the run's
    # prefix stops one token short of it; rows 1 and 4 share fewer than 32 tokens with anyone
    assert pre == [39, 0, 39, 39, 0, 39]
    assert all(p < len(r) for p, r in zip(pre, rows))
    assert shared_prefix_lengths(rows, min_prefix=50) == [0] * 6


def test_adapter_shared_prefix_scores_equal_unshared(model):
    """Few-shot contexts that share their examples run them once; the scores equal separate forwards."""
    shots = "".join(f"Q: {a} plus {b}?\nA: {a + b}\n\n" for a, b in ((1, 2), (3, 4), (5, 1), (2, 2), (6, 3)))
    reqs = [_Req(shots + f"Q: {a} plus {b}?\nA:", f" {c}") for a, b in ((1, 1), (4, 2), (7, 1)) for c in ("A", "B")]
    reqs.append(_Req("Unrelated context", " x"))
    shared = HookedTransformerLM(model, batch_size=2, min_shared_prefix=8)
    assert sum(shared_prefix_lengths_of(shared, reqs)) > 0  # the sharing path really runs
    plain = HookedTransformerLM(model, batch_size=2, min_shared_prefix=None)
    got, want = shared.loglikelihood(reqs), plain.loglikelihood(reqs)
    for (lp, g), (lq, h) in zip(got, want):
        assert lp == pytest.approx(lq, abs=1e-4) and g == h
    tok = lambda s: model.tokenizer(s, add_special_tokens=False).input_ids  # noqa: E731
    assert got[0][0] == pytest.approx(_direct_logprob(model, tok(reqs[0].args[0]), tok(" A")), abs=1e-4)
    assert all(len(tok(r.args[1])) == 1 for r in reqs)  # single-token continuations: the shared path


def shared_prefix_lengths_of(lm, reqs) -> list[int]:
    return shared_prefix_lengths(sorted({tuple(lm._encode_pair(*r.args)[0]) for r in reqs}), lm.min_shared_prefix)


def test_eval_result_saves_as_a_file_or_a_folder(tmp_path):
    result = ev.EvalResult(ev.EvalConfig(tasks=("arithmetic",), limit=3), {"arithmetic": {"acc": 0.5, "n": 3}},
                           {"single": 1.0})
    for target in (tmp_path / "eval.json", tmp_path / "eval"):
        back = ev.EvalResult.load(result.save(target))
        assert back.tasks == result.tasks and back.arithmetic_by_form == {"single": 1.0}
        assert back == result and back.config.limit == 3
