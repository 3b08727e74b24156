"""What decides an identify result (saved as its ``config.json``).

The model and pair fields come from :class:`~circuits.data.source.PairSpec` (declared once, with their flags and help
texts); this config adds what the sweep and the key rule need. Its JSON is flat: ``model``, ``task``, ``n_pairs``,
``seed``, ... at the top level, as the report and older results read them. Imports neither torch nor
transformer_lens (the command line builds its flags from it)."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import ClassVar, TypeVar

from circuits.config import count, option
from circuits.data.pair_config import PAIRS_FILE_REPLACES, WHOLE_ANSWER, answer_position, answer_position_option
from circuits.data.source import PairSpec
from circuits.types import DEFAULT_KEY_RULE, MODES, Receiver, key_rule_parts
from circuits.identify.validity import force_option


@dataclass(frozen=True)
class IdentifyConfig(PairSpec):
    """Everything that decides an identify result: the pairs (:class:`PairSpec`), the sweep and the key rule."""

    mode: str = option("path", help="path patching (the paper's) or activation patching", choices=MODES)
    key_rule: str = option(DEFAULT_KEY_RULE,
                           help="e.g. 'fraction>=0.05', the paper's 'relative_logit<-0.05', or 'top10'")
    receivers: str = option("", help="also path-patch every earlier component into these receivers at END: heads (their "
                                     "q, k and v inputs), LAYER.HEAD.q/k/v, MLP<layer>, or topK (the K most important "
                                     "components), e.g. 20.8,MLP19; writes edges.pt and circuit.html")
    bootstrap: int = count(1000, minimum=0, help="bootstrap resamples of the pairs for the confidence intervals (0: none)")
    prob: str = option("key", choices=("key", "all"),
                       help="the answer probability after patching (a log-sum-exp over the vocabulary per patched row) "
                            "for the key heads and MLPs only, in a second small pass, or for every component; "
                            "NaN elsewhere (always 'all' when the key rule's metric is prob or answer_logprob, "
                            "and at --answer-position whole)")
    answer_position: str = answer_position_option()
    force: bool = force_option()

    # With a pairs file the seed still seeds the bootstrap resamples of the intervals (IdentifyResult.intervals), and
    # in the jobs that take their heads from identify, transfer's sets and numbers' problems: kept
    replaced_by_pairs_file: ClassVar[tuple[str, ...]] = tuple(n for n in PAIRS_FILE_REPLACES if n != "seed")

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.mode not in MODES:
            raise ValueError(f"Unknown mode {self.mode!r}; accepted: {', '.join(MODES)}")
        if self.prob not in ("key", "all"):
            raise ValueError(f"prob must be 'key' or 'all', got {self.prob!r}")
        key_rule_parts(self.key_rule)  # torch-free: a bad --key-rule is one line before torch is imported
        if self.receivers and not self.receivers.strip().lower().startswith("top"):
            Receiver.parse_many(self.receivers)
        if answer_position(self.answer_position) == WHOLE_ANSWER and self.receivers:  # edges are read at one END
            raise ValueError("--receivers with --answer-position whole: edges are measured at one answer position; "
                             "give --answer-position 0, 1, ... (or no --receivers)")
        if self.bootstrap < 0:
            raise ValueError(f"bootstrap must be 0 (no intervals) or more, got {self.bootstrap}")

    def for_task(self, task: str) -> IdentifyConfig:
        return self.replace(task=task)


# What a result made from key heads (a knockout, attention roles, the logit lens, ...) records of the identify run
# they came from: that run's whole config, so two results agree on their heads exactly when these are equal.
KeyHeadSource = IdentifyConfig


F = TypeVar("F", bound="FromIdentify")

# The pair fields a job that takes its heads from an identify result may set to other values than that result's
# (``knockout --heads-from id --pairs-file mine.jsonl``): its own pairs, the heads still the result's. The task, the
# model and the sweep's fields stay the result's (its heads were found on them).
OWN_PAIR_FIELDS: tuple[str, ...] = ("n_pairs", "seed", "pairs_file", "few_shot", "prefix_policy", "counterfactual",
                                    "filter_correct", "operand_range", "max_candidates")  # the last two: None with a
# pairs file of the job's own (circuits.data.pair_config.PAIRS_FILE_REPLACES)


@dataclass(frozen=True)
class FromIdentify(KeyHeadSource):
    """The identify run a command takes its key heads and pairs from: the result saved in ``heads_from`` (its
    config then replaces this one's identify fields), or, without it, the run these fields describe, made first (in
    memory, not saved)."""

    heads_from: str = option("", help="an identify result folder (circuits identify --out; for --task all, one task's "
                                      "sub-folder): its key heads and pairs, its model, task and pair fields; --pairs, "
                                      "--pairs-file, --seed, --few-shot, --counterfactual, ... given with it build this "
                                      "job's own pairs instead (the heads stay the folder's). Default: run identify "
                                      "first with the flags given")
    receivers: str = option("", cli=False)  # no job here reads edges: no --receivers flag

    def with_identify(self: F, made: IdentifyConfig) -> F:
        """This config with the identify fields of ``made`` (the run its heads come from), ``receivers`` kept, and the
        job's own pairs where given: a field of :data:`OWN_PAIR_FIELDS` set here to other than its default (``--pairs
        16``, ``--pairs-file p.jsonl``) is kept, so the job runs ``made``'s heads on those pairs (:meth:`own_pairs`;
        issue 40: it was refused). Any other field set here to neither its default nor ``made``'s value (``--task
        subtraction`` with an addition result) is an error: the result would not be what was asked for."""
        default = type(self)()
        own = {n for n in OWN_PAIR_FIELDS if getattr(self, n) != getattr(default, n)}
        names = [f.name for f in fields(IdentifyConfig) if f.name != "receivers" and f.name not in own]
        clash = [n for n in names if getattr(self, n) != getattr(default, n) and getattr(self, n) != getattr(made, n)]
        if clash:
            asked = ", ".join(f"{n}={getattr(self, n)!r}" for n in clash)
            found = ", ".join(f"{n}={getattr(made, n)!r}" for n in clash)
            raise ValueError(f"--heads-from {self.heads_from} was made with {found}, not {asked}: its identify fields are "
                             f"used, so leave those flags out (or pass another --heads-from)")
        return self.replace(**{n: getattr(made, n) for n in names})

    def own_pairs(self, made: IdentifyConfig) -> bool:
        """Whether this job's pairs are its own, not those of ``made`` (the identify run its heads come from): built
        from pair fields other than ``made``'s."""
        return self.pair_config() != made.pair_config()

    def identify_config(self) -> IdentifyConfig:
        """The identify run these fields describe (``receivers`` left out: no job here needs edges)."""
        return IdentifyConfig(**{f.name: getattr(self, f.name) for f in fields(IdentifyConfig)}).replace(receivers="")
