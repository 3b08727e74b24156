"""The fine-tuning step's result: losses, speed and what was tuned (``result.json`` beside ``delta.pt``)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from circuits.config import Config
from circuits.io import read_json, write_json
from circuits.results import Result, ResultError, check_fields, lazy_type


@dataclass(eq=False, repr=False)
class FinetuneResult(Result):
    """One fine-tuning run. Its folder also holds ``delta.pt`` (the tuned slices) and ``checkpoint.pt``
    (resumable), which the training loop writes as it goes, so the result is saved file by file beside them."""

    kind = "finetune"
    in_place = True
    config_type = lazy_type("circuits.sft.train:FinetuneConfig")  # train.py imports this module

    config: Config  # a circuits.sft.train.FinetuneConfig
    steps: int
    samples: int
    samples_per_s: float
    train_seconds: float
    tuned_parameters: int
    total_parameters: int
    losses: list[float] = field(default_factory=list)
    resumed_from: int = 0
    plan: dict = field(default_factory=dict)
    skipped_steps: int = 0  # fp16 steps skipped by the loss scaler (a gradient overflowed)
    world_size: int = 1  # processes the run was split over (torchrun)

    @classmethod
    def unfinished(cls, folder: Path) -> bool:
        """A run stopped before its end: its config beside a checkpoint (one file, or a sharded folder), or its config
        alone (killed as it started, between ``config.json`` and the marker: the rerun compares the config before it
        writes anything, and refuses another run's in one line)."""
        config = folder / "config.json"
        if not config.is_file() or config.is_symlink():
            return False
        alone = [p.name for p in folder.iterdir() if not p.name.startswith(".")] == ["config.json"]
        return alone or (folder / "checkpoint.pt").is_file() or (folder / "checkpoint").is_dir()

    def to_json(self) -> dict:
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "config"}

    def _write(self, folder: Path) -> None:
        write_json(folder / "result.json", self.to_json())

    @classmethod
    def _read(cls, folder: Path, config: Config) -> FinetuneResult:
        if not (folder / "result.json").is_file():
            raise ResultError(f"{folder} holds an unfinished fine-tuning run (no result.json yet); run the same "
                              "`circuits finetune` command to resume it")
        return cls(config=config, **check_fields(cls, read_json(folder / "result.json"), folder / "result.json"))

