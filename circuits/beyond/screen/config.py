"""What decides a screen (saved as its ``config.json``)."""

from __future__ import annotations

from dataclasses import dataclass

from circuits.config import count, option
from circuits.data.pair_config import answer_position_option, one_answer_token
from circuits.data.source import PairSource, check_metric
from circuits.identify.validity import force_option
from circuits.types import DEFAULT_METRIC, METRIC_NAMES, MODES


@dataclass(frozen=True)
class ScreenConfig(PairSource):
    """Everything that decides a screen (saved as its ``config.json``).

    Writes, atomically, into ``--out``: ``summary.json`` (the audit numbers: ``spearman_end``,
    ``exact_top10_missed_at_{10,20,50}``, ``exact_top5pct_missed_at_{10,20,50}``, the largest misses and why; every
    verified node with its screen estimate and exact value; seconds per stage), ``screen.pt`` (the estimates by layer,
    head and offset from END; neurons; QK-fixed query and key nodes; GradDrop scores; the exact END effects),
    ``pairs.jsonl``, ``screen.html``, ``config.json`` and ``circuits.json``. ``--answer-position k``: every pair read
    at the answer's token ``k`` (both prompts teacher-forced with its first ``k`` tokens, END moved to END + k, the
    pairs saved so). Before the screen, the pairs' validity checks (docs/identify.md, "Can this result be
    trusted?"): past a hard threshold the screen is refused without ``--force``; ``summary.json`` keeps ``validity``.
    """

    metric: str = option(DEFAULT_METRIC, choices=METRIC_NAMES, help="what is estimated and ranked")
    mode: str = option("activation", choices=MODES, help="activation patching (every position) or the paper's path "
                                                          "patching (heads frozen; END only)")
    verify: int = count(20, minimum=0, help="re-measure the screen's top-N heads/MLPs and top-N neurons exactly (0: none)")
    neurons: bool = option(True, help="screen every MLP neuron (hook_post) too")
    qk_fix: bool = option(True, help="AtP*'s query and key nodes with the exact softmax")
    grad_drop: bool = option(False, help="AtP*'s GradDrop scores (n_layers extra backward passes)")
    audit: bool = option(True, help="measure every head and MLP at END exactly and compare (the audit table)")
    answer_position: str = answer_position_option(whole=False)
    force: bool = force_option()

    def __post_init__(self) -> None:
        super().__post_init__()
        check_metric(self.metric)
        if self.mode not in MODES:
            raise ValueError(f"Unknown mode {self.mode!r}; accepted: {', '.join(MODES)}")
        one_answer_token(self.answer_position, "the screen estimates one answer token's metric (offsets count back "
                         "from it)", self.pairs_file or self.pairs_from)
