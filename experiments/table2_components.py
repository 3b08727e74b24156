"""Tables 2 and 5: how many components to tune. Top-8/16/32/48/64 heads (scaled to the model's head
count) and top-32-equivalent heads + top-1/2/3 MLPs, each trained from the base model and scored on
the math signal (GSM8K in the paper; here also held-out arithmetic) and MMLU, with train speed.

Writes ``results/table2/``: ``config.json``, ``data.json``, ``table.md``.

    python experiments/table2_components.py [--heads-from results/identify/addition] [--full-size]
"""

from __future__ import annotations

import argparse
import dataclasses
from dataclasses import dataclass
from pathlib import Path

import torch

from circuits import finetune as ft
from circuits import head_masks as hm
from circuits.models import load_model
from experiments.table1_precise_sft import Table1Config, argument_parser, config_from_args, markdown_table, resolve_heads, run_rows

PAPER_HEAD_COUNTS = (8, 16, 32, 48, 64)  # of LLaMA2-7B's 1024 heads
PAPER_TABLE2 = """| LLaMA2-7B setting | Train speed | Tuned params | GSM8K | MMLU |
| --- | --- | --- | --- | --- |
| top-8 heads | 58 sam./s | 0.017B | 25.4 | 45.1 |
| top-16 heads | 52 sam./s | 0.033B | 26.5 | 45.8 |
| top-32 heads | 50 sam./s | 0.067B | 27.4 | 46.4 |
| top-48 heads | 46 sam./s | 0.101B | 27.4 | 46.4 |
| top-64 heads | 40 sam./s | 0.134B | 27.3 | 45.5 |
| top-32 heads + top-1 MLP | 44 sam./s | 0.202B | 27.5 | 46.0 |
| top-32 heads + top-2 MLPs | 38 sam./s | 0.338B | 27.7 | 45.7 |
| top-32 heads + top-3 MLPs | 31 sam./s | 0.473B | 28.0 | 45.2 |"""


def scaled_counts(n_heads_total: int) -> list[int]:
    """The paper's head counts as the same fraction of this model's heads (at least 1, no repeats)."""
    counts = []
    for k in PAPER_HEAD_COUNTS:
        c = max(1, round(k / 1024 * n_heads_total))
        if c not in counts:
            counts.append(c)
    return counts


@dataclass(frozen=True)
class Table2Config:
    base: Table1Config = Table1Config(eval_tasks=("gsm8k", "arithmetic", "mmlu"), out="results/table2")
    mlp_counts: tuple[int, ...] = (1, 2, 3)

    def __post_init__(self) -> None:
        if any(m < 1 for m in self.mlp_counts):
            raise ValueError("mlp_counts must be >= 1")


def main(config: Table2Config) -> dict:
    base = config.base
    if base.threads:
        torch.set_num_threads(base.threads)
    out = Path(base.out)
    out.mkdir(parents=True, exist_ok=True)
    ft.write_json_atomic(dataclasses.asdict(config), out / "config.json")
    model = load_model(base.model)
    total = model.cfg.n_layers * model.cfg.n_heads
    del model
    counts = scaled_counts(total)
    ranked, source = resolve_heads(base, max(counts))
    k32 = counts[PAPER_HEAD_COUNTS.index(32)] if len(counts) == len(PAPER_HEAD_COUNTS) else counts[len(counts) // 2]
    mlp_source = base.heads_from or source
    variants = [(f"top-{k} heads", {"heads": tuple(ranked[:k])}) for k in counts]
    for m in config.mlp_counts:
        variants.append((f"top-{k32} heads + top-{m} MLP{'s' if m > 1 else ''}",
                         {"heads": tuple(ranked[:k32]), "mlps": tuple(hm.mlps_from_identify(mlp_source, m))}))
    rows = run_rows(base, variants, out)
    data = {"heads": [list(h) for h in ranked], "heads_source": source, "head_counts": counts, "rows": rows}
    ft.write_json_atomic(data, out / "data.json")
    table = markdown_table(rows, base.eval_tasks)
    (out / "table.md").write_text(
        f"## Measured ({base.model}, {total} heads; paper counts scaled by {total}/1024)\n\n{table}\n\n"
        f"## Paper (LLaMA2-7B, Tables 2 and 5)\n\n{PAPER_TABLE2}\n")
    print(table)
    return data


def parse_args(argv=None) -> Table2Config:
    p = argument_parser(__doc__, "results/table2")
    p.add_argument("--mlp-counts", default="1,2,3")
    a = p.parse_args(argv)
    base = config_from_args(a, eval_tasks=("gsm8k", "arithmetic", "mmlu"))
    return Table2Config(base=base, mlp_counts=tuple(int(m) for m in a.mlp_counts.split(",") if m))


if __name__ == "__main__":
    main(parse_args())
