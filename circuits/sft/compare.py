"""Tables 1, 2 and 5: fine-tune several variants from the same base model and evaluate each (Section 5.3).

:func:`run_variants` evaluates the base model, then for each variant restores the base weights, trains
(Precise SFT of some heads and MLPs, or full SFT) and evaluates. Each finished row is saved in
``out/rows/`` with the config that made it, so a rerun of the same command skips it and a changed config
recomputes it. :class:`SFTComparison` is the result: the rows, the heads tuned and the markdown table.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from circuits.models.backend import Model

from circuits.data.benchmarks import primary_metric
from circuits.sft.data import TokenizedExample
from circuits.sft.train import FinetuneConfig, finetune
from circuits.config import Config, count, option
from circuits.io import read_json, to_jsonable, write_json, write_text
from circuits.results import Result
from circuits.sft.plan import DEFAULT_KV_POLICY
from circuits.types import Head

Evaluate = Callable[[Model], dict[str, Any]]  # model -> {"tasks": {task: metrics}, ...}


def _row_path(out: Path, name: str) -> Path:
    return out / "rows" / (re.sub(r"[^A-Za-z0-9]+", "_", name).strip("_") + ".json")


def run_variants(
    model: Model,
    examples: list[TokenizedExample],
    variants: Sequence[tuple[str, FinetuneConfig | None]],
    evaluate: Evaluate,
    out: str | Path,
    config: Any,
    progress: bool = True,
) -> list[dict[str, Any]]:
    """Rows of the table: evaluate each variant (``None``: the base model) trained from the base weights.

    ``config`` (what makes the whole table) is saved with every row; a row saved with the same config and
    variant is reused instead of recomputed.
    """
    out = Path(out)
    base_state = {n: p.detach().clone() for n, p in model.named_parameters()}
    saved_config = to_jsonable(config)
    rows = []
    for name, variant in variants:
        variant_json = variant.to_json() if variant is not None else {}
        path = _row_path(out, name)
        if path.is_file():
            saved = read_json(path)
            if saved.get("config") == saved_config and saved.get("variant") == variant_json:
                print(f"[table] {name}: finished earlier ({path})", flush=True)
                rows.append(saved["row"])
                continue
        with torch.no_grad():
            for n, p in model.named_parameters():
                p.copy_(base_state[n])
        t0 = time.perf_counter()
        row: dict[str, Any] = {"name": name}
        if variant is not None:
            result = finetune(model, examples, variant, out / "runs" / name, progress=progress)
            row.update({"train": {k: v for k, v in result.to_json().items() if k != "plan"},
                        "heads": [list(h) for h in variant.heads], "mlps": list(variant.mlps)})
        row.update(evaluate(model))
        row["seconds"] = time.perf_counter() - t0
        write_json(path, {"config": saved_config, "variant": variant_json, "row": row})
        rows.append(row)
        print(f"[table] {name}: {'trained and ' if variant is not None else ''}evaluated in {row['seconds']:.0f}s", flush=True)
    with torch.no_grad():
        for n, p in model.named_parameters():
            p.copy_(base_state[n])
    base = rows[0]["tasks"]
    for row in rows[1:]:
        row["delta"] = {t: row["tasks"][t][primary_metric(t)] - base[t][primary_metric(t)] for t in base}
    return rows


def _cell(row: dict, task: str) -> str:
    metric = primary_metric(task)
    value = row["tasks"][task].get(metric)
    if value is None:
        return "-"
    shown = f"{value:.2f}" if metric != "acc" else f"{100 * value:.1f}"
    if "delta" in row and task in row["delta"]:
        d = row["delta"][task]
        shown += f" ({'+' if d >= 0 else ''}{d if metric != 'acc' else 100 * d:.1f})"
    return shown


def markdown_table(rows: list[dict], tasks: Sequence[str]) -> str:
    """The table as markdown: accuracy % (perplexity as is), change from the base in brackets."""
    head = "| model | train speed | tuned params | " + " | ".join(
        f"{t} ({'word ppl' if t == 'perplexity' else 'acc %'}, n={rows[0]['tasks'][t]['n']})" for t in tasks) + " |"
    lines = [head, "| " + " | ".join(["---"] * (len(tasks) + 3)) + " |"]
    for row in rows:
        speed = f"{row['train']['samples_per_s']:.2f} sam./s" if "train" in row else "-"
        params = f"{row['train']['tuned_parameters'] / 1e6:.2f}M" if "train" in row else "-"
        lines.append(f"| {row['name']} | {speed} | {params} | " + " | ".join(_cell(row, t) for t in tasks) + " |")
    if all("arithmetic_by_form" in r for r in rows):
        forms = sorted(rows[0]["arithmetic_by_form"])
        lines += ["", "Held-out arithmetic by form (acc %):", "",
                  "| model | " + " | ".join(forms) + " |", "| " + " | ".join(["---"] * (len(forms) + 1)) + " |"]
        for row in rows:
            lines.append(f"| {row['name']} | " + " | ".join(f"{100 * row['arithmetic_by_form'][f]:.1f}" for f in forms) + " |")
    return "\n".join(lines)


@dataclass(frozen=True)
class TableConfig(Config):
    """What decides a fine-tuning table (Tables 1, 2, 5): the model, the heads tuned, the training data and run,
    the benchmarks (a table script's config adds its evaluation limits, threads and output folder)."""

    model: str = option("smollm2")
    heads_from: str = option("results/identify/addition")
    top_k: int = count(8)
    kv_policy: str = option(DEFAULT_KV_POLICY)
    sources: tuple[str, ...] = option(("gsm8k", "adapters", "arithmetic"))
    n_arithmetic: int = count(128)
    limit_per_source: int | None = count(16)
    lr: float = option(1e-4)
    batch_size: int = count(16)
    epochs: int = count(1)
    eval_tasks: tuple[str, ...] = option(())


@dataclass(eq=False, repr=False)
class SFTComparison(Result[TableConfig]):
    """Tables 1, 2, 5: base vs fine-tuned variants on math and generic benchmarks, with train speed."""

    kind = "sft_table"
    in_place = True  # its folder also holds the finished rows and training runs a rerun resumes from

    rows: list[dict[str, Any]]
    heads: list[Head] = field(default_factory=list)
    heads_source: str = ""
    extra: dict[str, Any] = field(default_factory=dict)  # e.g. Table 2's head counts
    notes: str = ""  # markdown appended to table.md (e.g. the paper's table)

    @property
    def tasks(self) -> list[str]:
        return list(self.rows[0]["tasks"]) if self.rows else []

    def markdown(self) -> str:
        return markdown_table(self.rows, self.tasks)

    def _write(self, folder: Path) -> None:
        write_json(folder / "data.json", {"heads": [list(h) for h in self.heads], "heads_source": self.heads_source,
                                          "rows": self.rows, **self.extra, "notes": self.notes})
        write_text(folder / "table.md", f"## Measured\n\n{self.markdown()}\n\n{self.notes}".rstrip() + "\n")

    @classmethod
    def _read(cls, folder: Path, config: TableConfig) -> SFTComparison:
        d = dict(read_json(folder / "data.json"))
        rows, heads, source = d.pop("rows"), d.pop("heads", []), d.pop("heads_source", "")
        notes = d.pop("notes", "")
        return cls(config, rows, [Head(*h[:2]) for h in heads], source, d, notes)
