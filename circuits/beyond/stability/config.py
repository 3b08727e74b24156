"""What decides a stability run (saved as its ``config.json``).

The identify runs it reads or makes are one nested :class:`~circuits.identify.config.IdentifyConfig` (its flags,
less ``--task``, ``--seed`` and ``--receivers``, are this command's: ``--model``, ``--pairs``, ``--key-rule``, ...), run for every
operation and seed. In ``config.json``: ``{"identify": {...}, "operations": [...], "seeds": [...], ...}``."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from circuits.config import Config, option
from circuits.data.templates import OPERATIONS
from circuits.identify.config import IdentifyConfig


@dataclass(frozen=True)
class StabilityConfig(Config):
    """What decides a stability run.

    How stable the key-head set is, per operation, across seeds (new prompt pairs) and across
    template forms (equation, statement, question), as Jaccard overlaps.

    Reads or makes identify results per operation and seed under ``--identify-dir`` (default: ``<--out>/identify``; as
    ``circuits identify`` writes them, each checked and locked before it is written) and writes into ``--out``, file by
    file, each atomically: ``data.json`` (key-head sets and Jaccard matrices per operation), ``figure.html``,
    ``config.json`` and ``circuits.json``.
    """

    identify: IdentifyConfig = option(IdentifyConfig(), skip=("task", "seed", "receivers"),
                                      help="the identify run made for every operation and seed")
    operations: tuple[str, ...] = option(tuple(OPERATIONS), choices=OPERATIONS, nonempty=True, unique=True,
                                          help="operations")
    seeds: tuple[int, ...] = option((0, 1, 2), minimum=0, nonempty=True, unique=True, help="seeds of the pairs (one identify run each)")
    identify_dir: str = option("", help="where identify results are read or written (seed 0: <dir>/<operation>, as "
                                        "circuits identify --task all writes); default: <--out>/identify")

    def __post_init__(self) -> None:
        for op in self.operations:
            if op not in OPERATIONS:
                raise ValueError(f"Unknown operation {op!r}; accepted: {', '.join(OPERATIONS)}")
        if not self.seeds:
            raise ValueError("Give at least one seed")
        if self.identify.pairs_file:  # the seeds and templates draw the pairs; a file gives every run the same ones
            raise ValueError(f"--pairs-file {self.identify.pairs_file}: stability compares key heads across the seeds "
                             "and template forms that draw the pairs, and a pairs file gives every run the same pairs "
                             "(every overlap would be 1.0); leave --pairs-file out")

    @property
    def model(self) -> str:
        return self.identify.model

    @property
    def key_rule(self) -> str:
        return self.identify.key_rule

    def identify_config(self, op: str, seed: int) -> IdentifyConfig:
        return self.identify.replace(task=op, seed=seed)

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
