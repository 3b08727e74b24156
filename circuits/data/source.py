"""Where the jobs beyond heads at END get their prompt pairs: built as ``circuits identify`` builds them, or taken
(token ids and all) from a saved identify result with ``--pairs-from``, so a screen, a position sweep or a neuron
sweep can run on exactly the pairs whose key heads they extend."""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any

from transformer_lens import HookedTransformer

from circuits.config import Config, option
from circuits.data.pairs import FewerPairsWarning, PairConfig, PromptPair, build_pairs
from circuits.data.templates import TASKS
from circuits.models.loading import DTYPES


@dataclass(frozen=True)
class PairSource(Config):
    """The model and the prompt pairs of a job (the fields every job of this step shares)."""

    model: str = option("smollm2", help="smollm2, a .gguf file, a local Hugging Face folder or an official name")
    task: str = option("addition", help="the operation whose prompts are patched", choices=TASKS)
    n_pairs: int = option(64, flag="--pairs", help="prompt pairs")
    seed: int = option(0, help="seed of the operands, templates and words")
    few_shot: str = option("auto", choices=("auto", "on", "off"),
                           help="a few-shot prefix of solved examples ('auto': below 1B parameters)")
    prefix_policy: str = option("keep", choices=("keep", "counterfactual"),
                                help="counterfactual prompts keep the reference's few-shot prefix, or get their own")
    filter_correct: bool = option(True, help="keep only pairs the model answers correctly")
    pairs_from: str = option("", help="take the first --pairs pairs of this `circuits identify` result folder (its "
                                      "exact token ids) instead of building them")
    dtype: str = option("float32", choices=("float32", "bfloat16", "float16"))
    memory_mb: float = option(1024, help="working-memory budget of the exact engines")

    def __post_init__(self) -> None:
        if self.task not in TASKS:
            raise ValueError(f"Unknown task {self.task!r}; accepted: {', '.join(TASKS)}")
        if self.dtype not in DTYPES:
            raise ValueError(f"Unknown dtype {self.dtype!r}; accepted: float32, bfloat16, float16")
        if not self.memory_mb > 0:
            raise ValueError(f"memory_mb must be positive, got {self.memory_mb}")
        self.pair_config()

    def pair_config(self) -> PairConfig:
        return PairConfig(task="addition" if self.task == "all" else self.task, n_pairs=self.n_pairs, seed=self.seed,
                          few_shot=self.few_shot, prefix_policy=self.prefix_policy,  # type: ignore[arg-type]
                          filter_correct=self.filter_correct)

    def load_pairs(self, model: HookedTransformer) -> tuple[list[PromptPair], dict[str, Any]]:
        """The pairs and what the model did on the candidates (empty when taken from ``pairs_from``)."""
        if self.pairs_from:
            from circuits.identify.result import load_identify

            r = load_identify(self.pairs_from)
            if r.config.model != self.model:
                raise ValueError(f"--pairs-from {self.pairs_from} was made with model {r.config.model!r}, not "
                                 f"{self.model!r}; pass --model {r.config.model} or another folder")
            if not r.pairs:
                raise ValueError(f"{self.pairs_from} holds no pairs.jsonl; rerun circuits identify")
            if len(r.pairs) < self.n_pairs:
                warnings.warn(f"{len(r.pairs)} of the {self.n_pairs} pairs asked: {self.pairs_from} holds only "
                              f"{len(r.pairs)}; going on with them", FewerPairsWarning, stacklevel=2)
            return list(r.pairs[: self.n_pairs]), dict(r.pair_stats)
        built = build_pairs(model, self.pair_config())
        return built.pairs, built.stats()
