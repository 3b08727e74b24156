"""What decides a heuristic-neuron analysis (saved as its ``config.json``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from circuits.config import count, option
from circuits.data.pair_config import PAIRS_FILE_REPLACES, WHOLE_ANSWER, answer_position, answer_position_option
from circuits.data.source import PairSource, check_metric
from circuits.data.templates import OPERATIONS, templates_for
from circuits.identify.validity import force_option
from circuits.types import DEFAULT_METRIC, METRIC_NAMES, MODES, parse_layers


def _limits(text: str) -> tuple[int, ...]:
    if text.strip().lower() in ("", "none", "off"):
        return ()
    try:
        return tuple(int(x) for x in text.split(","))
    except ValueError:
        raise ValueError(f"Bad --prompt-knockout-limits {text!r}: write counts per MLP as 5,10,25 (none: off)") from None


def _ints(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(x) for x in text.split(","))
    except ValueError:
        raise ValueError(f"Bad operand range {text!r}: write it as LO,HI (e.g. 0,9)") from None


@dataclass(frozen=True)
class HeuristicsConfig(PairSource):
    """What decides a heuristic-neuron analysis: where the key MLPs and their top neurons come from, the operand grid,
    the classifier's thresholds and the class knockout.

    The top neurons of the key MLPs read over the whole operand grid (every a x b, the
    template's 3-shot prefix), each classified into heuristics (an operand or the result in a range or a residue class,
    a digit pattern, the answer's identity, or none; Nikankin et al., ICLR 2025), and the neurons of each rule knocked out
    together: the drop of the answer's probability on the prompts the rule covers against the rest and against as many
    random neurons of the same MLPs, with bootstrap intervals.

    Writes, atomically, into ``--out``: ``summary.json`` (classes found, share of the top neurons' effect the classified
    ones carry, the knockout's drops), ``classes.json`` (every neuron's best rule per kind with its score), ``heuristics.pt``
    (effects and grid activations), ``grid.jsonl``, ``pairs.jsonl``, ``figure.html`` (grid heat maps beside their rules),
    ``knockout.html``, ``config.json`` and ``circuits.json``.

    ``--answer-position k`` (issue 42): the pairs that rank the neurons read at the answer's token ``k``, and the grid
    at its answers' token ``k``: only the cells whose answer has more than ``k`` tokens, each teacher-forced with its
    first ``k`` (:func:`~circuits.data.grid.grid_at_answer_position`; ``k = 1`` on SmolLM2's 0..9 grid keeps the 45
    two-digit sums, read at their units digit).
    """

    layers: tuple[int, ...] = option((), minimum=0, maximum=10_000, unique=True, parse=lambda t: tuple(parse_layers(t)), help="MLP layers whose top neurons are "
                                     "classified; default: the key MLPs of --neurons-from or --pairs-from (at most "
                                     "--top-mlps), else of an identify run made first")
    top_mlps: int = count(3, help="key MLPs taken when --layers is not given")
    neurons_from: str = option("", help="a `circuits neurons` result folder: its MLPs and exact neuron effects rank the "
                                        "neurons (no sweep is rerun)")
    neurons_per_mlp: int = count(20, help="top neurons of each key MLP (by their exact END effect) that are classified")
    mode: str = option("path", choices=MODES, help="path patching (the paper's) or activation patching, for the "
                                                     "neuron effects")
    metric: str = option(DEFAULT_METRIC, choices=METRIC_NAMES, help="what ranks the neurons")
    operands: tuple[int, ...] = option((0, 9), minimum=0, maximum=10_000, parse=_ints, help="LO,HI: the operand grid is every a, b in LO..HI")
    templates: tuple[str, ...] = option((), parse=lambda t: tuple(x for x in t.split(",") if x),
                                        help="template ids of the grid's prompts, e.g. addition/0,addition/6; "
                                             "default: the operation's equation form")
    threshold: float = option(0.6, maximum=1, help="least chance-corrected top-k match of a rule for its class to count")
    min_support: int = count(5, help="least number of grid cells a rule must hold (and fail) on")
    alpha: float = option(0.01, maximum=1, help="the largest chance (Bonferroni over the rules tried) of a class's match")
    null_neurons: int = count(20, minimum=0, help="random neurons, and lowest-effect neurons, of each key MLP (outside "
                                                    "the top ones) classified by the same test: the null of the share "
                                                    "classified (0: none)")
    knockout_classes: int = count(6, minimum=0, help="classes knocked out (those with the most neurons; 0: no knockout)")
    n_random: int = count(5, help="draws of as many random neurons of the same MLPs per class, and per prompt in the "
                                   "prompt knockout")
    n_boot: int = count(1000, help="bootstrap resamples of the grid's prompts for the intervals")
    knockout_seed: int = option(0, minimum=0, help="seed of the random neurons and the bootstrap")
    prompt_knockout_limits: tuple[int, ...] = count((5, 10, 25), unique=True, parse=_limits, help=
                                                    "Nikankin et al.'s per-prompt knockout: per correct grid prompt, "
                                                    "at most this many of each MLP's neurons whose heuristics the "
                                                    "prompt is associated with knocked out, and as many random ones; "
                                                    "read on accuracy (several limits: one row each; a limit at "
                                                    "or past --neurons-per-mlp knocks out every associated one; "
                                                    "none: off)")
    prompt_knockout_ablation: str = option("zero", choices=("zero", "mean"), help="the per-prompt knockout's "
                                           "values: zero (Nikankin's) or the grid's mean hook_post (the class "
                                           "knockout's)")
    prompt_knockout_control: str = option("top", choices=("top", "mlp"), help="where the per-prompt knockout's "
                                          "random neurons come from: the MLP's top neurons the prompt is not "
                                          "associated with (Nikankin's), or any of its unassociated neurons")
    prompt_knockout_prompts: str = option("correct", choices=("correct", "all"), help="the grid prompts the "
                                          "per-prompt knockout reads: those the model answers correctly "
                                          "(Nikankin's), or all")
    force: bool = force_option()
    answer_position: str = answer_position_option(whole=False)

    # With a pairs file the seed and the few-shot prefix still make the operand grid (operand_grid): kept
    replaced_by_pairs_file: ClassVar[tuple[str, ...]] = tuple(n for n in PAIRS_FILE_REPLACES
                                                               if n not in ("seed", "few_shot"))

    def __post_init__(self) -> None:
        super().__post_init__()
        check_metric(self.metric)
        if self.task not in OPERATIONS:
            raise ValueError(f"circuits heuristics takes one operation ({', '.join(OPERATIONS)}), got --task {self.task}")
        if len(self.operands) != 2 or not 0 <= self.operands[0] <= self.operands[1]:
            raise ValueError(f"--operands must be LO,HI with 0 <= LO <= HI, got {self.operands}")
        if self.operands[1] - self.operands[0] + 1 > 100:  # operand_grid's limit, said before the sweep, not after
            raise ValueError(f"--operands {self.operands[0]},{self.operands[1]}: the grid would have "
                             f"{(self.operands[1] - self.operands[0] + 1) ** 2} cells; take at most 100 values")
        known = [t.id for t in templates_for(self.task)]
        unknown = [t for t in self.templates if t not in known]
        if unknown:
            raise ValueError(f"--templates: unknown template {unknown[0]!r} for {self.task}; accepted: {', '.join(known)}")
        if not 0 < self.threshold <= 1:
            raise ValueError(f"threshold must lie in (0, 1], got {self.threshold}")
        if not 0 < self.alpha <= 1:
            raise ValueError(f"alpha must lie in (0, 1], got {self.alpha}")
        position = answer_position(self.answer_position)
        if position == WHOLE_ANSWER:
            raise ValueError("--answer-position whole: the heuristics read neurons at one answer token; accepted: 0, "
                             "1, ...")
        if position != 0 and self.neurons_from:
            raise ValueError(f"--answer-position {position} with --neurons-from: a `circuits neurons` result ranks the "
                             "neurons at END (the first answer token); leave --neurons-from out (the neurons are then "
                             "swept at the position asked)")
        if position != 0 and not (self.pairs_file or self.pairs_from):
            raise ValueError(f"--answer-position {position}: the task's templates give one-token answers only; give "
                             "--pairs-file (or --pairs-from a result made from one) with answers of several tokens")
