"""What decides an identify result (saved as its ``config.json``)."""

from __future__ import annotations

from dataclasses import dataclass

from circuits.config import Config, option
from circuits.data.pairs import PairConfig
from circuits.data.templates import TASKS
from circuits.patching.ranking import DEFAULT_KEY_RULE, KeyRule
from circuits.models.loading import DTYPES
from circuits.types import MODES, Receiver



@dataclass(frozen=True)
class IdentifyConfig(Config):
    """Everything that decides an identify result."""

    model: str = option("smollm2", help="smollm2 or gemma3-270m (embedded), a .gguf file, a local Hugging Face folder or an official name")
    task: str = option("addition", help="the operation whose prompts are patched", choices=TASKS)
    mode: str = option("path", help="path patching (the paper's) or activation patching", choices=MODES)
    n_pairs: int = option(64, flag="--pairs", help="prompt pairs per task")
    key_rule: str = option(DEFAULT_KEY_RULE,
                           help="e.g. 'fraction>=0.05', the paper's 'relative_logit<-0.05', or 'top10'")
    seed: int = option(0, help="seed of the operands, templates and words")
    few_shot: str = option("auto", help="a few-shot prefix of solved examples ('auto': below 1B parameters)",
                           choices=("auto", "on", "off"))
    prefix_policy: str = option("keep", choices=("keep", "counterfactual"),
                                help="counterfactual prompts keep the reference's few-shot prefix, or get counterfactual examples")
    filter_correct: bool = option(True, help="keep only pairs the model answers correctly")
    dtype: str = option("float32", choices=("float32", "bfloat16", "float16"))
    memory_mb: float = option(1024, help="working-memory budget of the sweep")
    receivers: str = option("", help="also path-patch every earlier component into these receivers at END: heads (their "
                                     "q, k and v inputs), LAYER.HEAD.q/k/v, MLP<layer>, or topK (the K most important "
                                     "components), e.g. 20.8,MLP19; writes edges.pt and circuit.html")
    bootstrap: int = option(1000, help="bootstrap resamples of the pairs for the confidence intervals (0: none)")
    prob: str = option("key", choices=("key", "all"),
                       help="the answer probability after patching (a log-sum-exp over the vocabulary per patched row) "
                            "for the key heads and MLPs only, in a second small pass, or for every component; "
                            "NaN elsewhere (always 'all' when the key rule's metric is prob)")

    def __post_init__(self) -> None:
        if self.task not in TASKS:
            raise ValueError(f"Unknown task {self.task!r}; accepted: {', '.join(TASKS)}")
        if self.mode not in MODES:
            raise ValueError(f"Unknown mode {self.mode!r}; accepted: {', '.join(MODES)}")
        if self.dtype not in DTYPES:
            raise ValueError(f"Unknown dtype {self.dtype!r}; accepted: float32, bfloat16, float16")
        if self.prob not in ("key", "all"):
            raise ValueError(f"prob must be 'key' or 'all', got {self.prob!r}")
        if not self.memory_mb > 0:
            raise ValueError(f"memory_mb must be positive, got {self.memory_mb}")
        KeyRule.parse(self.key_rule)
        if self.receivers and not self.receivers.strip().lower().startswith("top"):
            Receiver.parse_many(self.receivers)
        if self.bootstrap < 0:
            raise ValueError(f"bootstrap must be 0 (no intervals) or more, got {self.bootstrap}")
        self.pair_config()  # validates n_pairs, few_shot, prefix_policy

    def pair_config(self, task: str | None = None) -> PairConfig:
        task = task or self.task
        return PairConfig(task="addition" if task == "all" else task, n_pairs=self.n_pairs, seed=self.seed,
                          few_shot=self.few_shot, prefix_policy=self.prefix_policy,  # type: ignore[arg-type]
                          filter_correct=self.filter_correct)

    def for_task(self, task: str) -> IdentifyConfig:
        return self.replace(task=task)
