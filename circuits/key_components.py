"""Rules that pick the key components from a sweep (Section 5.1).

A rule is a threshold on one metric or the top k by one metric, written as a string:

- ``relative_logit<-0.05``: the paper's rule (effect below -5% of the answer logit, set on LLaMA2-7B);
- ``fraction>=0.05``: heads that carry at least 5% of the full counterfactual's effect on the answer
  logit (the default: it compares across models, see ``docs/identify.md``);
- ``logit_diff<-0.5``, ``prob<-0.02``: thresholds on the other metrics;
- ``top10`` or ``top10:relative_logit``: the k most important heads by a metric (default ``fraction``).

"Most important" follows each metric's sign (:data:`circuits.patching.IMPORTANT_SIGN`): a drop of
the answer logit, logit difference or probability; a large positive fraction.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import torch
from jaxtyping import Float
from torch import Tensor

from circuits.patching import IMPORTANT_SIGN, METRICS

DEFAULT_KEY_RULE = "fraction>=0.05"
_THRESHOLD = re.compile(r"^\s*([a-z_]+)\s*(<=|>=|<|>)\s*([-+0-9.eE]+)\s*$")
_TOP = re.compile(r"^\s*top\s*:?\s*(\d+)\s*(?::\s*([a-z_]+))?\s*$")


@dataclass(frozen=True)
class KeyRule:
    """A parsed rule: ``metric`` with ``op``/``threshold``, or ``metric`` with ``top_k``."""

    metric: str
    op: str | None = None
    threshold: float | None = None
    top_k: int | None = None

    @classmethod
    def parse(cls, text: str) -> KeyRule:
        m = _THRESHOLD.match(text)
        if m:
            metric, op, value = m.groups()
            rule = cls(metric=metric, op=op, threshold=float(value))
        elif (m := _TOP.match(text)) is not None:
            rule = cls(metric=m.group(2) or "fraction", top_k=int(m.group(1)))
        else:
            raise ValueError(
                f"Cannot read key rule {text!r}. Accepted: METRIC<VALUE, METRIC<=VALUE, METRIC>VALUE, METRIC>=VALUE "
                f"or topK[:METRIC], with METRIC one of {', '.join(METRICS)} (e.g. 'relative_logit<-0.05', "
                "'fraction>=0.05', 'top10')."
            )
        if rule.metric not in METRICS:
            raise ValueError(f"Unknown metric {rule.metric!r} in key rule {text!r}; accepted: {', '.join(METRICS)}")
        return rule

    def __str__(self) -> str:
        if self.top_k is not None:
            return f"top{self.top_k}:{self.metric}"
        return f"{self.metric}{self.op}{self.threshold:g}"

    def to_json(self) -> dict:
        return {"rule": str(self), "metric": self.metric, "op": self.op, "threshold": self.threshold, "top_k": self.top_k}

    def select(self, effects: Float[Tensor, "..."]) -> list[tuple[tuple[int, ...], float]]:
        """Indices and effects of the selected entries, most important first."""
        sign = IMPORTANT_SIGN[self.metric]
        flat = effects.flatten()
        order = torch.argsort(flat * sign, descending=True, stable=True)
        if self.top_k is not None:
            chosen = order[: self.top_k]
        else:
            ops = {"<": torch.lt, "<=": torch.le, ">": torch.gt, ">=": torch.ge}
            mask = ops[self.op](flat, self.threshold)  # type: ignore[index]
            chosen = order[mask[order]]
        out = []
        for i in chosen.tolist():
            idx = tuple(int(v) for v in torch.unravel_index(torch.tensor(i), effects.shape))
            out.append((idx, float(flat[i])))
        return out


def rank_heads(effects: Float[Tensor, "layer head"], metric: str) -> list[tuple[int, int, float]]:
    """Every head as ``(layer, head, effect)``, most important first."""
    return [(l, h, e) for (l, h), e in KeyRule(metric=metric, top_k=effects.numel()).select(effects)]
