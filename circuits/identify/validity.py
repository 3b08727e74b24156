"""Whether a ranking of components can be trusted, from what the sweep already measured (issue 40).

:class:`Validity` holds four numbers a referee asks before reading a list of key heads -- does the model answer the
prompts, does the counterfactual remove the answer, how far does it move the answer logit, and how many key components
could other pairs leave out -- and the warnings and refusals they imply under :data:`THRESHOLDS` (each number and why
in docs/identify.md, "Can this result be trusted?"). A result saves it in ``summary.json`` (``validity``) and loads it
back; the command line prints its warnings, the report puts them above the run's figure, and the job refuses a result
past a hard threshold unless ``--force``.
"""

from __future__ import annotations

import math
import os
from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True)
class Threshold:
    """A check's soft (warn) and hard (refuse) limits; ``below``: the check fails when the value is below them (else
    above). ``hard`` None: warn only. ``fix``: what to change, said in the refusal."""

    name: str
    what: str
    warn: float | None
    hard: float | None
    below: bool
    fix: str
    unit: str = "{:.0%}"

    def limit(self, value: float) -> str:
        return self.unit.format(value)

    def past(self, value: float, limit: float | None) -> bool:
        return limit is not None and (value < limit if self.below else value > limit)


THRESHOLDS: dict[str, Threshold] = {t.name: t for t in (
    Threshold("n_pairs", "only {v:.0f} pairs were swept", None, 3, True, "more pairs (--pairs, or more lines in the "
              "pairs file; with --filter-correct only the pairs the model answers are kept)", "{:.0f}"),
    Threshold("accuracy", "the model answers {v:.0%} of the pairs swept", 0.9, 0.5, True,
              "pairs the model answers: solved examples in front of each prompt (--few-shot on for a task's templates; "
              "written into your own prompts), or --filter-correct"),
    Threshold("accuracy_before_filtering", "the model answers {v:.0%} of the candidate pairs before filtering, so the "
              "key heads describe the few it gets right", 0.25, None, True,
              "a few-shot prefix where there was none (--few-shot on), easier templates, or a model that does the task"),
    Threshold("counterfactual_keeps_answer", "the counterfactual prompt still yields the answer in {v:.0%} of the "
              "pairs", 0.5, 0.9, False, "another counterfactual, one that removes the calculation"),
    Threshold("full_effect", "the whole counterfactual moves the answer logit by {v:.1%} of its size", 0.05, 0.01, True,
              "another counterfactual, one that removes the calculation, or pairs the model answers"),
    Threshold("uncertain_share", "{v:.0%} of the key heads are uncertain (their bootstrap interval reaches the key "
              "rule's threshold)", 2 / 3, None, False, "more pairs (--pairs)"),
)}


@dataclass(frozen=True)
class Validity:
    """The checks of one ranking (NaN-free: a number that could not be measured is None and checks nothing).

    ``accuracy``: share of the swept pairs whose reference run ranks the answer first; ``accuracy_before_filtering``:
    share of the candidates built or read (None for pairs given directly); ``counterfactual_keeps_answer``: share of
    the swept pairs whose counterfactual run's top token is the answer; ``full_effect``: how much the whole
    counterfactual lowers the mean answer logit, as a share of it (``-mean(cf_logit - logit) / mean(logit)``; the
    denominator of the ``fraction`` metric over the answer logit's size); ``uncertain_share``: uncertain key heads
    over key heads (None without intervals or key heads). ``warnings`` and ``refusals`` are the lines the thresholds
    give; ``forced``: the config's ``force`` (a result past a hard threshold saved anyway)."""

    n_pairs: int
    accuracy: float | None = None
    accuracy_before_filtering: float | None = None
    counterfactual_keeps_answer: float | None = None
    full_effect: float | None = None
    uncertain_share: float | None = None
    n_key_heads: int = 0
    forced: bool = False
    warnings: tuple[str, ...] = field(default=())
    refusals: tuple[str, ...] = field(default=())

    @classmethod
    def measure(cls, n_pairs: int, *, forced: bool = False, **values: float | None) -> Validity:
        """The record of ``values`` (the fields above by name) with the warnings and refusals of :data:`THRESHOLDS`."""
        values = {"n_pairs": n_pairs, **values}
        clean = {k: (None if v is None or not math.isfinite(float(v)) else float(v)) for k, v in values.items()}
        warnings, refusals = [], []
        for name, t in THRESHOLDS.items():
            v = clean.get(name)
            if v is None or (name == "uncertain_share" and not values.get("n_key_heads")):
                continue
            line = t.what.format(v=v)
            side = "below" if t.below else "above"
            if t.past(v, t.hard):
                refusals.append(f"{line} ({side} {t.limit(t.hard)}; use {t.fix})")  # type: ignore[arg-type]
            elif t.past(v, t.warn):
                warnings.append(f"{line} ({side} {t.limit(t.warn)}; try {t.fix})")  # type: ignore[arg-type]
        n_key = int(values.get("n_key_heads") or 0)
        clean.pop("n_key_heads", None)
        clean.pop("n_pairs", None)
        return cls(n_pairs, **clean, n_key_heads=n_key, forced=forced,  # type: ignore[arg-type]
                   warnings=tuple(warnings), refusals=tuple(refusals))

    @property
    def trusted(self) -> bool:
        return not self.warnings and not self.refusals

    def lines(self) -> list[str]:
        """Every warning and (for a forced or Python-made result) every refusal, as sentences."""
        return [*(f"refused without force: {r}" for r in self.refusals), *self.warnings]

    def refusal(self, what: str = "identify") -> str:
        """The one line a job stops with."""
        return (f"{what} refused, this result cannot be trusted: {'; '.join(self.refusals)}. Pass --force "
                f"(force=True) to save it anyway, with this warning")

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["warnings"], d["refusals"] = list(self.warnings), list(self.refusals)
        d["thresholds"] = {t.name: {"warn": t.warn, "refuse": t.hard, "fails_when": "below" if t.below else "above"}
                           for t in THRESHOLDS.values()}
        return d

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Validity:
        if not isinstance(d, dict):
            raise ValueError(f"validity must be a JSON object, got {type(d).__name__}")
        names = {f for f in cls.__dataclass_fields__}
        values = {k: v for k, v in d.items() if k in names}
        for k, v in values.items():  # a number saved as text is one line, never a string where a number was
            if k in ("warnings", "refusals"):
                if not isinstance(v, (list, tuple)) or not all(isinstance(x, str) for x in v):
                    raise ValueError(f"{k} must be a list of sentences, got {v!r}")
            elif k == "forced":
                if not isinstance(v, bool):
                    raise ValueError(f"forced must be true or false, got {v!r}")
            elif v is not None and (isinstance(v, bool) or not isinstance(v, (int, float))):
                raise ValueError(f"{k} must be a number or null, got {v!r}")
        values["warnings"] = tuple(values.get("warnings", ()))
        values["refusals"] = tuple(values.get("refusals", ()))
        return cls(**values)


def baseline_checks(baseline: Any) -> dict[str, float]:
    """The checks one sweep's unpatched runs give (:class:`~circuits.patching.core.metrics.Baseline`, per pair):
    ``accuracy`` (where the reference run's answer rank was kept), ``counterfactual_keeps_answer`` and
    ``full_effect`` -- for any job whose sweep keeps a baseline (identify, positions)."""
    b = baseline
    out = {"counterfactual_keeps_answer": float((b.cf_answer == b.answer).float().mean()),
           "full_effect": float(-b.full_effect.mean() / b.logit.mean().abs().clamp(min=1e-6))}
    if b.answer_rank is not None:
        out["accuracy"] = float((b.answer_rank == 0).float().mean())
    return out


class Untrusted(ValueError):
    """A result past a hard threshold of :data:`THRESHOLDS`, refused by its job without ``--force``."""


@dataclass(eq=False, repr=False)
class CheckedPairs:
    """A result whose job checked its pairs before the work (:func:`check_job`): ``validity()`` is that record, kept
    in ``summary.json``; None for a result saved before its job checked (no banner, no warning)."""

    _validity: Validity | None = field(default=None, repr=False, compare=False, kw_only=True)

    def validity(self) -> Validity | None:
        return self._validity


class ValidityWarning(UserWarning):
    """A result past a soft threshold (or a hard one, made from Python or with ``force``): its lines say which."""


FORCE_ENV = "CIRCUITS_FORCE"  # "1": every job goes on as with --force (the unit tests' random models answer nothing)


def forced(force: bool) -> bool:
    """``force``, or the environment's :data:`FORCE_ENV` set to 1."""
    return bool(force) or os.environ.get(FORCE_ENV) == "1"


def refuse_untrusted(validity: Validity, force: bool, what: str = "identify") -> None:
    """Raise :class:`Untrusted` (one line: what was measured and what to change) when ``validity`` is past a hard
    threshold and neither ``force`` nor :data:`FORCE_ENV` is set."""
    if validity.refusals and not forced(force):
        raise Untrusted(validity.refusal(what))


# --- the same checks for every job that ranks components (screen, neurons, ...) ------------------------------------

FORCE_HELP = ("save the result even when it is past a hard validity threshold (few pairs the model answers, a "
              "counterfactual that keeps the answer or barely moves it; docs/identify.md); its warning is saved with it")


def force_option() -> Any:
    """The ``force`` field of every job config that checks validity (declared once here; ``--force`` on the command
    line)."""
    from circuits.config import option

    return option(False, help=FORCE_HELP)


def pair_checks(model: Any, pairs: Any, chunk: int = 16) -> dict[str, float]:
    """:func:`baseline_checks` of ``pairs`` from one batched forward pass of the reference and the counterfactual
    prompts (``chunk`` pairs at a time), read at each pair's END: for a job whose engine keeps no baseline. "The
    counterfactual keeps the answer" reads the counterfactual run's top token, also for pairs that carry a label
    (faithfulness's ``--second-logit label``), whose logit difference would take the label instead."""
    import torch

    from circuits.data.pairs import PairBatch
    from circuits.models.forward import pad_token_id
    from circuits.patching.core.metrics import Baseline

    parts = []
    with torch.no_grad():
        for i in range(0, len(pairs), chunk):
            b = PairBatch.from_pairs(list(pairs[i:i + chunk]), pad_token_id(model), device=model.cfg.device)
            rows = torch.arange(len(b.end), device=b.end.device)
            ref = model(b.reference)[rows, b.end].float()
            cf = model(b.counterfactual)[rows, b.end].float()
            cf_answer = cf.argmax(-1)  # the counterfactual run's own answer, never the pair's label
            logit, cf_logit = ref[rows, b.answer], cf[rows, b.answer]
            rank = (ref > logit[:, None]).sum(-1)
            ld, cf_ld = logit - ref[rows, cf_answer], cf_logit - cf[rows, cf_answer]
            parts.append([t.cpu() for t in (b.answer, cf_answer, logit, ld, ref.softmax(-1)[rows, b.answer], cf_logit,
                                            cf_ld, cf.softmax(-1)[rows, b.answer], rank)])
    cols = [torch.cat(c) for c in zip(*parts)]
    return baseline_checks(Baseline(*cols[:8], answer_rank=cols[8]))


def check_job(model: Any, pairs: Any, stats: dict[str, Any] | None, config: Any, what: str,
              refuse: bool = True) -> Validity:
    """The :class:`Validity` of a job's ``pairs`` before its sweep (:func:`pair_checks`, and ``stats``' accuracy
    before filtering where the pairs were filtered): with ``refuse`` (the job, the command line) refused in one line
    past a hard threshold without ``config.force`` (:class:`Untrusted`); else (and from Python) a
    :class:`ValidityWarning` with its lines when there are any."""
    import warnings

    values: dict[str, Any] = pair_checks(model, pairs) if pairs else {}
    before = (stats or {}).get("accuracy")
    if before is not None and getattr(config, "filter_correct", True):
        values["accuracy_before_filtering"] = before
    force = getattr(config, "force", False)
    v = Validity.measure(len(pairs), forced=forced(force), **values)
    if refuse:
        refuse_untrusted(v, force, what)
    if v.lines():
        warnings.warn(f"{what} on {len(pairs)} pairs: " + "; ".join(v.lines()), ValidityWarning, stacklevel=2)
    return v


def validity_from_summary(summary: dict[str, Any], path: Any) -> Validity | None:
    """A saved result's ``validity`` (None for a result saved before its job checked it); a malformed one is one
    line naming the file."""
    if "validity" not in summary:
        return None
    try:
        return Validity.from_json(summary["validity"])
    except (TypeError, ValueError) as err:
        from circuits.results import ResultError

        raise ResultError(f"{path}: field 'validity': {err}") from None


def validity_json(validity: Validity | None) -> dict[str, Any]:
    """The ``validity`` and ``warnings`` fields of a summary.json (none for an older result without a record)."""
    return {} if validity is None else {"validity": validity.to_json(), "warnings": validity.lines()}


def print_warnings(validity: Validity | None, prefix: str) -> None:
    """A job's validity lines on standard error, as identify prints them (the same lines as summary.json's
    ``warnings`` and the report's banner)."""
    import sys

    for line in validity.lines() if validity is not None else ():
        print(f"{prefix} warning: {line}", file=sys.stderr)
