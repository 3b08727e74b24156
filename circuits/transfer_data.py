"""Readers for the benchmark files used by the transfer checks (Figure 4, Appendix E, MMLU).

The data stay outside the repository: ``data_dir`` (or ``$CIRCUITS_DATA_DIR``, default
``../shared/data`` next to the repository root). Each reader returns plain ``(question, answer)``
records; prompts are made in :mod:`circuits.transfer`.
"""

from __future__ import annotations

import csv
import json
import os
import random
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
MMLU_HUMANITIES = (
    "formal_logic", "high_school_european_history", "high_school_us_history", "high_school_world_history",
    "international_law", "jurisprudence", "logical_fallacies", "moral_disputes", "moral_scenarios",
    "philosophy", "prehistory", "professional_law", "world_religions",
)


def data_dir(path: str | os.PathLike | None = None) -> Path:
    d = Path(path or os.environ.get("CIRCUITS_DATA_DIR") or REPO_ROOT.parent / "shared" / "data")
    if not d.is_dir():
        raise FileNotFoundError(f"Benchmark data folder {d} not found; pass --data-dir or set CIRCUITS_DATA_DIR.")
    return d


@dataclass(frozen=True)
class WordProblem:
    id: str
    question: str
    answer: str  # the final number as text ("43", "2.5")


def _number_text(x: float | str) -> str:
    v = float(str(x).replace(",", ""))
    return str(int(v)) if v == int(v) else str(v)


def read_svamp(path: str | os.PathLike | None = None) -> list[WordProblem]:
    rows = json.loads((data_dir(path) / "svamp" / "SVAMP.json").read_text())
    return [WordProblem(r["ID"], f"{r['Body'].strip()} {r['Question'].strip()}", _number_text(r["Answer"])) for r in rows]


def read_gsm8k(path: str | os.PathLike | None = None, split: str = "test") -> list[WordProblem]:
    out = []
    for i, line in enumerate((data_dir(path) / "gsm8k" / f"{split}.jsonl").read_text().splitlines()):
        r = json.loads(line)
        out.append(WordProblem(f"gsm8k-{split}-{i}", r["question"].strip(), _number_text(r["answer"].split("####")[-1].strip())))
    return out


def read_llm_adapters(name: str, path: str | os.PathLike | None = None) -> list[WordProblem]:
    """AddSub / SingleEq (``test.json`` with ``instruction`` and ``answer``)."""
    rows = json.loads((data_dir(path) / name / "test.json").read_text())
    return [WordProblem(f"{name}-{i}", r["instruction"].strip(), _number_text(r["answer"])) for i, r in enumerate(rows)]


def read_word_problems(name: str, path: str | os.PathLike | None = None) -> list[WordProblem]:
    name = name.lower()
    if name == "svamp":
        return read_svamp(path)
    if name == "gsm8k":
        return read_gsm8k(path)
    if name in ("addsub", "singleeq"):
        return read_llm_adapters(name, path)
    raise ValueError(f"Unknown word-problem set {name!r}; accepted: svamp, gsm8k, addsub, singleeq")


@dataclass(frozen=True)
class MultipleChoice:
    subject: str
    question: str
    choices: tuple[str, str, str, str]
    answer: str  # "A".."D"


def read_mmlu(
    subjects: tuple[str, ...] = MMLU_HUMANITIES, n: int = 40, seed: int = 0, path: str | os.PathLike | None = None, split: str = "test"
) -> list[MultipleChoice]:
    """A seeded sample of ``n`` questions from ``subjects`` (default: MMLU humanities, as the paper)."""
    items = []
    for s in subjects:
        with open(data_dir(path) / "mmlu" / split / f"{s}_{split}.csv", newline="", encoding="utf-8") as f:
            for row in csv.reader(f):
                items.append(MultipleChoice(s, row[0], tuple(row[1:5]), row[5].strip()))  # type: ignore[arg-type]
    random.Random(seed).shuffle(items)
    return items[:n] if n else items
