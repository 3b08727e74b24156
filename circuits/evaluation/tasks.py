"""Scoring a model on the benchmarks of Table 1 through lm-evaluation-harness (Section 5.3).

Tasks (names used by ``circuits evaluate --tasks``):

- ``gsm8k``, ``addsub``, ``singleeq``, ``svamp``: greedy generation after the fixed prompt
  ``Question: {question}\\nAnswer:`` (optionally ``math_shots`` GSM8K-train examples before it); the
  number after the last "The answer is", else the last number, is compared numerically with the answer.
  AddSub/SingleEq/SVAMP are scored on their parts held out from LLM-Adapters' training file
  (:mod:`circuits.data.benchmarks`).
- ``mmlu``: 5-shot from the dev split of the same subject; the answer letter by log-likelihood.
- ``commonsenseqa``: ``csqa_shots``-shot from train, scored on dev; the letter by log-likelihood.
- ``arithmetic``: held-out template arithmetic (single-digit, three-digit, word forms, decimals;
  :func:`circuits.data.arithmetic.arithmetic_eval_items`), greedy to the end of the line; also per form.
- ``perplexity``: word/byte perplexity of held-out general text (MMLU validation questions + answers).

Each task's records are written as JSON Lines into a temporary folder with instantiated copies of the
YAML templates in ``circuits/lm_eval_tasks`` (lm-eval resolves ``data_files`` against the working
directory, so paths are absolute). Documents are shuffled with a fixed seed so ``--limit N`` takes a
stratified-looking sample (MMLU spans subjects) rather than the first subject.
"""

from __future__ import annotations

import os
import json
import random
import re
import shutil
import tempfile
from collections import defaultdict
from pathlib import Path
from typing import Any

from circuits.evaluation.config import ALL_TASKS, GENERIC_TASKS, MATH_EVAL_TASKS, EvalConfig  # noqa: F401
from circuits.data import benchmarks as bd
from circuits.data.arithmetic import arithmetic_eval_items
from circuits.evaluation.result import EvalResult

TASK_PREFIX = "circuits_"
TEMPLATES = Path(__file__).parent / "lm_eval_tasks"
PRIMARY_METRIC = {t: bd.primary_metric(t) for t in ALL_TASKS}
MATH_UNTIL = ("\n\n", "Question:")  # where a word problem's greedy answer stops (also the SFT study's)


# --- scoring helpers (used by the YAMLs' process_results) ------------------------------------------

_ANSWER_IS = re.compile(r"answer is\s*:?\s*\$?\s*(-?[\d,]*\.?\d+)", re.IGNORECASE)


def extract_answer(text: str) -> float | None:
    """The number after the last "The answer is", else the last number in ``text``."""
    found = _ANSWER_IS.findall(text)
    if found:
        value = bd.parse_number(found[-1])
        if value is not None:
            return value
    return bd.extract_final_number(text)


def process_numeric(doc: dict, results: list[str]) -> dict[str, float]:
    return {"acc": float(bd.numbers_match(extract_answer(results[0]), float(doc["answer"])))}


# --- building task files ------------------------------------------------------------------------


def _format_choice_question(question: str, labels: tuple[str, ...], choices: tuple[str, ...]) -> str:
    lines = [question.strip()] + [f"{l}. {c.strip()}" for l, c in zip(labels, choices)]
    return "\n".join(lines) + "\nAnswer:"


def _mmlu_records(config: EvalConfig) -> list[dict]:
    dev: dict[str, list[bd.ChoiceItem]] = defaultdict(list)
    for it in bd.load_mmlu("dev", config.data_dir, config.source):  # type: ignore[arg-type]
        dev[it.subject].append(it)
    records = []
    for it in bd.load_mmlu("test", config.data_dir, config.source):  # type: ignore[arg-type]
        header = f"The following are multiple choice questions (with answers) about {it.subject.replace('_', ' ')}.\n\n"
        shots = "".join(
            f"{_format_choice_question(s.question, s.labels, s.choices)} {s.labels[s.answer]}\n\n" for s in dev[it.subject][: config.mmlu_shots]
        )
        prompt = header + shots + _format_choice_question(it.question, it.labels, it.choices)
        records.append({"prompt": prompt, "labels": list(it.labels), "answer": it.answer, "subject": it.subject})
    return records


def _csqa_records(config: EvalConfig) -> list[dict]:
    shots_items = bd.load_commonsenseqa("train", config.data_dir, config.source)[: config.csqa_shots]  # type: ignore[arg-type]
    header = "The following are multiple choice questions (with answers) about common sense.\n\n"
    shots = "".join(f"{_format_choice_question(s.question, s.labels, s.choices)} {s.labels[s.answer]}\n\n" for s in shots_items)
    return [
        {"prompt": header + shots + _format_choice_question(it.question, it.labels, it.choices), "labels": list(it.labels), "answer": it.answer}
        for it in bd.load_commonsenseqa("dev", config.data_dir, config.source)  # type: ignore[arg-type]
    ]


def _math_records(task: str, config: EvalConfig) -> list[dict]:
    prefix = ""
    if config.math_shots:
        shots = bd.load_gsm8k("train", config.data_dir, config.source)[: config.math_shots]  # type: ignore[arg-type]
        prefix = "".join(f"{bd.word_problem_prompt(s.question)} {s.rationale}\n\n" for s in shots)
    return [
        {"prompt": prefix + bd.word_problem_prompt(it.question), "answer": it.answer}
        for it in bd.load_math_eval(task, config.data_dir, config.source)  # type: ignore[arg-type]
    ]


_TASK_DATA = {"gsm8k": ("gsm8k",), "addsub": ("addsub",), "singleeq": ("singleeq",), "svamp": ("svamp",),
              "mmlu": ("mmlu",), "commonsenseqa": ("commonsenseqa",), "perplexity": ("mmlu_val",), "arithmetic": ()}


def check_data(config: EvalConfig) -> None:
    """Every data file ``config.tasks`` read is in the data folder (local source only); else one error naming them."""
    if config.source != "local":
        return
    sets = [s for t in config.tasks for s in _TASK_DATA[t]]
    if config.math_shots and any(t in MATH_EVAL_TASKS for t in config.tasks):
        sets.append("gsm8k_train")
    if sets:
        bd.check_data_files(sets, config.data_dir)


def task_records(task: str, config: EvalConfig) -> list[dict]:
    """The documents of one task, shuffled with ``config.seed``."""
    if task in MATH_EVAL_TASKS:
        records = _math_records(task, config)
    elif task == "mmlu":
        records = _mmlu_records(config)
    elif task == "commonsenseqa":
        records = _csqa_records(config)
    elif task == "arithmetic":
        items = arithmetic_eval_items(config.arithmetic_per_form)
        records = [{"prompt": it.prompt, "answer": it.answer, "form": it.form} for it in items]
    elif task == "perplexity":
        records = [{"text": t} for t in bd.load_general_text(config.data_dir, config.source)]  # type: ignore[arg-type]
    else:
        raise ValueError(f"Unknown task {task!r}")
    random.Random(config.seed).shuffle(records)
    return records


def write_task_dir(config: EvalConfig, folder: Path) -> list[str]:
    """Write each task's JSONL and instantiated YAML into ``folder``; return the lm-eval task names."""
    shutil.copy(TEMPLATES / "circuits_metrics.py", folder / "circuits_metrics.py")
    names = []
    for task in config.tasks:
        data = folder / f"{task}.jsonl"
        with data.open("w", encoding="utf-8") as fh:
            for rec in task_records(task, config):
                fh.write(json.dumps(rec) + "\n")
        name = TASK_PREFIX + task
        if task in MATH_EVAL_TASKS or task == "arithmetic":
            template = (TEMPLATES / "generate_numeric.yaml").read_text()
            until = ["\n"] if task == "arithmetic" else list(MATH_UNTIL)
            max_gen = 8 if task == "arithmetic" else config.max_gen_toks
            text = template.replace("@UNTIL@", json.dumps(until)).replace("@MAX_GEN_TOKS@", str(max_gen))
        elif task in GENERIC_TASKS:
            text = (TEMPLATES / "multiple_choice.yaml").read_text()
        else:
            text = (TEMPLATES / "perplexity.yaml").read_text()
        text = text.replace("@NAME@", name).replace("@DATA@", str(data.resolve()))
        (folder / f"{name}.yaml").write_text(text)
        names.append(name)
    return names


# --- running ------------------------------------------------------------------------------------


def evaluate(model: Any, config: EvalConfig | None = None, **kwargs: Any) -> EvalResult:
    """Run lm-eval on ``model`` (:data:`circuits.models.backend.Model`, either backend) for ``config.tasks`` (or ``EvalConfig`` fields as keywords:
    ``evaluate(model, tasks=("arithmetic",), limit=20)``)."""
    config = (config.replace(**kwargs) if kwargs else config) if config is not None else EvalConfig(**kwargs)
    check_data(config)
    got = str(next(model.parameters()).dtype).removeprefix("torch.")
    if got != config.dtype:
        raise ValueError(f"the model is {got} but the config says dtype {config.dtype!r}; load it in {config.dtype} "
                         f"or set EvalConfig(dtype={got!r})")
    from lm_eval import evaluator
    from lm_eval.tasks import TaskManager

    from circuits.evaluation.lm_eval import HookedTransformerLM

    lm = HookedTransformerLM(model, batch_size=config.batch_size, max_gen_toks=config.max_gen_toks)
    folder = Path(tempfile.mkdtemp(prefix=f"circuits-eval-{os.getpid()}-"))  # a killed run's: the next one removes it
    try:
        names = write_task_dir(config, folder)
        manager = TaskManager(include_path=str(folder), include_defaults=False)
        raw = evaluator.simple_evaluate(
            model=lm, tasks=names, task_manager=manager, limit=config.limit, log_samples=True,
            bootstrap_iters=0, random_seed=config.seed, numpy_random_seed=config.seed, torch_random_seed=config.seed,
        )
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    scores = summarize(raw, config)
    return EvalResult(config, scores["tasks"], scores.get("arithmetic_by_form", {}))


def summarize(raw: dict, config: EvalConfig) -> dict:
    tasks: dict[str, dict] = {}
    for task in config.tasks:
        res = raw["results"][TASK_PREFIX + task]
        metrics = {k.split(",")[0]: v for k, v in res.items() if "," in k and "stderr" not in k}
        metrics["n"] = len(raw["samples"][TASK_PREFIX + task])
        tasks[task] = metrics
    out: dict = {"tasks": tasks}
    if "arithmetic" in config.tasks:
        by_form: dict[str, list[float]] = defaultdict(list)
        for s in raw["samples"][TASK_PREFIX + "arithmetic"]:
            by_form[s["doc"]["form"]].append(float(s["acc"]))
        out["arithmetic_by_form"] = {f: sum(v) / len(v) for f, v in sorted(by_form.items())}
    return out
