"""Table 1: base vs full SFT vs Precise SFT (top-k heads), on math and generic benchmarks (Section 5.3).

Writes ``results/table1/``: ``config.json``, ``data.json`` (per-model metrics, train speed measured in
this run, tuned parameters, deltas vs base), ``table.md``. The default size runs on a 2-core CPU in
about an hour; ``--full-size`` uses the paper's settings (2 epochs, batch 128, lr 2e-5, all data, full
test sets; a GPU job).

    python experiments/table1_precise_sft.py [--heads-from results/identify/addition] [--full-size]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from circuits import finetune as ft
from circuits import head_masks as hm
from circuits.evaluation import ALL_TASKS, PRIMARY_METRIC, EvalConfig, evaluate_model
from circuits.models import load_model
from circuits.sft_data import build_training_set, tokenize_examples

PAPER_TABLE1 = """| LLaMA2-7B | Train speed | Tuned params | GSM8K | AddSub | SingleEq | SVAMP | MMLU |
| --- | --- | --- | --- | --- | --- | --- | --- |
| base | - | - | 14.6 | 30.5 | 65.4 | 34.7 | 46.0 |
| + Full SFT | 15 sam./s | 6.7B | 24.6 (+10.0) | 53.7 (+23.2) | 68.2 (+2.8) | 50.3 (+15.6) | 40.5 (-5.5) |
| + Precise SFT (32 heads) | 50 sam./s | 0.07B | 27.4 (+12.8) | 50.6 (+20.1) | 69.7 (+4.3) | 55.8 (+21.1) | 46.4 (+0.4) |"""


@dataclass(frozen=True)
class Table1Config:
    model: str = "smollm2"
    heads_from: str | None = None  # identify result; None: experiments/head_ranking.py stand-in
    # 32 of LLaMA2-7B's 1024 heads is 3.1%; 3.1% of SmolLM2's 270 heads is 8.
    top_k: int = 8
    kv_policy: str = hm.DEFAULT_KV_POLICY
    sources: tuple[str, ...] = ("gsm8k", "adapters", "arithmetic")
    n_arithmetic: int = 128
    limit_per_source: int | None = 64
    # lr 1e-4 instead of 2e-5: the CPU run has ~8 optimizer steps instead of ~150 (same lr for both SFTs).
    lr: float = 1e-4
    batch_size: int = 32
    micro_batch_size: int = 8
    epochs: int = 1
    max_length: int = 160
    eval_tasks: tuple[str, ...] = ALL_TASKS
    eval_limit: int | None = 24
    math_limit: int | None = 8  # word problems generate up to max_gen_toks each: the slow part on CPU
    max_gen_toks: int = 96
    eval_batch_size: int = 8  # documents per forward / generation batch (raise it on a GPU)
    arithmetic_per_form: int = 25
    mmlu_shots: int = 5
    csqa_shots: int = 5
    threads: int = 1
    data_dir: str | None = None
    out: str = "results/table1"

    def __post_init__(self) -> None:
        object.__setattr__(self, "sources", tuple(self.sources))
        object.__setattr__(self, "eval_tasks", tuple(self.eval_tasks))
        if self.top_k < 1:
            raise ValueError("top_k must be >= 1")
        EvalConfig(tasks=self.eval_tasks)  # validates task names

    @classmethod
    def full_size(cls, **kw) -> "Table1Config":
        return cls(**{**dict(top_k=32, n_arithmetic=2000, limit_per_source=None, lr=2e-5, batch_size=128, epochs=2,
                             max_length=384, eval_limit=None, math_limit=None, max_gen_toks=256, arithmetic_per_form=100,
                             threads=0), **kw})


def finetune_config(config: Table1Config, **kw) -> ft.FinetuneConfig:
    return ft.FinetuneConfig(
        model=config.model, kv_policy=config.kv_policy, lr=config.lr, batch_size=config.batch_size,
        micro_batch_size=config.micro_batch_size, epochs=config.epochs, max_length=config.max_length,
        sources=config.sources, n_arithmetic=config.n_arithmetic, limit_per_source=config.limit_per_source,
        data_dir=config.data_dir, save_delta=False, **kw,
    )


def evaluate(model, config: Table1Config) -> dict:
    """Math word problems with their own (smaller) limit, the rest with ``eval_limit``."""
    math = tuple(t for t in config.eval_tasks if t in ("gsm8k", "addsub", "singleeq", "svamp"))
    rest = tuple(t for t in config.eval_tasks if t not in math)
    out: dict = {"tasks": {}}
    for tasks, limit in ((math, config.math_limit), (rest, config.eval_limit)):
        if not tasks:
            continue
        res = evaluate_model(model, EvalConfig(
            tasks=tasks, limit=limit, batch_size=config.eval_batch_size, max_gen_toks=config.max_gen_toks, arithmetic_per_form=config.arithmetic_per_form,
            mmlu_shots=config.mmlu_shots, csqa_shots=config.csqa_shots, data_dir=config.data_dir,
        ))
        out["tasks"].update(res["tasks"])
        out.update({k: v for k, v in res.items() if k != "tasks"})
    return out


def _row_path(out: Path, name: str) -> Path:
    return out / "rows" / (re.sub(r"[^A-Za-z0-9]+", "_", name).strip("_") + ".json")


def _finished_row(out: Path, name: str, config: Table1Config, kw: dict) -> dict | None:
    """A row finished earlier with the same config and variant (so an interrupted table resumes)."""
    path = _row_path(out, name)
    if not path.is_file():
        return None
    saved = json.loads(path.read_text())
    same = saved.get("config") == json.loads(json.dumps(dataclasses.asdict(config))) and saved.get("variant") == _jsonable(kw)
    return saved["row"] if same else None


def _jsonable(kw: dict) -> dict:
    return json.loads(json.dumps(kw))


def run_rows(config: Table1Config, variants: list[tuple[str, dict]], out: Path) -> list[dict]:
    """Evaluate the base model, then train+evaluate each variant from the base weights. Each finished row is
    saved in ``out/rows/`` with its config; a rerun with the same config skips it."""
    model = load_model(config.model)
    base_state = {n: p.detach().clone() for n, p in model.named_parameters()}
    examples = build_training_set(config.sources, config.data_dir, config.n_arithmetic, config.limit_per_source)
    tokenized = tokenize_examples(model.tokenizer, examples, config.max_length)
    rows = []
    for name, kw in [("base", {}), *variants]:
        done = _finished_row(out, name, config, kw)
        if done is not None:
            print(f"[table] {name}: finished earlier ({_row_path(out, name)})", flush=True)
            rows.append(done)
            continue
        with torch.no_grad():
            for n, p in model.named_parameters():
                p.copy_(base_state[n])
        t0 = time.perf_counter()
        row: dict = {"name": name}
        if kw:
            result = ft.finetune(model, tokenized, finetune_config(config, **kw), out / "runs" / name, progress=True)
            row.update({"train": {k: v for k, v in result.to_json().items() if k != "plan"},
                        "heads": [list(h) for h in kw.get("heads", [])], "mlps": list(kw.get("mlps", []))})
        row.update(evaluate(model, config))
        row["seconds"] = time.perf_counter() - t0
        ft.write_json_atomic({"config": dataclasses.asdict(config), "variant": _jsonable(kw), "row": row}, _row_path(out, name))
        rows.append(row)
        print(f"[table] {name}: {'trained and ' if kw else ''}evaluated in {row['seconds']:.0f}s", flush=True)
    base = rows[0]["tasks"]
    for row in rows[1:]:
        row["delta"] = {t: row["tasks"][t][PRIMARY_METRIC[t]] - base[t][PRIMARY_METRIC[t]] for t in base}
    return rows


def _cell(row: dict, task: str) -> str:
    metric = PRIMARY_METRIC[task]
    value = row["tasks"][task][metric]
    shown = f"{value:.2f}" if metric != "acc" else f"{100 * value:.1f}"
    if "delta" in row:
        d = row["delta"][task]
        shown += f" ({'+' if d >= 0 else ''}{d if metric != 'acc' else 100 * d:.1f})"
    return shown


def markdown_table(rows: list[dict], tasks: tuple[str, ...]) -> str:
    head = "| model | train speed | tuned params | " + " | ".join(
        f"{t} ({'word ppl' if t == 'perplexity' else 'acc %'}, n={rows[0]['tasks'][t]['n']})" for t in tasks) + " |"
    lines = [head, "| " + " | ".join(["---"] * (len(tasks) + 3)) + " |"]
    for row in rows:
        speed = f"{row['train']['samples_per_s']:.2f} sam./s" if "train" in row else "-"
        params = f"{row['train']['tuned_parameters'] / 1e6:.2f}M" if "train" in row else "-"
        lines.append(f"| {row['name']} | {speed} | {params} | " + " | ".join(_cell(row, t) for t in tasks) + " |")
    if "arithmetic_by_form" in rows[0]:
        forms = sorted(rows[0]["arithmetic_by_form"])
        lines += ["", "Held-out arithmetic by form (acc %):", "",
                  "| model | " + " | ".join(forms) + " |", "| " + " | ".join(["---"] * (len(forms) + 1)) + " |"]
        for row in rows:
            lines.append(f"| {row['name']} | " + " | ".join(f"{100 * row['arithmetic_by_form'][f]:.1f}" for f in forms) + " |")
    return "\n".join(lines)


def resolve_heads(config: Table1Config, top_k: int) -> tuple[list[tuple[int, int]], str]:
    if config.heads_from:
        return hm.heads_from_identify(config.heads_from, top_k), config.heads_from
    from experiments.head_ranking import ranking_folder

    folder = ranking_folder(load_model(config.model), Path(config.out).parent / "head_ranking")
    return hm.heads_from_identify(folder, top_k), str(folder)


def main(config: Table1Config) -> dict:
    if config.threads:
        torch.set_num_threads(config.threads)
    out = Path(config.out)
    out.mkdir(parents=True, exist_ok=True)
    ft.write_json_atomic(dataclasses.asdict(config), out / "config.json")
    heads, heads_source = resolve_heads(config, config.top_k)
    rows = run_rows(config, [("full SFT", {"full": True}), (f"Precise SFT (top-{config.top_k} heads)", {"heads": tuple(heads)})], out)
    data = {"heads": [list(h) for h in heads], "heads_source": heads_source, "rows": rows}
    ft.write_json_atomic(data, out / "data.json")
    table = markdown_table(rows, config.eval_tasks)
    (out / "table.md").write_text(f"## Measured ({config.model})\n\n{table}\n\n## Paper (LLaMA2-7B)\n\n{PAPER_TABLE1}\n")
    print(table)
    return data


SIZE_ARGS: dict[str, type] = {  # --flag for each Table1Config size field (shared with Table 2)
    "top_k": int, "eval_limit": int, "math_limit": int, "n_arithmetic": int, "limit_per_source": int,
    "lr": float, "batch_size": int, "micro_batch_size": int, "epochs": int, "max_length": int,
    "max_gen_toks": int, "eval_batch_size": int, "threads": int,
}


def argument_parser(doc: str, out: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="smollm2")
    p.add_argument("--heads-from", help="a `circuits identify` task folder (default: the stand-in ranking)")
    p.add_argument("--full-size", action="store_true", help="start from the paper's sizes (a GPU job)")
    p.add_argument("--data-dir", help="benchmark data folder (default: $CIRCUITS_DATA_DIR or ../shared/data)")
    p.add_argument("--out", default=out)
    for name, kind in SIZE_ARGS.items():
        p.add_argument("--" + name.replace("_", "-"), type=kind, help="overrides the size's default")
    return p


def config_from_args(a: argparse.Namespace, **fixed) -> Table1Config:
    kw = {k: getattr(a, k) for k in ("model", "heads_from", "data_dir", "out", *SIZE_ARGS) if getattr(a, k) is not None}
    kw.update(fixed)
    return Table1Config.full_size(**kw) if a.full_size else Table1Config(**kw)


def parse_args(argv=None) -> Table1Config:
    return config_from_args(argument_parser(__doc__, "results/table1").parse_args(argv))


if __name__ == "__main__":
    main(parse_args())
