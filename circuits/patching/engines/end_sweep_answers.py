"""The END sweep at a later answer position, or over the whole answer (issue 42).

At answer position ``k`` the pairs are those of :func:`circuits.data.answers.at_answer_position` (both prompts
teacher-forced with the reference answer's first ``k`` tokens): the END sweep patches each component at END + k and
reads the answer's token ``k`` there, with nothing else changed, so every metric means at END + k what it means at END.

The whole answer (``position="whole"``) is one such sweep per answer position, each patching at its own position
only, joined per pair: the answer logit, logit difference (and a custom metric's value) summed over the pair's answer
positions, the answer probability multiplied (so :data:`~circuits.patching.core.metrics.ANSWER_LOGPROB` reads the sum
of the answer tokens' log-probabilities), and the baseline likewise; ``answer`` and ``cf_answer`` stay the first
position's, and ``answer_rank`` is the worst position's (0: the model writes every answer token). A component's
effect on the whole answer is then the sum of its effects at each answer position, patched there alone -- not one
patch at every answer position at once, which the END-only engine cannot run.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from circuits.data.answers import at_answer_position, force_answer
from circuits.data.pair_config import WHOLE_ANSWER, answer_position
from circuits.data.pairs import PromptPair
from circuits.models.backend import Model
from circuits.patching.core.metrics import Baseline
from circuits.patching.core.readouts import Readouts
from circuits.patching.engines.end_sweep import SweepResult, sweep
from circuits.types import Mode

_SUMMED = ("logit", "logit_diff", "cf_logit", "cf_logit_diff")
_MULTIPLIED = ("prob", "cf_prob")


def sweep_answer(model: Model, pairs: Sequence[PromptPair], mode: Mode = "path", position: int | str = 0,
                 **options: Any) -> SweepResult:
    """:func:`~circuits.patching.engines.end_sweep.sweep` of ``pairs`` at answer ``position`` (``0``: the sweep
    itself, ``1``, ... or ``"whole"``); ``options`` go to every sweep. A pair whose answer is too short for
    ``position`` is one ``ValueError`` before any work."""
    position = answer_position(position)
    pairs = list(pairs)
    if position != WHOLE_ANSWER:
        return sweep(model, at_answer_position(pairs, position, model.tokenizer), mode, **options)
    parts = []
    for k in range(max(len(p.answer_ids) for p in pairs)):
        idx = [i for i, p in enumerate(pairs) if len(p.answer_ids) > k]
        parts.append((idx, sweep(model, [force_answer(pairs[i], k, model.tokenizer) for i in idx], mode, **options)))
    return join_positions(parts, len(pairs))


def join_positions(parts: Sequence[tuple[list[int], SweepResult]], n_pairs: int) -> SweepResult:
    """One sweep over the whole answer from one sweep per answer position (``(pairs it covers, sweep)``, the first
    covering every pair, in order): readouts summed, probabilities multiplied (the module's docstring)."""
    (first_idx, first), rest = parts[0], parts[1:]
    if first_idx != list(range(n_pairs)):
        raise ValueError("join_positions: the first answer position's sweep must cover every pair, in order")
    base = first.baseline.to("cpu")
    values = {f: getattr(base, f).clone() for f in (*_SUMMED, *_MULTIPLIED)}
    custom = {k: v.clone() for k, v in base.custom.items()}
    rank = None if base.answer_rank is None else base.answer_rank.clone()
    heads = Readouts(first.heads.logit.clone(), first.heads.logit_diff.clone(), first.heads.prob.clone(),
                     {k: v.clone() for k, v in first.heads.custom.items()})
    mlps = Readouts(first.mlps.logit.clone(), first.mlps.logit_diff.clone(), first.mlps.prob.clone(),
                    {k: v.clone() for k, v in first.mlps.custom.items()})
    for idx, part in rest:
        i = torch.tensor(idx, dtype=torch.long)
        b = part.baseline.to("cpu")
        for f in _SUMMED:
            values[f][i] += getattr(b, f)
        for f in _MULTIPLIED:
            values[f][i] *= getattr(b, f)
        for k in custom:
            custom[k][i] += b.custom[k]
        rank = None if rank is None or b.answer_rank is None else rank.index_put((i,), torch.maximum(rank[i], b.answer_rank))
        for mine, theirs in ((heads, part.heads), (mlps, part.mlps)):
            mine.logit[..., i] += theirs.logit
            mine.logit_diff[..., i] += theirs.logit_diff
            mine.prob[..., i] *= theirs.prob
            for k in mine.custom:
                mine.custom[k][..., i] += theirs.custom[k]
    joined = Baseline(base.answer.clone(), base.cf_answer.clone(), **values, custom=custom, answer_rank=rank)
    return SweepResult(first.mode, joined, heads, mlps, dict(first.custom_metrics))
