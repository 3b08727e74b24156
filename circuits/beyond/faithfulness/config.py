"""What decides a faithfulness run (saved as its ``config.json``).

The model and its pairs are :class:`~circuits.data.source.PairSource`'s fields (``--model``, ``--task``, ``--pairs``,
``--pairs-from``, ...), as in every job beyond heads at END; the rest says which rankings are scored and how."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from circuits.identify.validity import force_option
from circuits.config import option, redefault
from circuits.data.pair_config import answer_position_option, one_answer_token
from circuits.data.source import PairSource, check_metric
from circuits.patching.engines.registry import node_engines
from circuits.types import COUNTS, METRIC_NAMES, MIB_COUNT, MIB_METRIC

# The rankings the job scores by default: the engine registry's entries that score every head and MLP
# (circuits.patching.engines.registry.node_engines(); an engine registered later is accepted too), each read as:
#   exact-path        the END engine in path mode (cc.sweep, the paper's path patching), |effect| at END
#   exact-activation  the END engine in activation mode, |effect| at END
#   positions         exact activation patching at every position (cc.sweep_positions), over positions by
#                     position_scores (sum: the signed effects summed, as MIB; max: the one of largest |effect|)
#   screen            the attribution screen (AtP*, cc.attribute, activation mode), over positions likewise
#   graddrop          AtP*'s GradDrop scores (mean |estimate| over the layer-dropped backward passes), likewise
#   eap-ig            EAP-IG-inputs (cc's eap_ig): |estimate| summed over positions as EAP-IG sums; edges: |estimate|
RANKINGS: tuple[str, ...] = tuple(node_engines())
# The rankings --ranking-boot re-ranks by default: each costs a few CPU seconds to a minute at 64 SmolLM2 pairs, where
# the exact per-position one (`positions`) costs 6-12 minutes (docs/results.md's faithfulness_seconds table).
CHEAP_RANKINGS: tuple[str, ...] = tuple(r for r in RANKINGS if r != "positions")
RANKING_BOOT_SEED = 20_431  # the ranking and scoring resamples of --ranking-boot (this seed and the next)
# MIB's circuit sizes: fractions of the nodes (or edges) kept (circuits.patching.circuit_curves.MIB_SIZES; here too so
# the config imports no torch; a unit test checks they are the same).
MIB_SIZES: tuple[float, ...] = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5)
POSITIONS: tuple[str, ...] = ("end", "all")
ABLATIONS: tuple[str, ...] = ("counterfactual", "mean", "zero")
# EAP-IG's interpolation grids (circuits.patching.engines.eap_ig.GRIDS): here too so the config imports no torch; a
# unit test checks they agree. How a size counts its nodes is circuits.types.COUNTS (MIB_COUNT by default here).
IG_GRIDS: tuple[str, ...] = ("left", "right")
# Which ranking's curve CPR is read from (issue 43): MIB reads CPR from the curve of the signed ranking (a node that
# pushes the metric the wrong way ranks last) and CMD from the absolute one (run_evaluation.py --absolute;
# print_results.py takes CPR from the abs-False file, CMD from the abs-True one). "absolute" reads both from the
# absolute curve, as the study published before issue 43 did (CPR = 1 - CMD wherever f stays in [0, 1]).
CPR_RANKINGS: tuple[str, ...] = ("signed", "absolute")
# How a ranking scored at every position (positions, screen, graddrop) becomes one score per node (issue 43): "sum"
# adds the signed scores over positions, as MIB and the EAP-IG library sum their per-position attributions (the
# absolute ranking orders by |sum|); "max" takes the score at the position of the largest |score| (the study
# published before issue 43).
POSITION_SCORES: tuple[str, ...] = ("sum", "max")
# MIB's value of every config field that decides whether the job measures as MIB does (its circuit track at the
# commit the EAP-IG peer check used): recorded per run in summary.json ("mib": which of them this run departs from).
MIB_VALUES: dict[str, object] = {"cpr_ranking": "signed", "counterfactual": "random", "second_logit": "label",
                                 "position_scores": "sum", "held_out": True, "count": MIB_COUNT, "ig_grid": "left",
                                 "ablation": "counterfactual", "metric": MIB_METRIC, "input_node": True}
# What differs from MIB whatever the config says (no config value selects MIB's way yet), named in every run's
# summary.json, its printed table and docs/mib.md.
FIXED_DEVIATIONS: dict[str, str] = {
    "prompts": "the paper's templates with a few-shot prefix, built by build_pairs (MIB: its mib-bench problems)",
}


@dataclass(frozen=True)
class FaithfulnessConfig(PairSource):
    """Which rankings are turned into circuits, at which sizes, ablated how, and scored with which metric.

    The circuits each ranking yields, scored as MIB scores circuit discovery -- keep the
    top s% of the nodes (or edges), ablate the rest, f = (m(C) - m(empty)) / (m(N) - m(empty)) at MIB's sizes, CPR (area
    under f, higher is better) and CMD (area between f and 1, lower is better) with bootstrap intervals over pairs, and
    the seconds each ranking took.

    Rankings (``--rankings``, comma-separated): exact-path and exact-activation (the END engine, |effect|), positions
    (exact patching at every position, summed over positions or, ``--position-scores max``, the largest |effect|), screen (AtP*), graddrop (AtP*'s GradDrop), eap-ig
    (EAP-IG, nodes and, with ``--edges``, edges). Writes into ``--out``, file by file: ``summary.json`` (the table and every
    curve), ``faithfulness.pt``, ``pairs.jsonl``, ``figure.html`` (f against circuit size, one line per ranking),
    ``config.json``, ``circuits.json``, and ``parts/`` (each finished ranking: the same command resumes a stopped run).
    """

    # MIB's arithmetic counterfactual by default (issue 43): another problem of the same operation (random), its own
    # answer the second logit (label), as MIB_circuit_track/dataset.py builds its arithmetic pairs. With the paper's
    # operator counterfactual the counterfactual asks for no number, its top token is often the answer itself, and
    # the logit difference cannot move (division: on every pair, f undefined).
    counterfactual: str | None = redefault(PairSource, "counterfactual", "random")
    second_logit: str = redefault(PairSource, "second_logit", "label")
    reads_label: ClassVar[bool] = True  # its curves and rankings take the label as logit_diff's second token

    rankings: tuple[str, ...] = option(RANKINGS, help=f"rankings to score, comma-separated: {', '.join(RANKINGS)}")
    sizes: tuple[float, ...] = option(MIB_SIZES, help="circuit sizes, fractions of the nodes (or edges) kept (MIB's; "
                                                      "0.01 keeps one node in a hundred)")
    positions: tuple[str, ...] = option(POSITIONS, help="where the circuit's nodes are kept and the rest ablated: end "
                                                        "(END only) and/or all (every position, as MIB)")
    edges: bool = option(True, help="also score EAP-IG's edge ranking at edge level, at --edge-positions (with "
                                    "--rankings eap-ig; pre-norm models)")
    # end,all by default (issue 43): MIB's every-position edge curve (edges@all, so nothing departs from MIB) beside
    # the paper's END view, as `positions` keeps nodes at both and the published edge rows (edges@end) stay comparable;
    # edges@all costs 2.1x edges@end's CPU time since each pair's shared start runs once (docs/speed.md). A result saved
    # before the field existed reads as END only (from_json)
    edge_positions: tuple[str, ...] = option(POSITIONS, help="where an edge circuit's left-out edges carry their "
                                             "ablated value: end (END only, the paper's view) and/or all (every "
                                             "position, MIB's evaluate_graph, about 2x the END curve's time); one "
                                             "curve each (edges@end, edges@all)")
    ablation: str = option("counterfactual", choices=ABLATIONS, help="what an ablated node takes: its value on the "
                                                                    "counterfactual prompt (MIB's), its mean, or zero")
    metric: str = option(MIB_METRIC, choices=METRIC_NAMES, help="m in f = (m(C) - m(empty)) / (m(N) - m(empty)); "
                                                                  "the rankings' effects are read in it too")
    ig_steps: int = option(5, minimum=1, help="EAP-IG's integration steps")
    ig_grid: str = option("left", choices=IG_GRIDS, help="EAP-IG's alphas: left, k/steps for k = 0..steps-1 (what MIB's "
                                                         "circuit track runs, its pinned EAP-IG's edge code), or right, "
                                                         "k = 1..steps (the library before Dec 2024, its node code)")
    count: str = option(MIB_COUNT, choices=COUNTS, help="a size s keeps int(s * n) nodes or edges (floor, MIB's circuit "
                                                      "track) or round(s * n) (round)")
    n_boot: int = option(1000, minimum=0, help="bootstrap resamples over pairs for the intervals (0: none)")
    position_scores: str = option("sum", choices=POSITION_SCORES, help="how a ranking scored at every position "
                                  "(positions, screen, graddrop) gives one score per node: sum (the signed scores "
                                  "summed over positions, MIB's; the absolute ranking orders by |sum|) or max (the "
                                  "score at the position of the largest |score|)")
    cpr_ranking: str = option("signed", choices=CPR_RANKINGS, help="the curve CPR is read from: signed (the signed "
                                                                    "ranking's, MIB's) or absolute (the |score| "
                                                                    "ranking's, which CMD is always read from)")
    held_out: bool = option(True, help="rank on --pairs pairs (--seed) and score the circuits on as many other pairs "
                                       "(--scoring-seed), disjoint by prompt, as MIB scores on a split it did not "
                                       "rank on; --no-held-out ranks and scores on the same pairs")
    in_sample: bool = option(True, help="with --held-out, also score each ranking's circuits (absolute ranking) on "
                                        "the pairs it was found on: the in-sample CMD and its gap to the held-out "
                                        "one (one more curve per ranking and circuit kind)")
    scoring_seed: int = option(-1, minimum=-1, help="seed of the scoring pairs with --held-out (-1: --seed + 1); with "
                                        "--pairs-from, the scoring pairs are the --pairs saved pairs after the first")
    ranking_boot: int = option(0, minimum=0, maximum=10_000, help="with --held-out, resamples of the ranking "
                               "pairs for the node curves of --ranking-boot-rankings: each re-ranks on a resample of "
                               "the ranking pairs and scores the absolute ranking's circuits on a resample of the "
                               "scoring pairs, so its CMD interval holds the ranking's own variance too (0: none; each "
                               "resample costs one ranking and one curve per node setting)")
    ranking_boot_rankings: tuple[str, ...] = option(CHEAP_RANKINGS, unique=True, nonempty=True, help="the rankings --ranking-boot "
                                                    "re-ranks, comma-separated (default: all but positions, the "
                                                    "costly one)")
    input_node: bool = option(True, help="rank the input (embedding) node with the heads and MLPs, count it in each "
                                         "size and ablate it where a circuit leaves it out, as MIB's node graph (every "
                                         "ranking scores it by its own method); --no-input-node: heads and MLPs "
                                         "only, the input always kept")
    answer_position: str = answer_position_option(whole=False)
    force: bool = force_option()

    def __post_init__(self) -> None:
        super().__post_init__()
        check_metric(self.metric)
        if self.metric == "answer_logprob":  # m(C) is read from circuits' END readouts: logit, logit_diff or prob
            raise ValueError("--metric answer_logprob: faithfulness reads the answer logit, logit difference or "
                             "probability of each circuit; accepted: logit_diff, prob, fraction, relative_logit")
        position = one_answer_token(self.answer_position, "a faithfulness curve reads one answer token",
                                    self.pairs_file or self.pairs_from)
        if position != 0 and self.second_logit == "label":
            raise ValueError(f"--answer-position {position} with --second-logit label: the counterfactual's label is "
                             "its answer's first token, read at END; give --second-logit top")
        if self.task == "all":
            raise ValueError("--task all: a faithfulness run scores one operation; give --task addition (or another), "
                             "or run experiments/faithfulness.py for the four")
        accepted = node_engines()
        if not self.rankings:
            raise ValueError(f"Give at least one ranking; accepted: {', '.join(accepted)}")
        for r in self.rankings:
            if r not in accepted:
                raise ValueError(f"Unknown ranking {r!r}; accepted: {', '.join(accepted)}")
        if len(set(self.rankings)) < len(self.rankings):
            raise ValueError(f"--rankings names a ranking twice: {','.join(self.rankings)}")
        if not self.positions or any(p not in POSITIONS for p in self.positions):
            raise ValueError(f"Unknown positions {','.join(self.positions) or '(none)'}; accepted: "
                             f"{', '.join(POSITIONS)} (one or both)")
        if not self.edge_positions or any(p not in POSITIONS for p in self.edge_positions) or \
                len(set(self.edge_positions)) < len(self.edge_positions):
            raise ValueError(f"Unknown --edge-positions {','.join(self.edge_positions) or '(none)'}; accepted: "
                             f"{', '.join(POSITIONS)} (one or both, once each)")
        if not self.sizes or any(not (0 < s <= 1) for s in self.sizes):
            raise ValueError(f"--sizes must be fractions in (0, 1] (0.01 = 1% of the nodes), got "
                             f"{','.join(f'{s:g}' for s in self.sizes) or '(none)'}; MIB's: "
                             f"{','.join(f'{s:g}' for s in MIB_SIZES)}")
        if list(self.sizes) != sorted(set(self.sizes)):
            raise ValueError(f"--sizes must increase, without repeats, got {','.join(f'{s:g}' for s in self.sizes)}")
        if self.ablation not in ABLATIONS:
            raise ValueError(f"Unknown ablation {self.ablation!r}; accepted: {', '.join(ABLATIONS)}")
        if self.ig_grid not in IG_GRIDS:
            raise ValueError(f"Unknown --ig-grid {self.ig_grid!r}; accepted: {', '.join(IG_GRIDS)}")
        if self.count not in COUNTS:
            raise ValueError(f"Unknown --count {self.count!r}; accepted: {', '.join(COUNTS)}")
        if self.ig_steps < 1:
            raise ValueError(f"--ig-steps must be 1 or more, got {self.ig_steps}")
        if self.n_boot < 0:
            raise ValueError(f"--n-boot must be 0 or more, got {self.n_boot}")
        if self.position_scores not in POSITION_SCORES:
            raise ValueError(f"Unknown --position-scores {self.position_scores!r}; accepted: {', '.join(POSITION_SCORES)}")
        if self.cpr_ranking not in CPR_RANKINGS:
            raise ValueError(f"Unknown --cpr-ranking {self.cpr_ranking!r}; accepted: {', '.join(CPR_RANKINGS)}")
        for r in self.ranking_boot_rankings:
            if r not in accepted:
                raise ValueError(f"--ranking-boot-rankings: unknown ranking {r!r}; accepted: {', '.join(accepted)}")
        if self.ranking_boot and not self.held_out:
            raise ValueError(f"--ranking-boot {self.ranking_boot} resamples the ranking pairs apart from the scoring "
                             "pairs: give --held-out (or --ranking-boot 0)")
        if self.held_out and self.scoring_seed == self.seed:
            raise ValueError(f"--scoring-seed {self.scoring_seed} is --seed: the scoring pairs must be drawn with "
                             "another seed (or -1: --seed + 1)")

    @classmethod
    def from_json(cls, data: dict) -> FaithfulnessConfig:
        """From saved JSON; a run saved before ``input_node`` existed had no input node in any circuit, and one saved
        before ``edge_positions`` scored edges at END only; each reads so (its ``mib()`` then names the departure)."""
        config = super().from_json(data)
        config = config if "input_node" in data else config.replace(input_node=False)
        return config if "edge_positions" in data else config.replace(edge_positions=("end",))

    @property
    def score_seed(self) -> int | None:
        """The seed the scoring pairs are built with (held out): ``scoring_seed``, or ``seed + 1``; None from a pairs
        file (its lines after the ranking ones are the scoring pairs, no seed draws them)."""
        if self.seed is None:
            return None
        return self.scoring_seed if self.scoring_seed >= 0 else self.seed + 1

    def mib(self) -> dict[str, object]:
        """How this run's measurement stands to MIB's: ``departs`` (each config field whose value is not MIB's:
        ``{field: {"here": value, "mib": MIB's}}``; empty when every one is MIB's) and ``fixed`` (what differs whatever
        the config says, :data:`FIXED_DEVIATIONS`)."""
        departs = {k: {"here": getattr(self, k) if getattr(self, k) is not None else "the --pairs-file's own",
                       "mib": v} for k, v in MIB_VALUES.items() if getattr(self, k) != v}
        if self.edges and "all" not in self.edge_positions:  # MIB ablates a circuit's edges at every position
            departs["edge_positions"] = {"here": list(self.edge_positions), "mib": ["all"]}
        return {"departs": departs, "fixed": dict(FIXED_DEVIATIONS)}

    def settings(self) -> list[str]:
        """The node curves measured per ranking: ``nodes@end``, ``nodes@all`` (EAP-IG with ``edges`` adds
        :meth:`edge_settings`)."""
        return [f"nodes@{p}" for p in self.positions]

    def edge_settings(self) -> list[str]:
        """The edge curves of a ranking that scores edges (EAP-IG, with ``edges``): ``edges@end``, ``edges@all``
        (every position, MIB's), as ``edge_positions`` says."""
        return [f"edges@{p}" for p in self.edge_positions]
