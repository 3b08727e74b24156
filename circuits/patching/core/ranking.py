"""Rules that pick the key components from a sweep (Section 5.1), and the one head ranking.

A rule is a threshold on one metric or the top k by one metric, written as a string:

- ``relative_logit<-0.05``: the paper's rule (effect below -5% of the answer logit, set on LLaMA2-7B);
- ``fraction>=0.05``: heads that carry at least 5% of the full counterfactual's effect on the answer
  logit (the default: it compares across models, see ``docs/identify.md``);
- ``logit_diff<-0.5``, ``prob<-0.02``: thresholds on the other metrics;
- ``top10`` or ``top10:relative_logit``: the k most important heads by a metric (default ``fraction``).

"Most important" follows each metric's sign (:attr:`circuits.patching.core.metrics.Metric.sign`): a drop of the
answer logit, logit difference or probability; a large positive fraction.

The one ranking. :func:`order` is the only sign-and-sort of effects in the package: ``effects * sign`` from the
largest down, ties in the order of the flat index (a stable sort, so every path orders ties alike), NaN entries
(components not swept) last or left out. Built on it: :func:`ranked_entries` (any shape, with indices),
:func:`rank` (heads ``[layer, head]``), :func:`rank_mlps` (MLPs ``[layer]``) and :meth:`KeyRule.select`;
:func:`contributions` sorts the effects themselves (how concentrated they are). Results,
rules, knockout curves, fine-tuning, screens, edges, neurons and the figures all order components through them
(``tests/unit/test_rules.py`` greps the package for any other ``argsort``).
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

import torch
from jaxtyping import Float, Int
from torch import Tensor

from circuits.patching.core.metrics import DEFAULT_METRIC, METRICS
from circuits.types import DEFAULT_KEY_RULE as _DEFAULT_KEY_RULE
from circuits.types import Head, key_rule_parts

DEFAULT_KEY_RULE = _DEFAULT_KEY_RULE  # declared with the vocabulary: configs read it without torch
assert DEFAULT_KEY_RULE.startswith(DEFAULT_METRIC), "the default key rule ranks by the default metric"
Ranked = tuple[Head, float]


class KeyRuleWarning(UserWarning):
    """A threshold rule selected no heads (the message names the largest effect and the threshold)."""


def why_empty(rule: KeyRule, effects: Float[Tensor, "..."], sign: int, what: str = "heads") -> str:
    """Why threshold ``rule`` selects nothing: the most important finite effect and where it lies against the
    threshold, with the rules that would select it."""
    flat = effects.flatten()
    finite = ~torch.isnan(flat)
    if not finite.any():
        return f"Key rule {rule} selects no {what}: every effect is NaN (no {what} were swept)."
    i = int(torch.argmax(torch.where(finite, flat * sign, torch.tensor(-math.inf))))
    where = tuple(int(v) for v in torch.unravel_index(torch.tensor(i), effects.shape))
    name = ".".join(map(str, where)) if what == "heads" else str(where[0])
    return (f"Key rule {rule} selects no {what}: the largest effect by {rule.metric} is {float(flat[i]):+.4f} "
            f"({what[:-1]} {name}), which does not pass the threshold {rule.threshold:g}. Loosen the threshold, or "
            f"use top10:{rule.metric} or the default {DEFAULT_KEY_RULE} (see docs/identify.md).")


@dataclass(frozen=True)
class KeyRule:
    """A parsed rule: ``metric`` with ``op``/``threshold``, or ``metric`` with ``top_k``."""

    metric: str
    op: str | None = None
    threshold: float | None = None
    top_k: int | None = None

    @classmethod
    def parse(cls, text: str | KeyRule, custom: tuple[str, ...] = ()) -> KeyRule:
        """A rule from its text; ``custom`` names custom metrics a rule may also use."""
        if isinstance(text, KeyRule):
            return text
        metric, op, threshold, top_k = key_rule_parts(text, custom)  # the one reader, torch-free (configs use it)
        return cls(metric=metric, op=op, threshold=threshold, top_k=top_k)

    def __str__(self) -> str:
        if self.top_k is not None:
            return f"top{self.top_k}:{self.metric}"
        shown = repr(self.threshold)  # the shortest text that reads back as the same number
        return f"{self.metric}{self.op}{shown[:-2] if shown.endswith('.0') else shown}"

    def to_json(self) -> dict:
        return {"rule": str(self), "metric": self.metric, "op": self.op, "threshold": self.threshold, "top_k": self.top_k}

    def select(self, effects: Float[Tensor, "..."], sign: int | None = None) -> list[tuple[tuple[int, ...], float]]:
        """Indices and effects of the selected entries, most important first (NaN entries never selected).

        ``sign``: the metric's important direction (default: the built-in metric's). A threshold rule that selects
        no heads (``effects`` of shape ``[layer, head]``) warns with :func:`why_empty` (:class:`KeyRuleWarning`)."""
        sign = METRICS[self.metric].sign if sign is None else sign
        flat = effects.flatten()
        chosen = order(flat, sign)
        if self.top_k is not None:
            chosen = chosen[: self.top_k]
        else:
            ops = {"<": torch.lt, "<=": torch.le, ">": torch.gt, ">=": torch.ge}
            mask = ops[self.op](flat, self.threshold)  # type: ignore[index]
            chosen = chosen[mask[chosen]]
            if not len(chosen) and effects.ndim == 2:
                warnings.warn(why_empty(self, effects, sign), KeyRuleWarning, stacklevel=3)
        return [(_unravel(i, effects.shape), float(flat[i])) for i in chosen.tolist()]


def order(effects: Float[Tensor, "..."], sign: int, *, keep_nan: bool = False) -> Int[Tensor, " n"]:
    """Flat indices of ``effects``, most important first: ``effects * sign`` from the largest down (``sign=-1`` puts
    the most negative first), ties by flat index; NaN entries left out, or last (by index) with ``keep_nan``.

    The package's only sign-and-sort: every ranking, rule and top-k goes through it."""
    if sign not in (-1, 1):
        raise ValueError(f"sign must be -1 (a drop is important) or +1 (a rise is), got {sign!r}")
    flat = effects.detach().flatten()
    nan = torch.isnan(flat)
    valid = torch.nonzero(~nan).flatten()
    out = valid[torch.argsort(flat[valid] * sign, descending=True, stable=True)]
    return torch.cat([out, torch.nonzero(nan).flatten()]) if keep_nan else out


def _unravel(i: int, shape: torch.Size) -> tuple[int, ...]:
    return tuple(int(v) for v in torch.unravel_index(torch.tensor(i), shape))


def ranked_entries(effects: Float[Tensor, "..."], sign: int) -> list[tuple[tuple[int, ...], float]]:
    """Every non-NaN entry of ``effects`` (any shape) as ``(index, effect)``, most important first."""
    flat = effects.flatten()
    return [(_unravel(i, effects.shape), float(flat[i])) for i in order(flat, sign).tolist()]


def contributions(effects: Float[Tensor, "..."], sign: int) -> Float[Tensor, " n"]:
    """Every entry's effect in the important direction (``effects * sign``; opposite effects and NaN count 0), largest
    first: how concentrated the effects are (the values sorted, not which component has them)."""
    if sign not in (-1, 1):
        raise ValueError(f"sign must be -1 (a drop is important) or +1 (a rise is), got {sign!r}")
    return torch.nan_to_num(effects.flatten() * sign, nan=0.0).clamp_min(0).sort(descending=True).values


def rank(head_effects: Float[Tensor, "layer head"], sign: int) -> list[Ranked]:
    """Every head with its effect, most important first: ``sign=-1`` puts the most negative first (NaN left out)."""
    return [(Head(l, h), e) for (l, h), e in ranked_entries(head_effects, sign)]


def rank_mlps(mlp_effects: Float[Tensor, " layer"], sign: int) -> list[tuple[int, float]]:
    """Every MLP layer with its effect, most important first (NaN left out)."""
    return [(l, e) for (l,), e in ranked_entries(mlp_effects, sign)]
