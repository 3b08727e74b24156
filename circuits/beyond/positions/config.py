"""What decides a position sweep (saved as its ``config.json``)."""

from __future__ import annotations

from dataclasses import dataclass

from circuits.config import option
from circuits.data.pair_config import answer_position_option, one_answer_token
from circuits.data.source import PairSource, check_metric
from circuits.identify.validity import force_option
from circuits.types import METRIC_NAMES, MIB_METRIC


@dataclass(frozen=True)
class PositionConfig(PairSource):
    """What decides a per-position sweep.

    Writes, atomically, into ``--out``: ``summary.json`` (effects by layer, head and offset from END in every metric),
    ``positions.pt`` (per-pair patched values), ``pairs.jsonl``, ``flow.html`` (the information-flow figure, operand
    and operator positions marked), ``config.json`` and ``circuits.json``. ``--template`` keeps the pairs of one
    template so positions align token for token.
    """

    template: str = option("", help="only pairs of this template (e.g. addition/0), so positions align token for "
                                    "token; default: all, aligned from END")
    offsets: tuple[int, ...] = option((), minimum=0, maximum=1_000_000, unique=True, help="offsets from END to patch (0 is END); default: every position")
    metric: str = option(MIB_METRIC, choices=METRIC_NAMES, help="the metric the figure shows")
    answer_position: str = answer_position_option(whole=False)
    force: bool = force_option()

    def __post_init__(self) -> None:
        super().__post_init__()
        check_metric(self.metric)
        one_answer_token(self.answer_position, "the per-position sweep reads one answer token (offsets count back "
                         "from it)", self.pairs_file or self.pairs_from)
