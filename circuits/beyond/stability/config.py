"""What decides a stability run (saved as its ``config.json``)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from circuits.config import Config, option
from circuits.data.templates import OPERATIONS
from circuits.identify.config import IdentifyConfig
from circuits.patching.ranking import DEFAULT_KEY_RULE, KeyRule


@dataclass(frozen=True)
class StabilityConfig(Config):
    model: str = option("smollm2", help="smollm2, a .gguf file, a local Hugging Face folder or an official name")
    operations: tuple[str, ...] = option(tuple(OPERATIONS), help="operations")
    seeds: tuple[int, ...] = option((0, 1, 2), help="seeds of the pairs (one identify run each)")
    n_pairs: int = option(64, flag="--pairs", help="prompt pairs per identify run")
    key_rule: str = option(DEFAULT_KEY_RULE, help="the rule that picks the key heads")
    filter_correct: bool = option(True, help="keep only pairs the model answers correctly")
    identify_dir: str = option("", help="where identify results are read or written (seed 0: <dir>/<operation>, as "
                                        "circuits identify --task all writes); default: <--out>/identify")

    def __post_init__(self) -> None:
        KeyRule.parse(self.key_rule)
        for op in self.operations:
            if op not in OPERATIONS:
                raise ValueError(f"Unknown operation {op!r}; accepted: {', '.join(OPERATIONS)}")
        if not self.seeds:
            raise ValueError("Give at least one seed")

    def identify_config(self, op: str, seed: int) -> IdentifyConfig:
        return IdentifyConfig(model=self.model, task=op, n_pairs=self.n_pairs, seed=seed, key_rule=self.key_rule,
                              filter_correct=self.filter_correct)

    def identify_root(self, out: str | Path | None = None) -> Path:
        """``identify_dir``, or without one ``<out>/identify`` (a job writes only under its ``--out`` or a path the
        user names)."""
        if self.identify_dir:
            return Path(self.identify_dir)
        if out is None:
            raise ValueError("give identify_dir, or the stability result's folder (out)")
        return Path(out) / "identify"

    def folder(self, op: str, seed: int, out: str | Path | None = None) -> Path:
        return self.identify_root(out) / (op if seed == 0 else f"{op}-seed{seed}")
