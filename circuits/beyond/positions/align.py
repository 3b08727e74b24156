"""Columns of the per-position view aligned by token role across templates (issue 40).

Prompts of one template share their question body, so counting positions back from END lines them up token for
token. Prompts of several templates do not: ``7 + 5 =`` has its operator 3 tokens before END, ``The addition of 7 and
5 is`` 6, so one offset from END averages different roles. :func:`align` maps every position of every pair to a
column named by its token role instead:

* a role's own tokens: ``A``, ``operator``, ``B``, ``equals``, ``END`` (the last position), and ``A(2)``, ``A(3)``, ...
  for the second and third token of a role of several (a two-digit operand);
* the positions between and before them as offsets from the nearest role token: ``A+1`` (one after A's last token),
  ``operator-2`` (two before the operator's first); a position as near to the role before it as to the one after it
  counts from the one before.

A position holding two roles counts as ``END`` first, then an operand, then the operator, then ``equals``. Each
pair's positions from 4 before its first role or first difference (whichever comes first) to END are mapped; a
column's effect is the metric over the pairs that have that column, each read at its own offset
(:func:`aligned_effects`). Columns are ordered by their roles' mean position before END.

Pairs that mark no role (a pairs-file line without ``"roles"`` whose prompt matches no template) cannot be aligned
across templates: :func:`check_alignable` refuses them in one line, before the sweep.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from jaxtyping import Float
from torch import Tensor

from circuits.data.pairs import PromptPair
from circuits.patching.core.metrics import Metric

ANCHORS = ("END", "A", "B", "operator", "equals")  # which role a position holding two counts as, first first
MARGIN = 4  # positions shown before a pair's first role or first difference
Key = tuple[str, str, int]  # (role, "before" | "in" | "after", k)


def first_difference(pair: PromptPair) -> int:
    """The first position where the pair's two prompts differ (its END when they never do)."""
    return next((i for i, (a, b) in enumerate(zip(pair.reference_token_ids, pair.counterfactual_token_ids))
                 if a != b), pair.end)


def _ranges(pair: PromptPair) -> dict[str, tuple[int, int]]:
    """Each anchor's first and last token position in the reference prompt (END: the last position)."""
    out = {"END": (pair.end, pair.end)}
    for role in ANCHORS[1:]:
        pos = [p for p in pair.roles.get(role, ()) if 0 <= p <= pair.end]
        if pos:
            out[role] = (min(pos), max(pos))
    return out


def pair_keys(pair: PromptPair) -> dict[int, Key]:
    """Every shown position of ``pair`` (see the module docstring) and its column key."""
    ranges = _ranges(pair)
    lo = max(0, min(first_difference(pair), *(a for a, _ in ranges.values())) - MARGIN)
    keys: dict[int, Key] = {}
    for p in range(lo, pair.end + 1):
        inside = next((r for r in ANCHORS if r in ranges and ranges[r][0] <= p <= ranges[r][1]), None)
        if inside is not None:
            keys[p] = (inside, "in", p - ranges[inside][0])
            continue
        after = [(p - last, r) for r, (_, last) in ranges.items() if last < p]
        before = [(first - p, r) for r, (first, _) in ranges.items() if first > p]
        a, b = min(after, default=None), min(before, default=None)
        if a is not None and (b is None or a[0] <= b[0]):
            keys[p] = (a[1], "after", a[0])
        else:
            assert b is not None  # END is after every position before it
            keys[p] = (b[1], "before", b[0])
    return keys


def label(key: Key) -> str:
    """A column's name: ``operator``, ``A(2)``, ``B+1``, ``END-3``."""
    role, where, k = key
    if where == "in":
        return role if k == 0 else f"{role}({k + 1})"
    return f"{role}{'+' if where == 'after' else '-'}{k}"


@dataclass(frozen=True)
class Alignment:
    """The columns of the view and, per column, each pair's offset from END there (None: the pair has no such
    column). ``by_role``: the columns are roles across layouts (False: every pair has the same layout, so the columns
    are the positions of any one of them, token for token)."""

    keys: list[Key]
    offsets: list[list[int | None]]  # [column][pair]
    by_role: bool

    @property
    def labels(self) -> list[str]:
        return [label(k) for k in self.keys]

    def n_pairs(self) -> list[int]:
        return [sum(o is not None for o in col) for col in self.offsets]

    def role_columns(self) -> dict[str, list[int]]:
        """Each role's own columns (its tokens), for the figure's markers: from the roles, never from one prompt."""
        out: dict[str, list[int]] = {}
        for c, (role, where, _) in enumerate(self.keys):
            if where == "in" and role != "END":
                out.setdefault(role, []).append(c)
        return out

    def to_json(self) -> dict:
        return {"by": "role" if self.by_role else "token", "columns": self.labels,
                "offsets": self.offsets, "n_pairs": self.n_pairs()}


def check_alignable(pairs: Sequence[PromptPair], where: str = "the pairs") -> None:
    """One ``ValueError`` line, before the sweep, when a pair marks no role: its positions cannot be put in columns
    by role (and pairs of several templates do not line up from END)."""
    bare = [i for i, p in enumerate(pairs, 1) if not any(p.roles.get(r) for r in ANCHORS[1:])]
    if bare:
        p = pairs[bare[0] - 1]
        raise ValueError(
            f"{where}: {len(bare)} of {len(pairs)} pairs mark no operand, operator or '=' (pair {bare[0]}, "
            f"{p.reference[-40:]!r}), so their positions cannot be aligned by token role; give \"roles\" in the pairs "
            "file (docs/identify.md#token-roles), or prompts whose last line has a template's form")


def align(pairs: Sequence[PromptPair]) -> Alignment:
    """The columns of :func:`pair_keys` over ``pairs``, ordered by their roles' mean position before END, then
    before / in / after the role; ``by_role`` False when every pair maps the same offsets to the same columns."""
    per = [pair_keys(p) for p in pairs]
    by_offset = [{p.end - pos: k for pos, k in keys.items()} for p, keys in zip(pairs, per)]
    same = all(b == by_offset[0] for b in by_offset[1:])
    depth: dict[str, list[int]] = {}
    for p in pairs:
        for role, (first, _) in _ranges(p).items():
            depth.setdefault(role, []).append(p.end - first)
    rank = {r: -sum(v) / len(v) for r, v in depth.items()}  # deeper (further from END) first
    order = {"before": 0, "in": 1, "after": 2}
    keys = sorted({k for keys in per for k in keys.values()},
                  key=lambda k: (rank[k[0]], ANCHORS.index(k[0]), order[k[1]], -k[2] if k[1] == "before" else k[2]))
    offsets = [[next((p.end - pos for pos, kk in keys_i.items() if kk == k), None) for p, keys_i in zip(pairs, per)]
               for k in keys]
    return Alignment(keys, offsets, not same)


def aligned_effects(sweep, alignment: Alignment, metric: Metric) -> tuple[Float[Tensor, "layer head column"],
                                                                          Float[Tensor, "layer column"]]:
    """Heads ``[layer, head, column]`` and MLPs ``[layer, column]`` by ``metric``: each column's metric over the pairs
    that have it, each pair read at its own offset (``sweep``: a :class:`~circuits.patching.engines.position_sweep.
    PositionSweep` over the same pairs, in order)."""
    heads = torch.full((*sweep.heads.logit.shape[:2], len(alignment.keys)), float("nan"))
    mlps = torch.full((sweep.mlps.logit.shape[0], len(alignment.keys)), float("nan"))
    for c, col in enumerate(alignment.offsets):
        idx = [i for i, o in enumerate(col) if o is not None and o < sweep.n_offsets]
        if not idx:
            continue
        pair = torch.tensor(idx)
        offset = torch.tensor([col[i] for i in idx])
        base = sweep.baseline.select(pair)
        heads[..., c] = metric.effect(sweep.heads.index((..., offset, pair)), base)
        mlps[..., c] = metric.effect(sweep.mlps.index((..., offset, pair)), base)
    return heads, mlps
