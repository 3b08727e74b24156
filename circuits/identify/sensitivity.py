"""How much the key-head set depends on the key rule's threshold (issue 43).

"Fewer than 5% of the heads are key" reads a count the threshold decides: on SmolLM2 addition the 9th and 10th heads
by ``fraction`` sit just under the default ``fraction>=0.05``, and the paper's own rule (``relative_logit<-0.05``, set
on LLaMA2-7B) selects none. :func:`threshold_counts` says how many heads (and MLPs) a fraction threshold selects at
each of ``0.03 .. 0.08`` and how many the paper's rule does, from the effects a result holds (a saved one included:
no model is run). ``IdentifyResult.summary()`` saves it as ``key_rule_sensitivity``; ``circuits identify`` prints it.
"""

from __future__ import annotations

import warnings
from typing import Any

from circuits.patching.core.ranking import KeyRule, KeyRuleWarning
from circuits.patching.core.scores import Scores

THRESHOLDS: tuple[float, ...] = (0.03, 0.04, 0.05, 0.06, 0.07, 0.08)
PAPER_RULE = "relative_logit<-0.05"  # Zhang et al. 2024, Section 4.1: a head whose patch lowers the answer logit by 5%


def _selected(scores: Scores, rule: KeyRule, part: str) -> list:
    with warnings.catch_warnings():  # an empty selection is an answer here, not a mistake to warn about
        warnings.simplefilter("ignore", KeyRuleWarning)
        return [c for c, _ in scores.key(rule, part)]


def threshold_counts(fraction: Scores, paper: Scores | None = None,
                     thresholds: tuple[float, ...] = THRESHOLDS) -> dict[str, Any]:
    """How many heads and MLPs ``fraction>=t`` selects for each ``t`` of ``thresholds`` (``fraction``: the scores by
    that metric), and, given ``paper`` (scores by ``relative_logit``), how many the paper's rule selects, with the
    heads themselves (``"layer.head"``, most important first). NaN effects are never selected."""
    if fraction.metric != "fraction":
        raise ValueError(f"threshold_counts reads fraction scores, got {fraction.metric!r}")
    if paper is not None and paper.metric != "relative_logit":
        raise ValueError(f"the paper's rule reads relative_logit scores, got {paper.metric!r}")
    if not thresholds or any(not 0 < t < 1 for t in thresholds):
        raise ValueError(f"thresholds must be fractions in (0, 1), got {thresholds}")
    heads = fraction.parts["heads"]
    out: dict[str, Any] = {"metric": "fraction", "n_heads": int(heads.numel()), "thresholds": {}}
    for t in thresholds:
        rule = KeyRule("fraction", ">=", float(t))
        hs = _selected(fraction, rule, "heads")
        out["thresholds"][f"{t:g}"] = {"rule": str(rule), "n_heads": len(hs), "share_of_heads": len(hs) / heads.numel(),
                                       "n_mlps": len(_selected(fraction, rule, "mlps")) if "mlps" in fraction.parts else 0,
                                       "heads": [".".join(map(str, h)) for h in hs]}
    if paper is not None:
        rule = KeyRule.parse(PAPER_RULE)
        hs = _selected(paper, rule, "heads")
        out["paper_rule"] = {"rule": str(rule), "n_heads": len(hs), "share_of_heads": len(hs) / heads.numel(),
                             "n_mlps": len(_selected(paper, rule, "mlps")) if "mlps" in paper.parts else 0,
                             "heads": [".".join(map(str, h)) for h in hs]}
    return out


def describe(counts: dict[str, Any]) -> str:
    """One line: the head count at each threshold and under the paper's rule."""
    line = "key heads by fraction>=" + ", ".join(f"{t}: {v['n_heads']}" for t, v in counts["thresholds"].items())
    if "paper_rule" in counts:
        line += f"; by the paper's {counts['paper_rule']['rule']}: {counts['paper_rule']['n_heads']}"
    return line + f" (of {counts['n_heads']})"


__all__ = ["PAPER_RULE", "THRESHOLDS", "describe", "threshold_counts"]
