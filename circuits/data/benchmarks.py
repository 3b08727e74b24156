"""Reading the benchmarks as plain records, from ``../shared/data`` or the public hub: the math and generic
sets of Table 1 (fine-tuning and evaluation) and the transfer sets of Figure 4 and Table 4 (SVAMP, GSM8K,
AddSub, SingleEq word problems; MMLU humanities).

Local files (see each folder's README under the data directory) are read from ``data_dir``, found in
this order: the explicit argument (``--data-dir``), ``$CIRCUITS_DATA_DIR``, ``../shared/data`` relative
to the repository root. ``source="hub"`` reads the public Hugging Face copies instead (needs network).

Train/test separation (Section 5.3 trains on "the four math data sets' training data"):

- GSM8K: train on ``train.jsonl``, test on ``test.jsonl``.
- AddSub, SingleEq, SVAMP have no official train split. LLM-Adapters' ``math_data.json`` holds about
  80% of their test questions (and 1055 GSM8K test questions). We test each on its *held-out part*:
  the items of its evaluation file whose question is not in ``math_data.json`` (AddSub 79, SingleEq 102,
  SVAMP 200 here), and train only on ``math_data.json`` items whose question is in none of the four
  evaluation sets (:func:`adapters_train_items`). Matching ignores case and whitespace.
"""

from __future__ import annotations

import csv
import os
import random
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

MathTask = Literal["gsm8k", "addsub", "singleeq", "svamp"]
MATH_TASKS: tuple[str, ...] = ("gsm8k", "addsub", "singleeq", "svamp")


def primary_metric(task: str) -> str:
    """The one score a table shows for an evaluation task (``circuits evaluate --tasks``): word perplexity for
    ``perplexity`` (lower is better), accuracy for every other task (the math sets, MMLU, CommonsenseQA, arithmetic)."""
    return "word_perplexity" if task == "perplexity" else "acc"


Source = Literal["local", "hub"]
# Public hub copies, for machines with network access. AddSub and SingleEq have no canonical hub copy.
HUB_DATASETS = {
    "gsm8k": ("openai/gsm8k", "main"),
    "svamp": ("ChilleD/SVAMP", None),
    "mmlu": ("cais/mmlu", "all"),
    "commonsenseqa": ("tau/commonsense_qa", None),
}
_LOCAL_TEST_FILES = {
    "gsm8k": "gsm8k/test.jsonl",
    "addsub": "addsub/test.json",
    "singleeq": "singleeq/test.json",
    "svamp": "svamp/llm_adapters_test.json",
}
ADAPTERS_TRAIN_FILE = "llm_adapters_math_train/math_data.json"


MMLU_HUMANITIES = (
    "formal_logic", "high_school_european_history", "high_school_us_history", "high_school_world_history",
    "international_law", "jurisprudence", "logical_fallacies", "moral_disputes", "moral_scenarios",
    "philosophy", "prehistory", "professional_law", "world_religions",
)


@dataclass(frozen=True)
class MathItem:
    """A word problem: question text, numeric answer, and a worked rationale ending "The answer is N." when known."""

    question: str
    answer: float
    rationale: str | None = None
    source: str = ""
    id: str = ""

    @property
    def answer_text(self) -> str:
        """The answer as written after "The answer is": ``43``, ``2.5``."""
        return str(int(self.answer)) if self.answer == int(self.answer) else str(self.answer)


@dataclass(frozen=True)
class ChoiceItem:
    """A multiple-choice question; ``answer`` indexes ``choices``; ``labels`` are the letters shown."""

    question: str
    choices: tuple[str, ...]
    answer: int
    labels: tuple[str, ...] = ("A", "B", "C", "D")
    subject: str = ""

    @property
    def answer_label(self) -> str:
        return self.labels[self.answer]


WORD_PROBLEM_PROMPT = "Question: {question}\nAnswer:"


def word_problem_prompt(question: str) -> str:
    return WORD_PROBLEM_PROMPT.format(question=question.strip())


def repo_root() -> Path:
    return Path(__file__).resolve().parents[2]


def resolve_data_dir(data_dir: str | os.PathLike | None = None) -> Path:
    """The benchmark data folder: the argument (``--data-dir``) when given, else ``$CIRCUITS_DATA_DIR`` when set,
    else ``../shared/data`` beside the repository. A folder that is named but missing is an error, never a silent
    fall-back to the next candidate."""
    if data_dir:
        named, how = Path(data_dir).expanduser(), "--data-dir"
    elif os.environ.get("CIRCUITS_DATA_DIR"):
        named, how = Path(os.environ["CIRCUITS_DATA_DIR"]).expanduser(), "$CIRCUITS_DATA_DIR"
    else:
        named, how = repo_root().parent / "shared" / "data", "the default ../shared/data"
    if not named.is_dir():
        raise FileNotFoundError(f"Benchmark data folder {named} ({how}) does not exist; pass --data-dir with the folder "
                                "that holds gsm8k/, svamp/, mmlu/, ... (see its README), set CIRCUITS_DATA_DIR, or use "
                                "source='hub'")
    return named.resolve()


# The files each data set is read from, relative to the data folder.
DATA_FILES: dict[str, tuple[str, ...]] = {
    "gsm8k": ("gsm8k/test.jsonl",),
    "gsm8k_train": ("gsm8k/train.jsonl",),
    "addsub": ("addsub/test.json", ADAPTERS_TRAIN_FILE),
    "singleeq": ("singleeq/test.json", ADAPTERS_TRAIN_FILE),
    "svamp": ("svamp/llm_adapters_test.json", ADAPTERS_TRAIN_FILE),
    "svamp_all": ("svamp/SVAMP.json",),
    "adapters": (ADAPTERS_TRAIN_FILE, "gsm8k/test.jsonl", "addsub/test.json", "singleeq/test.json",
                 "svamp/llm_adapters_test.json"),
    "mmlu": ("mmlu/dev", "mmlu/test"),
    "mmlu_val": ("mmlu/val",),
    "commonsenseqa": ("commonsenseqa/train_rand_split.jsonl", "commonsenseqa/dev_rand_split.jsonl"),
}


def check_data_files(sets: tuple[str, ...] | list[str], data_dir: str | os.PathLike | None = None) -> Path:
    """The data folder, after checking that every file ``sets`` (keys of :data:`DATA_FILES`) read is there: one
    error naming every missing file, before any model is loaded."""
    folder = resolve_data_dir(data_dir)
    missing = sorted({f for s in sets for f in DATA_FILES[s] if not (folder / f).exists()
                      or ((folder / f).is_dir() and not any((folder / f).iterdir()))})
    if missing:
        raise FileNotFoundError(f"Benchmark data folder {folder} lacks {', '.join(missing)}; pass --data-dir with a "
                                "complete copy (see its README)")
    return folder


def normalize_question(text: str) -> str:
    return " ".join(text.lower().split())


def parse_number(text: str) -> float | None:
    """A number written as ``1,234``, ``-3.5``, ``$12`` or ``7.`` -> float; ``None`` if not a number."""
    cleaned = text.strip().replace(",", "").replace("$", "").rstrip(".")
    try:
        return float(cleaned)
    except ValueError:
        return None


_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?|-?\.\d+")


def extract_final_number(text: str) -> float | None:
    """The last number in ``text`` (the answer of a generated solution), or ``None``."""
    found = _NUMBER.findall(text)
    for token in reversed(found):
        value = parse_number(token)
        if value is not None:
            return value
    return None


def numbers_match(predicted: float | None, gold: float, tol: float = 1e-4) -> bool:
    """Numeric comparison with a relative tolerance (``72`` matches ``72.0``)."""
    return predicted is not None and abs(predicted - gold) <= tol * max(1.0, abs(gold))


def _gsm8k_rationale(answer: str) -> tuple[str, float]:
    body, _, final = answer.rpartition("####")
    body = re.sub(r"<<[^>]*>>", "", body).strip()
    value = parse_number(final)
    if value is None:
        raise ValueError(f"GSM8K answer without a final number: {answer[-80:]!r}")
    return f"{body}\nThe answer is {final.strip()}.", value


def _adapters_rationale(output: str) -> str:
    return output.strip().removeprefix("A:").strip()


class _Row(dict):
    """One record of a data file; a field it lacks is one ValueError naming the file and the record."""

    where = ""

    def __missing__(self, key: str) -> Any:
        raise ValueError(f"{self.where}: no field {key!r}; the file is not the data set it is named for (see the "
                         "data folder's README)")


def _read_json(path: Path) -> list[dict]:
    """The records of a data file (JSON list or JSON Lines): a regular file of JSON objects; anything else is one
    ValueError naming the file (and the line or record)."""
    from circuits.io import read_json, read_jsonl

    data = read_jsonl(path) if path.suffix == ".jsonl" else read_json(path)
    if not isinstance(data, list):
        raise ValueError(f"{path} holds a JSON {type(data).__name__}, not a list of records")
    rows = []
    for i, r in enumerate(data, 1):
        if not isinstance(r, dict):
            raise ValueError(f"{path}, record {i}: a JSON {type(r).__name__}, not an object")
        row = _Row(r)
        row.where = f"{path}, record {i}"
        rows.append(row)
    return rows


def load_gsm8k(split: Literal["train", "test"], data_dir: str | None = None, source: Source = "local") -> list[MathItem]:
    if source == "hub":
        import datasets

        rows = datasets.load_dataset(*HUB_DATASETS["gsm8k"], split=split)
    else:
        rows = _read_json(resolve_data_dir(data_dir) / f"gsm8k/{split}.jsonl")
    items = []
    for i, row in enumerate(rows):
        rationale, value = _gsm8k_rationale(row["answer"])
        items.append(MathItem(row["question"].strip(), value, rationale, "gsm8k", f"gsm8k-{split}-{i}"))
    return items


def load_math_test(task: str, data_dir: str | None = None, source: Source = "local") -> list[MathItem]:
    """All test items of a math task (GSM8K ``test.jsonl``; LLM-Adapters test files for the others)."""
    if task == "gsm8k":
        return load_gsm8k("test", data_dir, source)
    if task not in MATH_TASKS:
        raise ValueError(f"Unknown math task {task!r}; accepted: {MATH_TASKS}")
    if source == "hub":
        if task not in HUB_DATASETS:
            raise ValueError(f"{task} has no public hub copy that this loader knows; use local files (--data-dir)")
        import datasets

        rows = datasets.load_dataset(HUB_DATASETS[task][0], split="test")
        return [MathItem(f"{r['Body'].strip()} {r['Question'].strip()}", float(r["Answer"]), None, task) for r in rows]
    rows = _read_json(resolve_data_dir(data_dir) / _LOCAL_TEST_FILES[task])
    return [MathItem(r["instruction"].strip(), float(parse_number(r["answer"])), None, task, f"{task}-{i}")  # type: ignore[arg-type]
            for i, r in enumerate(rows)]


def _adapters_questions(data_dir: str | None) -> set[str]:
    path = resolve_data_dir(data_dir) / ADAPTERS_TRAIN_FILE
    return {normalize_question(r["instruction"]) for r in _read_json(path)}


def load_math_eval(task: str, data_dir: str | None = None, source: Source = "local") -> list[MathItem]:
    """The evaluation set of a math task: GSM8K test; for the others the part held out from ``math_data.json``."""
    items = load_math_test(task, data_dir, source)
    if task == "gsm8k" or source == "hub":
        return items
    seen = _adapters_questions(data_dir)
    return [it for it in items if normalize_question(it.question) not in seen]


def adapters_train_items(data_dir: str | None = None) -> list[MathItem]:
    """``math_data.json`` minus every question of the four evaluation sets (no train/test overlap)."""
    test_questions: set[str] = set()
    for task in MATH_TASKS:
        test_questions |= {normalize_question(it.question) for it in load_math_eval(task, data_dir)}
    rows = _read_json(resolve_data_dir(data_dir) / ADAPTERS_TRAIN_FILE)
    items = []
    for r in rows:
        value = parse_number(r["answer"])
        if value is None or normalize_question(r["instruction"]) in test_questions:
            continue
        items.append(MathItem(r["instruction"].strip(), value, _adapters_rationale(r["output"]), "llm_adapters"))
    return items


def load_mmlu(split: Literal["dev", "val", "test"], data_dir: str | None = None, source: Source = "local",
              subjects: tuple[str, ...] | None = None) -> list[ChoiceItem]:
    """MMLU rows of every subject, or of ``subjects`` (header-less CSVs: question, A, B, C, D, answer letter)."""
    if source == "hub":
        import datasets

        hub_split = {"dev": "dev", "val": "validation", "test": "test"}[split]
        rows = datasets.load_dataset(*HUB_DATASETS["mmlu"], split=hub_split)
        return [ChoiceItem(r["question"], tuple(r["choices"]), int(r["answer"]), subject=r["subject"]) for r in rows]
    folder = resolve_data_dir(data_dir) / "mmlu" / split
    items = []
    for path in sorted(folder.glob(f"*_{split}.csv")):
        subject = path.name[: -len(f"_{split}.csv")]
        if subjects is not None and subject not in subjects:
            continue
        with path.open(newline="", encoding="utf-8") as fh:
            for row in csv.reader(fh):
                question, *choices, letter = row
                items.append(ChoiceItem(question, tuple(choices), "ABCD".index(letter.strip()), subject=subject))
    return items


def load_commonsenseqa(split: Literal["train", "dev"], data_dir: str | None = None, source: Source = "local") -> list[ChoiceItem]:
    if source == "hub":
        import datasets

        rows = datasets.load_dataset(HUB_DATASETS["commonsenseqa"][0], split={"train": "train", "dev": "validation"}[split])
        return [
            ChoiceItem(r["question"], tuple(r["choices"]["text"]), r["choices"]["label"].index(r["answerKey"]), tuple(r["choices"]["label"]))
            for r in rows
        ]
    rows = _read_json(resolve_data_dir(data_dir) / f"commonsenseqa/{split}_rand_split.jsonl")
    items = []
    for r in rows:
        choices = r["question"]["choices"]
        labels = tuple(c["label"] for c in choices)
        items.append(ChoiceItem(r["question"]["stem"], tuple(c["text"] for c in choices), labels.index(r["answerKey"]), labels))
    return items


def load_general_text(data_dir: str | None = None, source: Source = "local") -> list[str]:
    """Held-out general text for perplexity: MMLU *validation* questions with their correct answer.

    No other split of this data is used for training or for the MMLU score (which uses dev + test).
    """
    return [f"{it.question.strip()} {it.choices[it.answer].strip()}" for it in load_mmlu("val", data_dir, source)]


# --- the transfer sets of Figure 4 and Table 4 ------------------------------------------------------


def load_svamp_all(data_dir: str | None = None) -> list[MathItem]:
    """All 1,000 SVAMP problems (``SVAMP.json``; Figure 4 uses them all, Table 1 only the held-out part)."""
    rows = _read_json(resolve_data_dir(data_dir) / "svamp" / "SVAMP.json")
    return [MathItem(f"{r['Body'].strip()} {r['Question'].strip()}", float(r["Answer"]), None, "svamp", str(r["ID"]))
            for r in rows]


def load_word_problems(name: str, data_dir: str | None = None) -> list[MathItem]:
    """A word-problem set by name: ``svamp`` (all of it), ``gsm8k`` (test), ``addsub``, ``singleeq`` (test)."""
    name = name.lower()
    if name == "svamp":
        return load_svamp_all(data_dir)
    if name in MATH_TASKS:
        return load_math_test(name, data_dir)
    raise ValueError(f"Unknown word-problem set {name!r}; accepted: svamp, gsm8k, addsub, singleeq")


def sample_mmlu(subjects: tuple[str, ...] = MMLU_HUMANITIES, n: int = 40, seed: int = 0, data_dir: str | None = None,
                split: Literal["dev", "val", "test"] = "test") -> list[ChoiceItem]:
    """A seeded sample of ``n`` questions from ``subjects`` (default: MMLU humanities, as the paper); 0: all."""
    items = load_mmlu(split, data_dir, subjects=subjects)
    random.Random(seed).shuffle(items)
    return items[:n] if n else items
