"""What Tables 1 and 2 share: the size of a run as one config, the heads from an identify result, and the
evaluation (word problems and the 5-shot multiple-choice tasks with their own smaller limits, the rest with
``eval_limit``)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import _common as C

from circuits.config import count, option, redefault
from circuits.evaluation import ALL_TASKS, EvalConfig, evaluate
from circuits.identify import load_identify
from circuits.sft import job as sft_job
from circuits.sft.compare import TableConfig
from circuits.sft.config import DEFAULT_KV_POLICY, TRAIN_SOURCES, FinetuneConfig
from circuits.types import Head

MATH = ("gsm8k", "addsub", "singleeq", "svamp")
CHOICE = ("mmlu", "commonsenseqa")


@dataclass(frozen=True)
class SFTTableConfig(TableConfig):
    """One table run. The defaults run on a 2-core CPU; ``--full-size`` starts from the paper's sizes (Section
    5.3: 2 epochs, batch 128, lr 2e-5, all data, full test sets; a GPU job)."""

    model: str = redefault(FinetuneConfig, "model", "smollm2")
    heads_from: str = option("results/identify/addition",
                             help="a `circuits identify` task folder (made with the default config when missing)")
    # 32 of LLaMA2-7B's 1024 heads is 3.1%; 3.1% of SmolLM2's 270 heads is 8.
    top_k: int = count(8, help="heads tuned (key heads first, then the rest of the ranking)")
    kv_policy: str = redefault(FinetuneConfig, "kv_policy", DEFAULT_KV_POLICY)
    sources: tuple[str, ...] = redefault(FinetuneConfig, "sources", TRAIN_SOURCES)
    n_arithmetic: int = redefault(FinetuneConfig, "n_arithmetic", 128)
    # 16 per source (48 examples, 3 steps of 16) and the evaluation limits below keep Table 1 under 10 minutes on a
    # 2-core CPU (docs/speed.md); `--limit-per-source 64 --batch-size 32 --eval-limit 24 --choice-limit 24
    # --math-limit 8` is the size docs/results_finetune.md's first CPU tables were run at.
    limit_per_source: int | None = redefault(FinetuneConfig, "limit_per_source", 16)
    # lr 1e-4 instead of 2e-5: the CPU run has a few optimizer steps instead of ~150 (same lr for both SFTs).
    lr: float = redefault(FinetuneConfig, "lr", 1e-4)
    batch_size: int = redefault(FinetuneConfig, "batch_size", 16)
    micro_batch_size: int = redefault(FinetuneConfig, "micro_batch_size", 8)
    epochs: int = redefault(FinetuneConfig, "epochs", 1)
    max_length: int = redefault(FinetuneConfig, "max_length", 160)
    eval_tasks: tuple[str, ...] = option(ALL_TASKS)
    eval_limit: int | None = count(24, help="documents of the held-out arithmetic and perplexity")
    choice_limit: int | None = count(8, help="MMLU and CommonsenseQA questions (5-shot prompts of 300-2,300 tokens)")
    math_limit: int | None = count(4, help="word problems generate up to max_gen_toks each: the slow part on CPU")
    max_gen_toks: int = count(96)
    eval_batch_size: int = count(8, help="documents per forward / generation batch (raise it on a GPU)")
    arithmetic_per_form: int = count(25)
    mmlu_shots: int = count(5, minimum=0, maximum=5, help="solved examples before each MMLU question (0: none)")
    csqa_shots: int = count(5, minimum=0, maximum=16, help="solved examples before each CommonsenseQA question (0: none)")
    threads: int = count(0, minimum=0, help="torch threads (0: the cores available to this process, as circuits.threads picks)")
    data_dir: str | None = redefault(FinetuneConfig, "data_dir", None)
    out: str = option("results/table1")

    def __post_init__(self) -> None:
        if self.top_k < 1:
            raise ValueError(f"--top-k must be 1 or more, got {self.top_k}")
        if self.threads < 0:
            raise ValueError(f"--threads must be 0 (the cores available) or more, got {self.threads}")
        for name in ("limit_per_source", "eval_limit", "choice_limit", "math_limit"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"--{name.replace('_', '-')} must be 1 or more (or unset for all), got {value}")
        EvalConfig(tasks=self.eval_tasks)  # validates task names

    FULL_SIZE = dict(top_k=32, n_arithmetic=2000, limit_per_source=None, lr=2e-5, batch_size=128, epochs=2,
                     max_length=384, eval_limit=None, choice_limit=None, math_limit=None, max_gen_toks=256, arithmetic_per_form=100, threads=0)

    @classmethod
    def full_size(cls, **kw: Any):
        return cls(**{**cls.FULL_SIZE, **kw})

    def finetune_config(self, **kw: Any) -> FinetuneConfig:
        return FinetuneConfig(
            model=self.model, kv_policy=self.kv_policy, lr=self.lr, batch_size=self.batch_size,
            micro_batch_size=self.micro_batch_size, epochs=self.epochs, max_length=self.max_length, sources=self.sources,
            n_arithmetic=self.n_arithmetic, limit_per_source=self.limit_per_source, data_dir=self.data_dir,
            save_delta=False, **kw)


def ranked_heads(config: SFTTableConfig, k: int, model: Any) -> tuple[list[Head], Any]:
    """The top ``k`` heads of the identify result in ``config.heads_from``, and the result. A missing folder
    named for a task (``results/identify/addition``) is made as ``circuits identify`` makes it."""
    folder = Path(config.heads_from)
    if not folder.exists():
        C.identify_result(C.KeyHeadConfig(model=config.model, task=folder.name, identify_dir=str(folder.parent)), model=model)
    heads, _ = sft_job.components_from(folder, k)
    return heads, load_identify(folder)


def evaluate_row(model: Any, config: SFTTableConfig) -> dict[str, Any]:
    """Scores of one table row: word problems with ``math_limit``, MMLU and CommonsenseQA with ``choice_limit``,
    the rest with ``eval_limit``."""
    math = tuple(t for t in config.eval_tasks if t in MATH)
    choice = tuple(t for t in config.eval_tasks if t in CHOICE)
    rest = tuple(t for t in config.eval_tasks if t not in math + choice)
    out: dict[str, Any] = {"tasks": {}}
    for tasks, limit in ((math, config.math_limit), (choice, config.choice_limit), (rest, config.eval_limit)):
        if not tasks:
            continue
        res = evaluate(model, EvalConfig(
            tasks=tasks, limit=limit, batch_size=config.eval_batch_size, max_gen_toks=config.max_gen_toks,
            arithmetic_per_form=config.arithmetic_per_form, mmlu_shots=config.mmlu_shots, csqa_shots=config.csqa_shots,
            data_dir=config.data_dir))
        out["tasks"].update(res.tasks)
        if res.arithmetic_by_form:
            out["arithmetic_by_form"] = res.arithmetic_by_form
    return out


def run_table(config: SFTTableConfig, model: Any, variants: list, heads: list[Head], notes: str,
              extra: dict[str, Any] | None = None):
    """Train and evaluate ``variants`` from the base model (rows resume), save and print the table."""
    from circuits.sft.compare import SFTComparison, run_variants

    tokenized = sft_job.training_set(config.finetune_config(full=True), model.tokenizer)  # the data every variant shares
    rows = run_variants(model, tokenized, variants, lambda m: evaluate_row(m, config), config.out, config)
    result = SFTComparison(config, rows, heads, config.heads_from, extra or {}, notes=notes)
    result.save(config.out)
    print(result.markdown())
    return result


def parse(config_cls: type[SFTTableConfig], argv: list[str] | None, doc: str | None) -> SFTTableConfig:
    """A table config from the command line; ``--full-size`` changes the defaults, flags given still win."""
    import argparse

    from circuits.config import add_arguments, from_arguments

    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(parser, config_cls)
    parser.add_argument("--full-size", action="store_true", help="start from the paper's sizes (a GPU job)")
    args = parser.parse_args(argv)
    try:
        return from_arguments(config_cls, args, factory=config_cls.full_size if args.full_size else None)
    except ValueError as e:  # a value the config refuses: one line, exit 2, as the command line does
        parser.error(str(e))
