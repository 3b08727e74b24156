"""Do the key heads depend on the counterfactual? (issue 29: on four hand-made pairs the key heads changed completely
between the counterfactual operators ``@`` and ``&``, and nothing said so.)

Patching measures what a component carries from the reference that the counterfactual lacks, so the key heads are a
property of the pair of prompts, not of the reference alone: the paper's operator counterfactual ("3 @ 4 = ") and
MIB's operand one ("3 + 5 = ") ask different questions. :func:`compare_counterfactuals` sweeps the same references
under each counterfactual kind, selects the key heads by one rule, and measures their Jaccard overlap
``|A & B| / |A | B|``; below ``threshold`` it warns, naming the heads each kind finds. A researcher who made pairs of
one kind runs it on a few pairs of another before reading the key heads as the task's::

    at = [cc.make_pair(tok, f"{a} + {b} = ", f"{a} @ {b} = ", str(a + b)) for a, b in nums]
    amp = [cc.make_pair(tok, f"{a} + {b} = ", f"{a} & {b} = ", str(a + b)) for a, b in nums]
    check = compare_counterfactuals(model, {"@": at, "&": amp})   # warns when the key heads differ

For a template task, :func:`counterfactual_kinds` builds the operator and operand pairs of the same references.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import combinations
from typing import Any

from circuits.data.pairs import PromptPair, build_pairs
from circuits.models.backend import Model
from circuits.patching.engines.end_sweep import sweep
from circuits.patching.core.ranking import DEFAULT_KEY_RULE, KeyRule
from circuits.results import brief
from circuits.types import Head, jaccard

# Below this Jaccard overlap of two kinds' key heads, the key heads are said to change with the counterfactual.
THRESHOLD = 0.5


class CounterfactualWarning(UserWarning):
    """The key heads change with the counterfactual kind."""


@dataclass
class CounterfactualCheck:
    """The key heads each counterfactual kind gives on the same references, and their pairwise Jaccard overlaps."""

    rule: str
    n_pairs: dict[str, int]
    key_heads: dict[str, list[Head]]
    overlap: dict[tuple[str, str], float]
    threshold: float = THRESHOLD

    @property
    def lowest(self) -> float:
        return min(self.overlap.values(), default=1.0)

    @property
    def stable(self) -> bool:
        """Every two kinds' key heads overlap at least ``threshold``."""
        return self.lowest >= self.threshold

    def message(self) -> str:
        (a, b), low = min(self.overlap.items(), key=lambda kv: kv[1])
        heads = lambda k: ", ".join(f"{h[0]}.{h[1]}" for h in self.key_heads[k]) or "none"  # noqa: E731
        return (f"The key heads change with the counterfactual: by {self.rule}, {a!r} gives {heads(a)} and {b!r} gives "
                f"{heads(b)} (Jaccard overlap {low:.2f}, below {self.threshold:g}, on {self.n_pairs[a]} pairs). They "
                "describe these prompt pairs, not the task alone: report the counterfactual with them, or compare "
                "kinds on more pairs (circuits report A B lists the heads each run gains and loses).")

    def to_json(self) -> dict[str, Any]:
        return {"rule": self.rule, "n_pairs": self.n_pairs, "threshold": self.threshold,
                "key_heads": {k: [list(h) for h in v] for k, v in self.key_heads.items()},
                "overlap": [[a, b, v] for (a, b), v in self.overlap.items()], "stable": self.stable}


def compare_counterfactuals(model: Model, pairs_by_kind: Mapping[str, Sequence[PromptPair]],
                            rule: str | KeyRule = DEFAULT_KEY_RULE, *, mode: str = "path",
                            threshold: float = THRESHOLD, warn: bool = True, progress: bool = False
                            ) -> CounterfactualCheck:
    """Sweep each kind's pairs (the same references, each kind's counterfactuals), select the key heads by ``rule``
    and compare them; with ``warn``, a :class:`CounterfactualWarning` when two kinds overlap less than ``threshold``.

    Each kind's pairs must hold the same reference prompts in the same order (one line says which differs), so what
    differs between the kinds is the counterfactual alone."""
    if not isinstance(pairs_by_kind, Mapping):
        raise ValueError("compare_counterfactuals takes {counterfactual kind: [PromptPair, ...]}, got "
                         f"{type(pairs_by_kind).__name__} {brief(pairs_by_kind, 60)}")
    for k, v in pairs_by_kind.items():  # a list of pairs or a PairSet; a string or a number is named, not iterated
        many = isinstance(v, Iterable) and not isinstance(v, (str, bytes, Mapping))
        bad = next((p for p in v if not isinstance(p, PromptPair)), None) if many else v
        if bad is not None:
            raise ValueError(f"compare_counterfactuals: the pairs of {k!r} must be PromptPairs (cc.make_pair, "
                             f"cc.build_pairs), got {type(bad).__name__} {brief(bad, 60)}")
    kinds = list(pairs_by_kind)
    if len(kinds) < 2:
        raise ValueError(f"compare_counterfactuals needs pairs of at least two counterfactual kinds, got {kinds}")
    if not 0 <= threshold <= 1:
        raise ValueError(f"threshold is a Jaccard overlap in 0..1, got {threshold}")
    refs = {k: [p.reference for p in v] for k, v in pairs_by_kind.items()}
    first = kinds[0]
    if not refs[first]:
        raise ValueError(f"no pairs for the counterfactual kind {first!r}")
    for k in kinds[1:]:
        if refs[k] != refs[first]:
            raise ValueError(f"the pairs of {k!r} hold other reference prompts than those of {first!r}; compare kinds on "
                             "the same references, so the counterfactual is all that differs")
    rule = KeyRule.parse(rule) if isinstance(rule, str) else rule
    heads = {k: [h for h, _ in sweep(model, list(v), mode, progress=progress).scores(rule.metric).key(rule)]  # type: ignore[arg-type]
             for k, v in pairs_by_kind.items()}
    overlap = {(a, b): jaccard(heads[a], heads[b]) for a, b in combinations(kinds, 2)}
    check = CounterfactualCheck(str(rule), {k: len(v) for k, v in pairs_by_kind.items()}, heads, overlap, threshold)
    if warn and not check.stable:
        warnings.warn(check.message(), CounterfactualWarning, stacklevel=2)
    return check


def counterfactual_kinds(model: Model, task: str = "addition", n_pairs: int = 8, *, seed: int = 0,
                         **pair_options: Any) -> dict[str, list[PromptPair]]:
    """The operator and operand pairs of the same ``n_pairs`` references of a template task (for
    :func:`compare_counterfactuals`). Pairs are not filtered by correctness here: both kinds keep every reference."""
    out = {}
    for kind in ("operator", "operand"):
        ps = build_pairs(model, task, n_pairs=n_pairs, seed=seed, counterfactual=kind, filter_correct=False,
                         check_counterfactual=False, progress=False, **pair_options)
        out[kind] = list(ps.pairs)
    n = min(len(v) for v in out.values())
    return {k: v[:n] for k, v in out.items()}
