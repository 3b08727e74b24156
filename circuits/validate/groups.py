"""The groups pairs are averaged over for mean ablation, and matched in for resample ablation: a template and a token
length, so positions align within a group (shared by :mod:`~circuits.validate.knockout` and
:mod:`~circuits.validate.resample`)."""

from __future__ import annotations

from circuits.data.pairs import PromptPair

GroupKey = tuple[str, int]


def group_key(pair: PromptPair) -> GroupKey:
    """The mean group of a pair: its template and its token length (positions align within it)."""
    return (pair.template_id, len(pair.reference_token_ids))
