"""What a patch is measured by: the unpatched baseline and the metrics (Section 4.1).

The engine reads a few END quantities from every patched row -- the answer's logit, its difference to the
counterfactual answer (the counterfactual run's top token, or the pair's own label with ``second_logit="label"``),
the answer's probability -- and a :class:`Metric` turns patched and unpatched
quantities into an effect. The paper's metric is :data:`RELATIVE_LOGIT`; :data:`FRACTION` (:data:`DEFAULT_METRIC`,
the default of every result's ``scores()`` and of the key rule) divides the change by the change the whole
counterfactual causes, which compares across models.

A metric may also be any function of the patched END logits, as TransformerLens's ``patching_metric`` is
(:func:`logits_metric`): ``fn(logits: Float[Tensor, "pair d_vocab"]) -> Float[Tensor, " pair"]``, or
``fn(logits, answers)`` / ``fn(logits, answers, cf_answers)`` to get the batch's answer token ids (and the
counterfactual run's top tokens) in the logits' pair order. Its effect is its change from the unpatched reference
run, averaged over pairs.
"""

from __future__ import annotations

import inspect
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import Any, Protocol

import torch
from jaxtyping import Float, Int
from torch import Tensor

from circuits.types import DEFAULT_METRIC as _DEFAULT_METRIC
from circuits.types import METRIC_NAMES as TYPES_METRIC_NAMES
from circuits.types import MIB_METRIC as _MIB_METRIC

# fn(logits), fn(logits, answers) or fn(logits, answers, cf_answers): see logits_metric
LogitsFn = Callable[..., Float[Tensor, " pair"]]


@dataclass
class Baseline:
    """END quantities of the unpatched runs, one value per pair (float32).

    ``custom`` holds each custom metric's value on the reference run (:func:`logits_metric`).
    """

    answer: Int[Tensor, " pair"]
    cf_answer: Int[Tensor, " pair"]  # the counterfactual run's top prediction, or the pair's label (second_logit)
    logit: Float[Tensor, " pair"]  # answer logit, reference run
    logit_diff: Float[Tensor, " pair"]  # logit(answer) - logit(cf_answer), reference run
    prob: Float[Tensor, " pair"]
    cf_logit: Float[Tensor, " pair"]  # answer logit, counterfactual run
    cf_logit_diff: Float[Tensor, " pair"]
    cf_prob: Float[Tensor, " pair"]
    custom: dict[str, Tensor] = field(default_factory=dict)
    answer_rank: Int[Tensor, " pair"] | None = None  # tokens the reference run ranks above the answer (0: top)

    def _map(self, fn: Callable[[Tensor], Tensor]) -> Baseline:
        values = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in ("custom", "answer_rank")}
        rank = None if self.answer_rank is None else fn(self.answer_rank)
        return Baseline(**{k: fn(v) for k, v in values.items()}, custom={k: fn(v) for k, v in self.custom.items()},
                        answer_rank=rank)

    def to(self, device: str | torch.device) -> Baseline:
        return self._map(lambda t: t.to(device))

    def select(self, idx: Tensor | slice | list[int]) -> Baseline:
        return self._map(lambda t: t[idx])

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Baseline:
        return cls(**{k: v for k, v in d.items() if k in {f.name for f in fields(cls)}})

    @classmethod
    def checked(cls, d: Any, shapes: Any, where: str = "baseline") -> Baseline:
        """The baseline a file holds (``d``: :meth:`to_dict`'s form), each tensor checked by ``shapes`` (a
        :class:`circuits.io.Shapes` of the file) as one value per pair, over the file's one ``pair`` axis: a baseline
        of another pair count, or a value of another kind, is one line naming the file and the field."""
        if not isinstance(d, dict):
            raise shapes.fail(f"{where} is a {type(d).__name__}, not the baseline's tensors")
        ints = ("answer", "cf_answer")
        for f in fields(cls):
            if f.name in ("custom", "answer_rank"):
                continue
            shapes.tensor(f"{where}.{f.name}", d.get(f.name), ("pair",), "int" if f.name in ints else "float")
        if d.get("answer_rank") is not None:
            shapes.tensor(f"{where}.answer_rank", d["answer_rank"], ("pair",), "int")
        custom = d.get("custom", {})
        if not isinstance(custom, dict) or not all(isinstance(k, str) for k in custom):
            raise shapes.fail(f"{where}.custom is a {type(custom).__name__}, not the custom metrics' values by name")
        for k, v in custom.items():
            shapes.tensor(f"{where}.custom.{k}", v, ("pair",))
        return cls.from_dict(d)

    @property
    def full_effect(self) -> Float[Tensor, " pair"]:
        """How much the whole counterfactual prompt moves the answer logit."""
        return self.cf_logit - self.logit


class Patched(Protocol):
    """Patched END quantities, ``[..., pair]`` (a :class:`~circuits.patching.engines.end_sweep.SweepResult` view)."""

    logit: Tensor
    logit_diff: Tensor
    prob: Tensor
    custom: dict[str, Tensor]


@dataclass(frozen=True)
class Metric:
    """A way to score a patch.

    ``per_pair(patched, baseline)`` gives the effect per pair (``[..., pair]``); ``effect`` averages it over
    pairs (``aggregate`` overrides that, e.g. a ratio of means). ``sign`` says which direction is important:
    ``-1`` when a drop of the answer matters, ``+1`` when a large value does; rules and rankings use it.
    """

    name: str
    doc: str
    sign: int
    per_pair: Callable[[Any, Baseline], Tensor]
    aggregate: Callable[[Any, Baseline], Tensor] | None = None
    logits_fn: LogitsFn | None = None  # custom metrics: computed by the engine on every patched row
    logits_args: int = 1  # what logits_fn takes: 1 (logits), 2 (logits, answers), 3 (logits, answers, cf_answers)

    def of_logits(self, logits: Float[Tensor, "pair d_vocab"], answers: Int[Tensor, " pair"],
                  cf_answers: Int[Tensor, " pair"]) -> Tensor:
        """A custom metric's value on END logits, given the pairs' answer ids and the counterfactual run's top tokens
        (each ``[pair]``, in the logits' order); ``logits_fn`` gets as many of them as it takes."""
        assert self.logits_fn is not None, f"{self.name} is a built-in metric, not a function of the logits"
        args = (logits, answers.to(logits.device), cf_answers.to(logits.device))[: self.logits_args]
        return self.logits_fn(*args)

    def effect(self, patched: Any, base: Baseline) -> Tensor:
        if self.aggregate is not None:
            return self.aggregate(patched, base)
        return self.per_pair(patched, base).mean(-1)

    def __str__(self) -> str:
        return self.name


def _negligible(full: Tensor, logit: Tensor) -> Tensor:
    """Where the whole counterfactual moves the answer logit by less than 1e-4 of its size: no fraction exists."""
    return full.abs() <= 1e-4 * logit.abs().clamp(min=1.0)


def _fraction_per_pair(p: Any, b: Baseline) -> Tensor:
    full = b.full_effect
    return ((p.logit - b.logit) / full).masked_fill(_negligible(full, b.logit), float("nan"))


def _fraction_of_means(p: Any, b: Baseline) -> Tensor:
    # A ratio of means: per-pair ratios explode when one pair's full effect is near 0. Means run over the last axis
    # (pairs), so a batch of resamples ``[..., resample, pair]`` (the bootstrap) gets one ratio per resample.
    full = b.full_effect.mean(-1)
    negligible = _negligible(full, b.logit.mean(-1))
    if bool(negligible.all()):
        warnings.warn(f"The counterfactual prompts barely move the answer logit (mean change "
                      f"{float(full.flatten()[0]):.2g}), so 'fraction' is undefined (NaN); check that the counterfactuals "
                      "remove the calculation, or use another metric (relative_logit, logit_diff).", stacklevel=3)
        return torch.full_like((p.logit - b.logit).mean(-1), float("nan"))
    return ((p.logit - b.logit).mean(-1) / full).masked_fill(negligible, float("nan"))


RELATIVE_LOGIT = Metric(
    "relative_logit", "mean over pairs of (patched - original) / original answer logit (the paper's metric)", -1,
    lambda p, b: (p.logit - b.logit) / b.logit)
FRACTION = Metric(
    "fraction", "mean change of the answer logit over the mean change the full counterfactual causes", 1,
    _fraction_per_pair, _fraction_of_means)
LOGIT_DIFF = Metric(
    "logit_diff", "mean change of logit(answer) - logit(counterfactual run's answer)", -1,
    lambda p, b: p.logit_diff - b.logit_diff)
PROB = Metric("prob", "mean change of the answer probability", -1, lambda p, b: p.prob - b.prob)


def _log(prob: Tensor) -> Tensor:
    # A probability that underflowed float32 to 0 counts as the smallest positive float32, not as -inf.
    return prob.clamp_min(torch.finfo(torch.float32).tiny).log()


# The answer's log-probability (issue 42): at one answer position the answer token's; over the whole answer
# (``--answer-position whole``, where the ``prob`` readout is the product of the answer tokens' probabilities, each
# position teacher-forced) the sum of its tokens' log-probabilities.
ANSWER_LOGPROB = Metric(
    "answer_logprob", "mean change of the answer's log-probability (the whole answer: the sum of its tokens')", -1,
    lambda p, b: _log(p.prob) - _log(b.prob))

METRICS: dict[str, Metric] = {m.name: m for m in (RELATIVE_LOGIT, FRACTION, LOGIT_DIFF, PROB, ANSWER_LOGPROB)}
# The metrics that read the patched answer probability (a log-sum-exp over the vocabulary per patched row).
PROB_METRICS: tuple[str, ...] = ("prob", "answer_logprob")
METRIC_NAMES: tuple[str, ...] = tuple(METRICS)
assert METRIC_NAMES == TYPES_METRIC_NAMES, "circuits.types.METRIC_NAMES lists the built-in metrics"
# The metric every ``scores()`` uses when none is given, on every result type (sweeps, positions, neurons, edges,
# identify results), and the default key rule's (``fraction>=0.05``): positive is important, and it compares across
# models. The paper's metric is relative_logit.
DEFAULT_METRIC = _DEFAULT_METRIC
# The metric of the jobs that follow MIB (faithfulness, the information-flow figure): the logit difference, as MIB's
# arithmetic tasks score. Named once; the saved configs hold its value. Every engine (EAP-IG too) defaults to
# DEFAULT_METRIC, through the registry and called directly alike.
MIB_METRIC = _MIB_METRIC


def get_metric(metric: str | Metric) -> Metric:
    """A metric by name (``relative_logit``, ``fraction``, ``logit_diff``, ``prob``, ``answer_logprob``) or as
    given."""
    if isinstance(metric, Metric):
        return metric
    try:
        return METRICS[metric]
    except (KeyError, TypeError):
        raise ValueError(f"Unknown metric {metric!r}; accepted: {', '.join(METRICS)} or a Metric") from None


def _logits_args(fn: Callable) -> int:
    """How many of ``(logits, answers, cf_answers)`` ``fn`` takes: its positional parameters without a default
    (all three with ``*args``); a callable without a signature (a builtin) takes the logits alone."""
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return 1
    if any(p.kind is p.VAR_POSITIONAL for p in params):
        return 3
    n = sum(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.default is p.empty for p in params)
    if not 1 <= n <= 3:
        raise ValueError(f"logits_metric: {getattr(fn, '__name__', fn)!r} takes {n} required positional arguments; "
                         "accepted: fn(logits), fn(logits, answers) or fn(logits, answers, cf_answers)")
    return n


def logits_metric(fn: LogitsFn, name: str = "custom", sign: int = -1, doc: str = "") -> Metric:
    """A metric from a function of the END logits, as TransformerLens's ``patching_metric``.

    ``fn`` returns one value per pair and takes, by its number of required positional parameters (read once here):

    - ``fn(logits)``: ``[pair, d_vocab]`` END logits (float32, pairs in batch order);
    - ``fn(logits, answers)``: also the pairs' answer token ids ``[pair]``, in the same order as the logits' rows
      (``logits[torch.arange(len(answers)), answers]`` is the answer logit, the built-in ``logit`` readout);
    - ``fn(logits, answers, cf_answers)``: also the counterfactual answer per pair, what ``logit_diff`` subtracts
      (the counterfactual run's top token at END, or the pair's label: :func:`~circuits.data.pairs.second_answers`).

    Every engine calls it the same way (on each chunk of pairs it patches, with those pairs' ids), so the user
    need not capture answer ids in batch order. The effect is ``fn(patched) - fn(reference)``, averaged over pairs;
    ``sign`` says whether a drop (``-1``) or a rise (``+1``) is important.
    """
    if name in METRICS:
        raise ValueError(f"{name!r} is a built-in metric; give the custom metric another name")
    if sign not in (-1, 1):
        raise ValueError("sign must be -1 (a drop is important) or +1")
    return Metric(name, doc or f"change of {getattr(fn, '__name__', 'a custom function')} of the END logits", sign,
                  lambda p, b: p.custom[name] - b.custom[name], None, fn, _logits_args(fn))
