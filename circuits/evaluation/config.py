"""What decides an evaluation (``circuits evaluate``; saved with its result), and the tasks it offers.

Imports neither torch nor transformer_lens (the command line builds its flags from it)."""

from __future__ import annotations

from dataclasses import dataclass

from circuits.config import Config, count, option
from circuits.data.benchmarks import MATH_TASKS
from circuits.types import DTYPE_NAMES

MATH_EVAL_TASKS = MATH_TASKS
GENERIC_TASKS = ("mmlu", "commonsenseqa")
ALL_TASKS: tuple[str, ...] = (*MATH_EVAL_TASKS, *GENERIC_TASKS, "arithmetic", "perplexity")


@dataclass(frozen=True)
class EvalConfig(Config):
    """One evaluation run. ``limit`` caps documents per task (``None``: all)."""

    model: str = option("smollm2", help="model name or path (see circuits.models.load_model)")
    delta: str | None = option(None, help="delta.pt from `circuits finetune`, applied onto the base model")
    tasks: tuple[str, ...] = option(ALL_TASKS, nonempty=True, unique=True, help="comma-separated tasks")
    limit: int | None = count(None, help="documents per task (quick runs)")
    batch_size: int = count(8, maximum=100_000)
    max_gen_toks: int = count(256, maximum=100_000)
    math_shots: int = count(0, minimum=0, maximum=8, help="solved examples before each math question (0: none)")
    mmlu_shots: int = count(5, minimum=0, maximum=5, help="solved examples before each MMLU question (0: none; the dev split has 5 per "
                                                                          "subject)")
    csqa_shots: int = count(5, minimum=0, maximum=16, help="solved examples before each CommonsenseQA question (0: none)")
    arithmetic_per_form: int = count(50)
    data_dir: str | None = option(None, help="benchmark data folder (default: $CIRCUITS_DATA_DIR or ../shared/data)")
    source: str = option("local", choices=("local", "hub"))
    seed: int = option(0, minimum=0)
    dtype: str = option("float32", choices=DTYPE_NAMES,
                        help="dtype the model is evaluated in (a delta's fp32 values are cast to it)")

    def __post_init__(self) -> None:
        object.__setattr__(self, "tasks", tuple(self.tasks))
        unknown = set(self.tasks) - set(ALL_TASKS)
        if unknown or not self.tasks:
            raise ValueError(f"Unknown or no tasks {sorted(unknown)}; accepted: {', '.join(ALL_TASKS)}")
        if self.source not in ("local", "hub"):
            raise ValueError("source must be 'local' or 'hub'")
        if self.dtype not in DTYPE_NAMES:
            raise ValueError(f"Unknown dtype {self.dtype!r}; accepted: {', '.join(DTYPE_NAMES)}")
