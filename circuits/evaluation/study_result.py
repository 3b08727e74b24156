"""The Precise SFT study's result (``circuits sft-study``): every run's per-item scores, the lr sweep, the timings,
and the tables drawn from them (95% intervals over seeds and items; each arm's paired difference from Precise SFT,
with Holm's correction over the arms of a task)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from circuits.io import read_json, write_json, write_text
from circuits.results import Result, ResultError, check_fields
from circuits.evaluation.study_config import StudyConfig

REFERENCE = "precise"  # the arm every other is compared with (the paper's)


@dataclass(eq=False, repr=False)
class SFTStudyResult(Result[StudyConfig]):
    """``variants``: one per arm and draw (``name``, ``arm``, ``heads``, ``mlps``, ``lr``, ``tuned_parameters``,
    ``lora_rank``); ``base``: the untrained model's per-item scores; ``runs``: per variant and seed, the training
    numbers and the test items' ``correct`` and ``logp``; ``sweep``: per variant and lr, the validation scores;
    ``items``: the test items' tasks, in the order of every run's scores; ``timing``: seconds spent training and
    evaluating (the sweep included); ``words``: per test item, a perplexity document's words (else 0; empty in a
    study saved before perplexity was scored).

    A perplexity document's ``correct`` is 0 (not scored) and its ``logp`` its log-likelihood; the tables give word
    perplexity (``exp`` of the total negative log-likelihood over the total words, lm-eval's definition) with its
    interval, and differences between arms as the percentage change of perplexity (the bootstrap runs on the log)."""

    kind = "sft-study"
    in_place = True  # its folder also holds the finished runs (runs/) a rerun resumes from
    work = "runs"

    variants: list[dict[str, Any]]
    runs: list[dict[str, Any]]
    sweep: list[dict[str, Any]]
    items: list[str]
    base: dict[str, list[float]] = field(default_factory=dict)
    timing: dict[str, float] = field(default_factory=dict)
    n_val: int = 0
    words: list[int] = field(default_factory=list)

    def to_json(self) -> dict:
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "config"}

    def _write(self, folder: Path) -> None:
        write_json(folder / "data.json", self.to_json())
        write_text(folder / "table.md", self.markdown() + "\n")

    @classmethod
    def _read(cls, folder: Path, config: StudyConfig) -> SFTStudyResult:
        path = folder / "data.json"
        fields = check_fields(cls, read_json(path), path)
        for name, numeric in _NUMERIC.items():
            for i, row in enumerate(fields.get(name, [])):
                _check_row(row, numeric, f"{path}: field '{name}[{i}]")
        if fields.get("words") and len(fields["words"]) != len(fields.get("items", [])):
            raise ResultError(f"{path}: field 'words' holds {len(fields['words'])} counts for "
                              f"{len(fields.get('items', []))} items")
        return cls(config=config, **fields)

    # --- the tables -------------------------------------------------------------------------------------------

    def scores(self, variant: str, what: str = "correct") -> Any:
        """``[seed, item]`` scores of ``variant``'s runs (a tensor)."""
        import torch

        rows = [r[what] for r in self.runs if r["variant"] == variant]
        if not rows:
            raise KeyError(f"no runs of {variant!r}; variants: {', '.join(v['name'] for v in self.variants)}")
        return torch.tensor(rows, dtype=torch.float64)

    def perplexity_tasks(self) -> set[str]:
        """Tasks scored by perplexity (their items have words)."""
        return {t for t, w in zip(self.items, self.words) if w}

    def cell(self, c: dict[str, Any], task: str) -> str:
        """A cell of :meth:`table` for ``task`` as the tables print it (:func:`cell_text`; the report reads it here)."""
        return cell_text(c, task in self.perplexity_tasks())

    def _measure(self, scores: dict[str, Any] | Any, task: str, idx: list[int]) -> tuple[Any, Any]:
        """What a task's interval is over: accuracy per item (no weights), or for a perplexity task each document's
        negative log-likelihood per word with its words as weights (their weighted mean: the log of word perplexity).
        ``scores``: a variant's name, or the base model's per-item scores."""
        import torch

        if task not in self.perplexity_tasks():
            x = self.scores(scores) if isinstance(scores, str) else torch.tensor([scores["correct"]], dtype=torch.float64)
            return x[:, idx], None
        w = torch.tensor([float(self.words[i]) for i in idx], dtype=torch.float64)
        x = self.scores(scores, "logp") if isinstance(scores, str) else torch.tensor([scores["logp"]],
                                                                                   dtype=torch.float64)
        return -x[:, idx] / w, w

    def tasks(self) -> dict[str, list[int]]:
        from circuits.evaluation.study_items import tasks_of

        return tasks_of([_Task(t) for t in self.items])

    def table(self) -> list[dict[str, Any]]:
        """Per variant and task: mean accuracy with its 95% interval over seeds and items, and (except for the
        reference) the paired difference from Precise SFT with its interval, p and whether Holm's correction over the
        variants of the task keeps it apart from 0."""

        from circuits.patching.core.uncertainty import holm
        from circuits.evaluation.study_items import difference, interval

        tasks = self.tasks()
        names = [v["name"] for v in self.variants]
        ref = next((v["name"] for v in self.variants if v["arm"] == REFERENCE), None)
        rows = []
        n_boot = self.config.n_boot
        for name in names:
            row: dict[str, Any] = {"name": name, "n_runs": len([r for r in self.runs if r["variant"] == name]),
                                   "tasks": {}}
            for task, idx in tasks.items():
                x, w = self._measure(name, task, idx)
                cell: dict[str, Any] = {"n": len(idx), "measure": "accuracy" if w is None else "log_perplexity"}
                cell["mean"], cell["low"], cell["high"] = interval(x, n_boot, weights=w)
                if self.base:
                    b, _ = self._measure(self.base, task, idx)
                    cell["base"] = float(b.mean()) if w is None else float((b * w).sum() / w.sum())
                    d, lo, hi, p = difference(x, b, n_boot, weights=w)
                    cell["vs_base"] = {"diff": d, "low": lo, "high": hi, "p": p}
                if ref is not None and name != ref:
                    d, lo, hi, p = difference(x, self._measure(ref, task, idx)[0], n_boot, weights=w)
                    cell["vs_precise"] = {"diff": d, "low": lo, "high": hi, "p": p}
                row["tasks"][task] = cell
            rows.append(row)
        for task in tasks:
            compared = [r for r in rows if "vs_precise" in r["tasks"][task]]
            apart, _ = holm([r["tasks"][task]["vs_precise"]["p"] for r in compared])
            for r, a in zip(compared, apart):
                r["tasks"][task]["vs_precise"]["apart_holm"] = a
            tuned = [r for r in rows if "vs_base" in r["tasks"][task]]
            apart, _ = holm([r["tasks"][task]["vs_base"]["p"] for r in tuned])
            for r, a in zip(tuned, apart):
                r["tasks"][task]["vs_base"]["apart_holm"] = a
        return rows

    def markdown(self) -> str:
        rows = self.table()
        tasks = list(self.tasks())
        v = {x["name"]: x for x in self.variants}
        ppl = self.perplexity_tasks()
        note = (" Perplexity: word perplexity (lower is better) with its interval; its differences are the % change of "
                "perplexity." if ppl else "")
        lines = [f"Accuracy % (95% interval over {len(self.config.seeds)} seeds and the items); in brackets, the paired "
                 "difference from Precise SFT (key heads) with its interval, * where Holm's correction over the arms "
                 "keeps it apart from 0." + note, "",
                 "| arm | lr | tuned params | " + " | ".join(f"{t} (n={len(i)})" for t, i in self.tasks().items()) + " |",
                 "| " + " | ".join(["---"] * (len(tasks) + 3)) + " |"]
        if self.base:
            first = rows[0]["tasks"] if rows else {}
            lines.append("| base | - | - | " + " | ".join(_value(first[t]["base"], t in ppl) for t in tasks) + " |")
        for row in rows:
            cells = [cell_text(row["tasks"][t], t in ppl) for t in tasks]
            var = v[row["name"]]
            lines.append(f"| {row['name']} | {var['lr']:g} | {var['tuned_parameters'] / 1e6:.3f}M | " + " | ".join(cells)
                         + " |")
        if self.base:
            lines += ["", "Each arm's paired difference from the base model on the same items (percentage points"
                      + ("; perplexity: % change" if ppl else "") + ", 95% interval over the arm's seeds and the items), "
                      "* where Holm's correction over the arms keeps it apart from 0.", "",
                      "| arm | " + " | ".join(tasks) + " |", "| " + " | ".join(["---"] * (len(tasks) + 1)) + " |"]
            for row in rows:
                cells = [_change(row["tasks"][t]["vs_base"], t in ppl) for t in tasks]
                lines.append(f"| {row['name']} | " + " | ".join(cells) + " |")
        if len(self.config.seeds) < 3:
            lines += ["", f"Only {len(self.config.seeds)} seed(s): a smoke run, not the study (it needs 3 or more)."]
        return "\n".join(lines)

    def time_line(self) -> str:
        """Where the run's time went (measured, so printed and kept in data.json's ``timing``, never in table.md:
        a resumed run's table equals an uninterrupted one's)."""
        lines: list[str] = []
        t = self.timing
        workers = t.get("workers", 1)
        if t and workers > 1:  # training and scoring ran in worker processes: their seconds add up past the wall
            lines += [f"Wall time {t.get('total', 0):.0f} s with {workers:.0f} worker processes at once: training "
                      f"{t.get('train', 0):.0f} s and evaluation {t.get('eval', 0):.0f} s summed over the workers (wall "
                      f"seconds of each; CPU {t.get('cpu_train', 0):.0f} s and {t.get('cpu_eval', 0):.0f} s)"
                      + (f"; {t['reused_runs']:.0f} runs read back" if t.get("reused_runs") else "") + "."]
        elif t:
            lines += [f"Wall time {t.get('total', 0):.0f} s: training {t.get('train', 0):.0f} s, evaluation "
                          f"{t.get('eval', 0):.0f} s, loading and merging {t.get('other', 0):.0f} s (the lr sweep: "
                          f"{t.get('sweep', 0):.0f} s of it)" + (f"; {t['reused_runs']:.0f} runs reused from an earlier "
                                                                   "run of this study" if t.get("reused_runs") else "")
                          + "."]
            if "cpu_total" in t:
                lines[-1] += (f" CPU time of this process {t['cpu_total']:.0f} s: training {t['cpu_train']:.0f} s "
                              f"(LoRA's merging and loading included), evaluation {t['cpu_eval']:.0f} s.")
        if lines and "trained_runs" in t:
            lines[-1] += (f" Runs trained: {t['trained_runs']:.0f}; put back from their saved weights to score: "
                          f"{t.get('loaded_runs', 0):.0f}.")
        return "\n".join(lines)


def cell_text(c: dict[str, Any], perplexity: bool) -> str:
    """A cell of :meth:`SFTStudyResult.table` as its tables print it: the value with its interval, and in brackets
    the paired difference from Precise SFT where there is one (accuracy in %; perplexity as itself, its difference as
    the % change)."""
    text = f"{_value(c['mean'], perplexity)} [{_value(c['low'], perplexity)}, {_value(c['high'], perplexity)}]"
    return text + (f" ({_change(c['vs_precise'], perplexity)})" if "vs_precise" in c else "")


def _value(x: float, perplexity: bool) -> str:
    """An accuracy in %, or (``perplexity``) a log word perplexity as the perplexity."""
    import math

    return f"{math.exp(x):.2f}" if perplexity else f"{100 * x:.1f}"


def _change(d: dict[str, Any], perplexity: bool) -> str:
    """A paired difference with its interval: in points of accuracy, or (``perplexity``, a difference of logs) as the
    % change of perplexity; * where Holm's correction keeps it apart from 0."""
    import math

    f = (lambda x: 100 * (math.exp(x) - 1)) if perplexity else (lambda x: 100 * x)
    unit = "%" if perplexity else ""
    return (f"{f(d['diff']):+.1f}{unit} [{f(d['low']):+.1f}, {f(d['high']):+.1f}]"
            f"{'*' if d.get('apart_holm') else ''}")


@dataclass(frozen=True)
class _Task:
    task: str


# The numbers (or lists of numbers; None where marked) of each row of the loosely declared list fields.
_NUMERIC = {"variants": {"tuned_parameters": False, "lr": False, "lora_rank": True, "draw": True, "sweep_seconds": True,
                         "target_parameters": True, "heads": False, "mlps": False},
            "runs": {"seed": False, "lr": False, "correct": False, "logp": False, "tuned_parameters": False,
                     "train_seconds": False, "steps": False, "samples": False, "losses": False},
            "sweep": {"lr": False, "seed": False, "val_logp": False, "val_acc": False, "final_loss": False}}


def _check_row(row: Any, numeric: dict[str, bool], where: str) -> None:
    """Every named number of ``row`` a number (or a list, or list of pairs, of them; None where allowed), else one
    :class:`ResultError` line naming the file and the field."""
    if not isinstance(row, dict):
        raise ResultError(f"{where}' is a {type(row).__name__}, not an object")

    def number(x: Any) -> bool:
        return isinstance(x, (int, float)) and not isinstance(x, bool)

    for key, nullable in numeric.items():
        if key not in row:
            if nullable:
                continue
            raise ResultError(f"{where}.{key}' is missing")
        v = row[key]
        flat = v if isinstance(v, list) else [v]
        flat = [y for x in flat for y in (x if isinstance(x, list) else [x])]
        if not all(number(x) or (nullable and x is None) for x in flat):
            raise ResultError(f"{where}.{key}' holds {str(v)[:40]!r}, not numbers")
