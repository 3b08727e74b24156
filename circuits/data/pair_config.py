"""How prompt pairs are built (:class:`PairConfig`), declared once with the flags and help texts every job's command
line shows for it (``--task``, ``--pairs``, ``--seed``, ``--few-shot``, ``--prefix-policy``, ``--filter-correct``).

:class:`~circuits.data.source.PairSpec` (the model and the pairs of a job) derives from it, and so every job config
that patches pairs. Imports neither torch nor transformer_lens."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from circuits.config import Config, count, option
from circuits.data.templates import TASKS, templates_for
from circuits.types import PAIRS_FILE_REPLACES

FewShot = Literal["auto", "on", "off"]
PrefixPolicy = Literal["keep", "counterfactual"]
# How a counterfactual prompt differs from its reference, each kind named for what it is: the paper's replaces the
# calculation word or symbol ("operator": the counterfactual asks for no number, Section 3); "operand" changes one
# operand, every word kept, so the counterfactual's answer is another number; "random" is another problem of the same
# operation in the same template (both operands and the words drawn anew, its answer another number), what MIB's
# arithmetic tasks use (MIB_circuit_track/dataset.py: the row's random_counterfactual).
CounterfactualKind = Literal["operator", "operand", "random"]
COUNTERFACTUAL_KINDS: tuple[str, ...] = ("operator", "operand", "random")
# The second token of the logit difference logit(answer) - logit(second): the counterfactual run's top token at END
# ("top", the toolkit's since the paper's counterfactual has no answer of its own) or the counterfactual's own answer
# ("label", MIB's: dataset.py takes random_counterfactual's label as the incorrect index). "label" needs a
# counterfactual with an answer (operand or random; a --pairs-file line's "counterfactual_answer").
SecondLogit = Literal["top", "label"]
SECOND_LOGITS: tuple[str, ...] = ("top", "label")
# Where an answer of several tokens is read (issue 42): its k-th token at END + k (the earlier ones teacher-forced),
# or the whole answer. The largest k accepted: no answer a pairs file holds needs more.
WHOLE_ANSWER = "whole"
MAX_ANSWER_POSITION = 63
# The pair fields only the task's templates read (circuits.data.pairs.build_pairs): with a --pairs-file the lines are
# the prompts, counterfactuals and answers, so these are None in the config (and its config.json: issue 40, no unused
# defaults recorded). --pairs (a cap on the lines read), --filter-correct and --second-logit still apply, and --task
# names the operation the file's pairs ask (the result's label; heuristics' grid, positions' templates). The tuple:
# circuits.types.PAIRS_FILE_REPLACES.


def answer_position(text: str | int) -> int | str:
    """``--answer-position`` read: ``0``, ``1``, ... (the answer's token at END + k) or ``whole``; anything else is
    one ``ValueError`` naming the flag."""
    t = str(text).strip().lower()
    if t == WHOLE_ANSWER:
        return WHOLE_ANSWER
    if not t.isdigit() or int(t) > MAX_ANSWER_POSITION:
        raise ValueError(f"--answer-position {text!r}: accepted: 0..{MAX_ANSWER_POSITION} (the answer's token at END + "
                         f"that many) or {WHOLE_ANSWER} (the sum of its tokens' log-probabilities)")
    return int(t)


def one_answer_token(text: str | int, reads: str, pairs_given: Any) -> int:
    """``--answer-position`` of a job that reads one answer token (``reads``: what it reads there, said when refusing
    ``whole``); a position past 0 needs answers of several tokens, which only a pairs file (``pairs_given``: the
    job's --pairs-file or --pairs-from) gives, the templates' answers being one token."""
    position = answer_position(text)
    if position == WHOLE_ANSWER:
        raise ValueError(f"--answer-position whole: {reads}; accepted: 0, 1, ...")
    if position != 0 and not pairs_given:
        raise ValueError(f"--answer-position {position}: the task's templates give one-token answers only; give "
                         "--pairs-file (or --pairs-from a result made from one) with answers of several tokens")
    return int(position)


def answer_position_text(text: str) -> str:
    """The flag's value as the config keeps it (``"0"``, ``"1"``, ..., ``"whole"``), checked."""
    return str(answer_position(text))


def answer_position_option(whole: bool = True) -> Any:
    """The ``--answer-position`` field, declared once for every job config that reads a later answer token (its help
    says whether the job reads the whole answer too); the config's ``__post_init__`` checks it
    (:func:`answer_position`)."""
    return option("0", parse=answer_position_text, help=(
        "which answer token is read (answers of several tokens, from --pairs-file): 0 = the first, at END; k = the "
        "answer's token k at END + k, both prompts teacher-forced with the answer's first k tokens" + (
            "; whole = the sum of its tokens' log-probabilities (metric answer_logprob), one sweep per position"
            if whole else "") + "; a pair whose answer is too short is refused before the work"))


@dataclass(frozen=True)
class PairConfig(Config):
    """How to build pairs. ``task``: an operation, ``addition_extra``, ``exponentiation`` or ``all``."""

    task: str = option("addition", help="the operation whose prompts are patched ('all': the four, pooled)",
                       choices=TASKS)
    n_pairs: int = count(64, flag="--pairs", help="prompt pairs (per operation for --task all)")
    # None: a --pairs-file replaced it (replaced_by_pairs_file), for seed, few_shot, prefix_policy, counterfactual,
    # operand_range and max_candidates alike
    seed: int | None = option(0, minimum=0, help="seed of the operands, templates and words")
    few_shot: FewShot | None = option("auto", choices=("auto", "on", "off"),
                               help="a few-shot prefix of solved examples ('auto': below 1B parameters)")
    prefix_policy: PrefixPolicy | None = option("keep", choices=("keep", "counterfactual"),
                                         help="counterfactual prompts keep the reference's few-shot prefix, or get "
                                              "counterfactual examples")
    counterfactual: CounterfactualKind | None = option(
        "operator", choices=COUNTERFACTUAL_KINDS,
        help="operator: the paper's counterfactual (the operation word or symbol replaced, no answer); operand: one "
             "operand changed, every word kept; random: another problem of the same template, both operands and the "
             "words drawn anew (MIB's random_counterfactual); operand and random answer another number")
    second_logit: SecondLogit = option(
        "top", choices=SECOND_LOGITS,
        help="the second token of logit_diff: top (the counterfactual run's top token at END) or label (the "
             "counterfactual's own answer, MIB's; --counterfactual operand or random, or a --pairs-file line's "
             "counterfactual_answer)")
    filter_correct: bool = option(True, help="keep only pairs the model answers correctly")
    pairs_file: str = option("", help="your own pairs instead of the task's templates: a JSONL file, one "
                                      '{"prompt": ..., "counterfactual": ..., "answer": ...} a line (or "answers": '
                                      "[...], the first is the answer); --pairs caps how many are read")
    operand_range: tuple[int, int] | None = option((1, 9), cli=False)
    max_candidates: int | None = count(2048, cli=False)

    # The fields of PAIRS_FILE_REPLACES this job reads for nothing but drawing the task's pairs: with a pairs file they
    # are None. A job that reads one for something else too keeps it (IdentifyConfig: the seed of the bootstrap
    # resamples; heuristics: the seed and few-shot prefix of its operand grid).
    replaced_by_pairs_file: ClassVar[tuple[str, ...]] = PAIRS_FILE_REPLACES

    def __post_init__(self) -> None:
        templates_for(self.task)  # raises on an unknown task
        for name in PAIRS_FILE_REPLACES:
            if self.pairs_file and name in self.replaced_by_pairs_file:  # not used: None, so the saved config
                object.__setattr__(self, name, None)  # records no default the file replaced (frozen: set while built)
            elif getattr(self, name) is None:
                raise ValueError(f"{name} is None, which only a --pairs-file run of a job that reads it for nothing "
                                 "but the templates' pairs records; give a value")
        if self.pairs_file and self.task == "all":  # the one file would be pooled four times, as four operations
            raise ValueError(f"--pairs-file {self.pairs_file} with --task all: the file's pairs would stand for each of "
                             "the four operations; give the operation they ask (e.g. --task addition)")
        if self.few_shot not in ("auto", "on", "off", None):
            raise ValueError(f"few_shot must be 'auto', 'on' or 'off', got {self.few_shot!r}")
        if self.prefix_policy not in ("keep", "counterfactual", None):
            raise ValueError(f"prefix_policy must be 'keep' or 'counterfactual', got {self.prefix_policy!r}")
        if self.counterfactual not in (*COUNTERFACTUAL_KINDS, None):
            raise ValueError(f"counterfactual must be one of {', '.join(COUNTERFACTUAL_KINDS)}, got {self.counterfactual!r}")
        if self.second_logit not in SECOND_LOGITS:
            raise ValueError(f"second_logit must be one of {', '.join(SECOND_LOGITS)}, got {self.second_logit!r}")
        if self.counterfactual not in ("operator", None) and self.prefix_policy == "counterfactual":
            raise ValueError(f"--counterfactual {self.counterfactual} keeps the reference's few-shot prefix (its solved "
                             "examples stay solved); give --prefix-policy keep")
        if self.second_logit == "label" and self.counterfactual == "operator" and not self.pairs_file:
            raise ValueError("--second-logit label with --counterfactual operator: the operator counterfactual asks for "
                             "no number, so it has no answer to take; give --counterfactual random (MIB's) or operand, "
                             "or --second-logit top")
        r = self.operand_range
        if r is not None and not (isinstance(r, (tuple, list)) and len(r) == 2 and all(isinstance(x, int) for x in r) and 0 <= r[0] <= r[1]):
            raise ValueError(f"operand_range must be two integers (low, high) with 0 <= low <= high, got {self.operand_range}")
