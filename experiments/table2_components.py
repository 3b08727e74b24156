"""Tables 2 and 5: how many components to tune. Top-8/16/32/48/64 heads (scaled to the model's head
count) and top-32-equivalent heads + top-1/2/3 MLPs, each trained from the base model and scored on
the math signal (GSM8K in the paper; here also held-out arithmetic) and MMLU, with train speed.

Writes ``results/table2/``: ``data.json``, ``table.md``, ``config.json``, ``rows/``.

    python experiments/table2_components.py [--heads-from results/identify/addition] [--full-size]
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import _common as C
import _sft as S
import torch

from circuits.config import count, option
from circuits.sft.compare import SFTComparison

PAPER_HEAD_COUNTS = (8, 16, 32, 48, 64)  # of LLaMA2-7B's 1024 heads
PAPER_TABLE2 = """## Paper (LLaMA2-7B, Tables 2 and 5)

| LLaMA2-7B setting | Train speed | Tuned params | GSM8K | MMLU |
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
class Config(S.SFTTableConfig):
    # Nine rows, eight of them trained: the CPU default trains each on 24 examples (3 steps of 8) and scores the
    # math signal on held-out arithmetic (GSM8K is 0% at this model size and n; `--eval-tasks gsm8k,arithmetic,mmlu`
    # or --full-size adds it), so the table takes under 10 minutes on 2 cores (docs/speed.md).
    limit_per_source: int | None = count(8)
    batch_size: int = count(8)
    eval_tasks: tuple[str, ...] = option(("arithmetic", "mmlu"))
    mlp_counts: tuple[int, ...] = count((1, 2, 3), nonempty=True, unique=True, help="MLPs added to the top-32-equivalent heads")
    out: str = option("results/table2")

    FULL_SIZE = {**S.SFTTableConfig.FULL_SIZE, "eval_tasks": ("gsm8k", "arithmetic", "mmlu")}

    def __post_init__(self) -> None:
        super().__post_init__()
        if any(m < 1 for m in self.mlp_counts):
            raise ValueError("mlp_counts must be >= 1")


def main(config: Config, model=None) -> SFTComparison:
    if config.threads:
        torch.set_num_threads(config.threads)
    model = model or C.model_for(config.model)
    total = model.cfg.n_layers * model.cfg.n_heads
    counts = scaled_counts(total)
    ranked, identify = S.ranked_heads(config, max(counts), model)
    k32 = counts[PAPER_HEAD_COUNTS.index(32)] if len(counts) == len(PAPER_HEAD_COUNTS) else counts[len(counts) // 2]
    variants = [("base", None)] + [(f"top-{k} heads", config.finetune_config(heads=tuple(ranked[:k]))) for k in counts]
    for m in config.mlp_counts:
        variants.append((f"top-{k32} heads + top-{m} MLP{'s' if m > 1 else ''}",
                         config.finetune_config(heads=tuple(ranked[:k32]), mlps=tuple(c.layer for c in identify.scores(None).top(m, "mlps", first=identify.key_rule)))))
    return S.run_table(config, model, variants, ranked, f"Paper counts scaled by {total}/1024.\n\n{PAPER_TABLE2}",
                       {"head_counts": counts})


def plot(result: SFTComparison, out: Path) -> Path:
    return Path(out) / "table.md"


if __name__ == "__main__":
    config = S.parse(Config, None, __doc__)
    plot(main(config), Path(config.out))
