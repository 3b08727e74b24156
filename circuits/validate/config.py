"""What decides the validate step's results (Figures 3 and 4), and the configs of its commands (``circuits knockout``,
``circuits transfer``). Imports neither torch nor transformer_lens: the command line builds its flags from them.

A result made from key heads records the identify run they came from (:data:`~circuits.identify.config.KeyHeadSource`,
its whole config). A command's config adds where that run's result lies
(:class:`~circuits.identify.config.FromIdentify`: ``--heads-from``)."""

from __future__ import annotations

from dataclasses import dataclass

from circuits.config import option
from circuits.identify.config import FromIdentify, KeyHeadSource


@dataclass(frozen=True)
class KnockoutConfig(KeyHeadSource):
    """What decides Figure 3: the identify run whose ranking is knocked out, the numbers of heads and the seeds of
    the random orders."""

    ks: tuple[int, ...] = option((0, 1, 2, 3, 5, 10, 20), help="numbers of heads knocked out")
    seeds: tuple[int, ...] = option((0, 1, 2), help="seeds of the random orders")


@dataclass(frozen=True)
class KnockoutJobConfig(FromIdentify, KnockoutConfig):
    """``circuits knockout``: Figure 3 from an identify result (``--heads-from``) or a fresh identify run."""


@dataclass(frozen=True)
class TransferConfig(KeyHeadSource):
    """What decides a transfer result (Figure 4, Table 3): the identify run and how many of its key heads are knocked
    out."""

    n_key_heads: int = option(10)


@dataclass(frozen=True)
class TransferSets(TransferConfig):
    """Figure 4's data sets: how many prompts of each, the MMLU questions, and the random control."""

    n: int = option(32, help="prompts per transfer set")
    n_mmlu: int = option(32)
    svamp_shots: int = option(2)
    random_seed: int = option(0)
    data_dir: str | None = option(None, help="benchmark data folder (default: $CIRCUITS_DATA_DIR or ../shared/data)")


@dataclass(frozen=True)
class TransferJobConfig(FromIdentify, TransferSets):
    """``circuits transfer``: Figure 4 from an identify result (``--heads-from``) or a fresh identify run."""
