"""Heuristic classes of a neuron from its activation over the operand grid (Nikankin et al., ICLR 2025, Section 4).

A *rule* is a set of grid cells named by a condition on the operands ``a``, ``b`` and the result ``c``
(:class:`Rule`): an operand or the result in a range (``a in [2, 4]``, ``a + b in [10, 14]``), an operand or the
result in a residue class (``b mod 2 == 1``, ``(a + b) mod 10 == 3``, k in 2..10), a digit pattern (``a == b``,
``a > b``), or one result value (``a + b == 12``: the neuron is the answer's *identity*). The paper's classes, as their
code defines them: the operand-range, operand-modulo, result-modulo, result-range, same-operand and result-value
heuristics.

How well a rule fits a neuron (:func:`match_scores`) is the paper's top-k match -- of the ``k`` cells where the
neuron is most active, ``k`` being the number of cells the rule holds on, the share on which it holds -- corrected
for chance (``(match - k/N) / (1 - k/N)``, N the grid's cells): a rule true on half the grid matches half of the top
cells of any neuron, and the paper's 0.6 on its 300 x 300 grid would pass noise on a 10 x 10 one. The neuron's
activation may also mark a rule by being lowest there (a gated MLP's ``hook_post`` takes both signs): the score is
taken over the activation and its negative, and the sign kept (``polarity``). Rules true on fewer than
``min_support`` cells are not fitted (on a small grid a one-cell rule matches noise by luck). A neuron's classes are
the kinds whose best rule scores at least ``threshold`` and whose match is unlikely by chance: the hypergeometric tail
of that many of the rule's cells among the top ``k`` is below ``alpha`` divided by the number of rules tried (a
Bonferroni bound; without it a rule of six cells matched four times passes noise about once in ten neurons on a 10 x 10
grid). None passing is the class ``none``.

Pure tensor code: no model.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from jaxtyping import Bool, Float, Int
from torch import Tensor

KINDS: tuple[str, ...] = ("identity", "range", "modulo", "pattern")  # the order ties are broken in: simplest first
NONE = "none"
SYMBOLS = {"addition": "+", "subtraction": "-", "multiplication": "*", "division": "/"}
MODULI = tuple(range(2, 11))


@dataclass(frozen=True)
class Rule:
    """One condition on a cell: ``kind`` (:data:`KINDS`), ``on`` (``a``, ``b`` or ``c``, the result), and its
    numbers: a range ``(lo, hi)``, a residue ``(k, r)``, a pattern's name, or a result value."""

    kind: str
    on: str
    args: tuple

    def text(self, operation: str = "addition") -> str:
        """The rule as a researcher writes it (``b mod 2 == 1``, ``a + b in [10, 14]``)."""
        sym = SYMBOLS.get(operation, "?")
        name = {"a": "a", "b": "b", "c": f"a {sym} b"}[self.on]
        if self.kind == "range":
            lo, hi = self.args
            return f"{name} == {lo}" if lo == hi else f"{name} in [{lo}, {hi}]"
        if self.kind == "modulo":
            return f"{'(' + name + ')' if self.on == 'c' else name} mod {self.args[0]} == {self.args[1]}"
        if self.kind == "identity":
            return f"{name} == {self.args[0]}"
        return {"equal": "a == b", "greater": "a > b", "less": "a < b"}[self.args[0]]

    def holds(self, a: Tensor, b: Tensor, c: Tensor) -> Bool[Tensor, "..."]:
        x = {"a": a, "b": b, "c": c}[self.on]
        if self.kind == "range":
            return (x >= self.args[0]) & (x <= self.args[1])
        if self.kind == "modulo":
            return x % self.args[0] == self.args[1]
        if self.kind == "identity":
            return x == self.args[0]
        return {"equal": a == b, "greater": a > b, "less": a < b}[self.args[0]]

    def to_json(self) -> list:
        return [self.kind, self.on, list(self.args)]

    @classmethod
    def from_json(cls, d: list) -> Rule:
        return cls(d[0], d[1], tuple(d[2]))


def candidate_rules(a: Int[Tensor, " cell"], b: Int[Tensor, " cell"], c: Int[Tensor, " cell"],
                    min_support: int = 5) -> tuple[list[Rule], Bool[Tensor, "rule cell"]]:
    """Every rule of :data:`KINDS` on these cells that holds on at least ``min_support`` cells and fails on as many
    (the score of a rule and its complement at the opposite polarity are equal), each distinct cell set once (the first, in :data:`KINDS` order, keeps it), with its ``[rule, cell]``
    indicator."""
    rules: list[Rule] = []
    for v in sorted(set(c.tolist())):
        rules.append(Rule("identity", "c", (v,)))
    for on, x in (("a", a), ("b", b), ("c", c)):
        vals = sorted(set(x.tolist()))
        for i, lo in enumerate(vals):
            for hi in vals[i + 1 :]:  # one value is an identity (result) or a residue-free operand value
                rules.append(Rule("range", on, (lo, hi)))
        for v in vals if on != "c" else ():
            rules.append(Rule("range", on, (v, v)))
    for on in ("a", "b", "c"):
        for k in MODULI:
            for r in range(k):
                rules.append(Rule("modulo", on, (k, r)))
    rules += [Rule("pattern", "a", (p,)) for p in ("equal", "greater", "less")]
    n = len(a)
    kept: list[Rule] = []
    rows: list[Tensor] = []
    seen: set[bytes] = set()
    for rule in rules:
        m = rule.holds(a, b, c)
        s = int(m.sum())
        key = m.numpy().tobytes()
        if s < min_support or s > n - min_support or key in seen:
            continue
        seen.add(key)
        kept.append(rule)
        rows.append(m)
    return kept, torch.stack(rows) if rows else torch.zeros(0, n, dtype=torch.bool)


def match_scores(acts: Float[Tensor, "neuron cell"], indicator: Bool[Tensor, "rule cell"]
                 ) -> tuple[Float[Tensor, "neuron rule"], Int[Tensor, "neuron rule"]]:
    """Each rule's chance-corrected top-k match on each neuron (module docstring), and the sign of the activation
    that gives it (+1: the neuron is highest where the rule holds; -1: lowest)."""
    N = acts.shape[1]
    support = indicator.sum(1)  # k per rule
    base = support.float() / N
    best = torch.full((acts.shape[0], indicator.shape[0]), -float("inf"))
    sign = torch.ones_like(best, dtype=torch.long)
    ind = indicator.float()
    for s in (1, -1):
        rank = torch.empty_like(acts, dtype=torch.long)
        order = torch.argsort(s * acts, dim=1, descending=True, stable=True)
        rank.scatter_(1, order, torch.arange(N).expand_as(order).contiguous())
        # top[n, r, cell]: cell is among neuron n's k_r most active (by s * act)
        top = (rank[:, None, :] < support[None, :, None]).float()
        match = (top * ind[None]).sum(-1) / support[None].float()
        score = (match - base[None]) / (1 - base[None])
        better = score > best
        best = torch.where(better, score, best)
        sign = torch.where(better, torch.full_like(sign, s), sign)
    return best, sign


@dataclass
class NeuronClasses:
    """A neuron's fitted heuristics: the best rule of each kind with its score and polarity, and which pass."""

    best: dict[str, tuple[Rule, float, int]]  # kind -> (rule, score, polarity)
    threshold: float
    chance: dict[str, float] | None = None  # kind -> the best rule's tail probability x the rules tried (Bonferroni)
    alpha: float = 0.01

    @property
    def classes(self) -> list[str]:
        """The kinds whose best rule passes the threshold, best first; ``["none"]`` when none does."""
        chance = self.chance or {}
        passing = sorted((k for k, (_, s, _) in self.best.items()
                          if s >= self.threshold and chance.get(k, 0.0) <= self.alpha),
                         key=lambda k: (-self.best[k][1], KINDS.index(k)))
        return passing or [NONE]

    @property
    def primary(self) -> tuple[Rule, float, int] | None:
        """The best passing rule (None: class ``none``)."""
        k = self.classes[0]
        return None if k == NONE else self.best[k]


def tail_probability(n_cells: int, support: int, hits: int) -> float:
    """P(at least ``hits`` of a rule's ``support`` cells among ``support`` cells drawn at random of ``n_cells``)."""
    total = math.comb(n_cells, support)
    return sum(math.comb(support, j) * math.comb(n_cells - support, support - j)
               for j in range(hits, support + 1)) / total


def classify(acts: Float[Tensor, "neuron cell"], a: Int[Tensor, " cell"], b: Int[Tensor, " cell"],
             c: Int[Tensor, " cell"], *, threshold: float = 0.6, min_support: int = 5,
             alpha: float = 0.01) -> list[NeuronClasses]:
    """Fit every heuristic kind to each neuron's activation over the grid's cells (``a``, ``b``, ``c``: each cell's
    operands and result; NaN cells are left out)."""
    if acts.ndim != 2 or acts.shape[1] != len(a):
        raise ValueError(f"acts must be [neuron, cell] with one column per cell ({len(a)}), got {tuple(acts.shape)}")
    if not 0 < threshold <= 1:
        raise ValueError(f"threshold must lie in (0, 1], got {threshold}")
    if not 0 < alpha <= 1:
        raise ValueError(f"alpha must lie in (0, 1], got {alpha}")
    ok = ~acts.isnan().any(0)
    acts, a, b, c = acts[:, ok].float(), a[ok], b[ok], c[ok]
    rules, ind = candidate_rules(a, b, c, min_support)
    if not rules:
        return [NeuronClasses({}, threshold, {}, alpha) for _ in range(acts.shape[0])]
    score, sign = match_scores(acts, ind)
    # Ties go, by tiny bonuses, to the rule on the smaller side (a rule at polarity -1 scores as its complement at +1:
    # "b == 0, lowest there" rather than "b in [1, 9], highest there": the cells where the neuron stands out, which
    # mean ablation changes most), then to the rule the neuron is highest on, then to the rule whose indicator
    # correlates best with the activation (a ramp matches every threshold on its operand: its median split), then to
    # the rule listed first (the simplest kind).
    xs = (acts - acts.mean(1, keepdim=True)) / acts.std(1, keepdim=True).clamp_min(1e-12)
    fi = ind.float()
    fi = (fi - fi.mean(1, keepdim=True)) / fi.std(1, keepdim=True).clamp_min(1e-12)
    corr = (xs @ fi.T) / (acts.shape[1] - 1) * sign
    small = (ind.sum(1) <= ind.shape[1] / 2)[None]
    score_t = (score.double().round(decimals=4) + 2e-5 * small + 1e-5 * (sign > 0) + 1e-7 * corr.double()
               - 1e-9 * torch.arange(len(rules), dtype=torch.float64) / len(rules))
    kinds = torch.tensor([KINDS.index(r.kind) for r in rules])
    N, support = ind.shape[1], ind.sum(1)
    out = []
    for n in range(acts.shape[0]):
        best, chance = {}, {}
        for ki, kind in enumerate(KINDS):
            sel = (kinds == ki).nonzero().flatten()
            if len(sel):
                j = int(sel[score_t[n, sel].argmax()])
                k = int(support[j])
                hits = round((float(score[n, j]) * (1 - k / N) + k / N) * k)  # the score back to its count
                best[kind] = (rules[j], float(score[n, j]), int(sign[n, j]))
                chance[kind] = min(1.0, tail_probability(N, k, hits) * len(rules))
        out.append(NeuronClasses(best, threshold, chance, alpha))
    return out
