"""The groups pairs are averaged over for mean ablation, and matched in for resample ablation: a template and a token
length, so positions align within a group (shared by :mod:`~circuits.validate.knockout` and
:mod:`~circuits.validate.resample`)."""

from __future__ import annotations

from circuits.data.pairs import PromptPair

GroupKey = tuple[str, int]


def group_key(pair: PromptPair) -> GroupKey:
    """The mean group of a pair: its template and its token length (positions align within it)."""
    return (pair.template_id, len(pair.reference_token_ids))


def group_index(groups: dict[GroupKey, int], pooled: bool, pair: PromptPair, what: str, advice: str = "") -> int:
    """The row of ``pair``'s group in values taken per group (``groups``: key -> row); 0 when ``pooled`` (one row
    for every pair). A group that has no row is a ``KeyError`` naming ``what`` was missing, the groups there are and
    ``advice``."""
    if pooled:
        return 0
    key = group_key(pair)
    if key not in groups:
        raise KeyError(f"No {what} for template {key[0]!r} at length {key[1]}: means were taken over "
                       f"{sorted(groups)}" + (f". {advice}" if advice else ""))
    return groups[key]
