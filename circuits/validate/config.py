"""What decides the validate step's results (Figures 3 and 4), which are also the configs of its commands
(``circuits knockout``, ``circuits transfer``). Imports neither torch nor transformer_lens: the command line builds
its flags from them.

A result made from key heads records the identify run they came from (its whole identify config) and where that run's
result lies (:class:`~circuits.identify.config.FromIdentify`: ``heads_from``, ``--heads-from``; empty when a script
or a fresh identify run gave the heads)."""

from __future__ import annotations

from dataclasses import dataclass

from circuits.config import count, option
from circuits.identify.config import FromIdentify


@dataclass(frozen=True)
class KnockoutConfig(FromIdentify):
    """What decides Figure 3 (``circuits knockout``): the identify run whose ranking is knocked out (``heads_from``:
    its saved result), the numbers of heads and the seeds of the random orders."""

    ks: tuple[int, ...] = count((0, 1, 2, 3, 5, 10, 20), minimum=0, nonempty=True, unique=True, per_model="heads",
                               help="numbers of heads knocked out (0: none, the baseline)")
    seeds: tuple[int, ...] = option((0, 1, 2, 3, 4), minimum=0, nonempty=True, unique=True, help="seeds of the random orders (5: the random heads' mean rests on more than a few orders; the runs are batched, so each costs little)")


@dataclass(frozen=True)
class TransferConfig(FromIdentify):
    """What decides a transfer result (Figure 4, Table 3): the identify run (``heads_from``: its saved result) and how
    many of its top-ranked heads are knocked out (its key rule's first)."""

    n_key_heads: int = count(10, per_model="heads", help="heads knocked out: the identify ranking's top N by the key "
                                                         "rule's metric (the key rule's heads first)")


@dataclass(frozen=True)
class TransferSets(TransferConfig):
    """Figure 4 (``circuits transfer``): its data sets (how many prompts of each, the MMLU questions) and the random
    control. A result made with it is read back as a :class:`TransferConfig`, the fields Table 3 shares (as a
    script's config is)."""

    n: int = count(32, help="prompts per transfer set")
    n_mmlu: int = count(32, minimum=0, help="MMLU questions (0: no MMLU)")
    svamp_shots: int = count(2, minimum=0, maximum=8, help="solved SVAMP examples before each question (0: none)")
    random_seed: int = option(0, minimum=0)
    data_dir: str | None = option(None, help="benchmark data folder (default: $CIRCUITS_DATA_DIR or ../shared/data)")

