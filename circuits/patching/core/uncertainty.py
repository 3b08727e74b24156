"""How sure a ranking is: bootstrap confidence intervals over prompt pairs for every effect, and which key
components sit so close to the key rule's threshold that their interval crosses it.

The sweep keeps every patched value per pair (:class:`~circuits.patching.engines.end_sweep.SweepResult`), so an interval is a
resampling of pairs with replacement, each resample scored by the metric's own aggregate (a mean over pairs, or
``fraction``'s ratio of means) -- no model is run. The percentile interval of ``n_boot`` resamples is reported.
"""

from __future__ import annotations

import math
from typing import Any
from dataclasses import dataclass

import torch
from jaxtyping import Float
from torch import Tensor

from circuits.patching.engines.end_sweep import SweepResult
from circuits.patching.core.metrics import METRICS, Metric
from circuits.patching.core.ranking import KeyRule, order


@dataclass
class Intervals:
    """Percentile bootstrap intervals: heads ``[layer, head]`` and MLPs ``[layer]`` (low and high)."""

    head_low: Float[Tensor, "layer head"]
    head_high: Float[Tensor, "layer head"]
    mlp_low: Float[Tensor, " layer"]
    mlp_high: Float[Tensor, " layer"]
    level: float
    n_boot: int

    def to_json(self) -> dict:
        return {"head_ci_low": self.head_low.tolist(), "head_ci_high": self.head_high.tolist(),
                "mlp_ci_low": self.mlp_low.tolist(), "mlp_ci_high": self.mlp_high.tolist(), "ci_level": self.level,
                "n_bootstrap": self.n_boot}


class _Resample:
    """``view.select(idx)`` (of :class:`~circuits.patching.core.readouts.Readouts` or :class:`Baseline`), gathering only the fields a metric reads: a
    metric reads one or two of them, and 1,000 resamples of every field made saving an identify result take seconds."""

    def __init__(self, source: Any, idx: Tensor) -> None:
        self._source, self._idx = source, idx

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._source, name)
        if isinstance(value, dict):
            return {k: v[..., self._idx] for k, v in value.items()}
        return value[..., self._idx] if isinstance(value, Tensor) else value


def bootstrap(sweep: SweepResult, metric: str | Metric, n_boot: int = 1000, level: float = 0.95, seed: int = 0) -> Intervals:
    """Percentile intervals of every head's and MLP's effect over ``n_boot`` resamples of the pairs."""
    if n_boot < 1:
        raise ValueError(f"n_boot must be at least 1, got {n_boot}")
    if not 0 < level < 1:
        raise ValueError(f"level must lie in (0, 1), got {level}")
    m = sweep.metric(metric)
    heads, mlps = sweep.heads, sweep.mlps
    P = sweep.n_pairs
    idx = resample_pairs(P, n_boot, seed)
    hs, ms = [], []
    # Built-in and logits metrics reduce over the last axis only, so a chunk of resamples is one call
    # ([..., resample, pair]); a metric of the user's own runs one resample at a time.
    chunk = 125 if (m is METRICS.get(m.name) or m.logits_fn is not None) else 1
    for start in range(0, n_boot, chunk):
        rows = idx[start : start + chunk] if chunk > 1 else idx[start]
        base = _Resample(sweep.baseline, rows)
        h, ml = m.effect(_Resample(heads, rows), base), m.effect(_Resample(mlps, rows), base)
        hs.append(h.movedim(-1, 0) if chunk > 1 else h[None])
        ms.append(ml.movedim(-1, 0) if chunk > 1 else ml[None])
    h, ml = torch.cat(hs), torch.cat(ms)
    q = torch.tensor([(1 - level) / 2, (1 + level) / 2])
    hq = torch.nanquantile(h.float(), q, dim=0)
    mq = torch.nanquantile(ml.float(), q, dim=0)
    return Intervals(hq[0], hq[1], mq[0], mq[1], level, n_boot)


def rule_threshold(rule: KeyRule, effects: Tensor, sign: int) -> float:
    """The value a key rule separates at: its threshold, or for ``topK`` the effect of the first component it leaves
    out."""
    if rule.threshold is not None:
        return float(rule.threshold)
    flat = effects.flatten()
    ranked = order(flat, sign, keep_nan=True)
    k = rule.top_k or 0
    return float(flat[ranked[k]]) if k < len(flat) else float("nan")


def crosses(low: float, high: float, threshold: float) -> bool:
    """Whether an interval reaches the threshold (the selection could go either way)."""
    return not math.isnan(threshold) and low <= threshold <= high


def resample_pairs(n_pairs: int, n_boot: int, seed: int = 0) -> Tensor:
    """``[n_boot, n_pairs]`` pair indices drawn with replacement (the resamples :func:`bootstrap` draws)."""
    if n_boot < 1:
        raise ValueError(f"n_boot must be at least 1, got {n_boot}")
    return torch.randint(0, n_pairs, (n_boot, n_pairs), generator=torch.Generator().manual_seed(seed))


def percentile_interval(samples: Tensor, level: float = 0.95) -> tuple[Tensor, Tensor]:
    """The percentile interval of resampled values ``[resample, ...]`` (NaN resamples left out), low and high."""
    if not 0 < level < 1:
        raise ValueError(f"level must lie in (0, 1), got {level}")
    q = torch.tensor([(1 - level) / 2, (1 + level) / 2], dtype=torch.float64)
    out = torch.nanquantile(samples.double(), q, dim=0)
    return out[0], out[1]


def mean_interval(values: Float[Tensor, "sample ..."], n_boot: int = 1000, level: float = 0.95, seed: int = 0
                  ) -> tuple[Tensor, Tensor]:
    """The percentile bootstrap interval of the mean over samples (axis 0: pairs, prompts) of ``values``: ``n_boot``
    resamples of the samples with replacement (:func:`resample_pairs`), each the mean over its samples; low and high,
    each shaped as ``values[0]``. One sample gives a zero-width interval (nothing to resample)."""
    v = torch.as_tensor(values).double()
    if v.shape[0] < 1:
        raise ValueError("an interval needs at least one sample")
    return percentile_interval(v[resample_pairs(v.shape[0], n_boot, seed)].mean(1), level)


def wilson_interval(share: float, n: int, level: float = 0.95) -> tuple[float, float]:
    """The Wilson score interval of a proportion: ``share`` of ``n`` independent items correct (a binomial count, e.g.
    a transfer set's accuracy), at coverage ``level``. Unlike the normal approximation it stays inside [0, 1] and is
    not empty at 0% or 100%; ``n == 0`` gives (NaN, NaN)."""
    from statistics import NormalDist

    if not 0 < level < 1:
        raise ValueError(f"level must lie in (0, 1), got {level}")
    if share is None or n <= 0 or share != share:
        return float("nan"), float("nan")
    z = NormalDist().inv_cdf((1 + level) / 2)
    denom = 1 + z * z / n
    centre = (share + z * z / (2 * n)) / denom
    half = z / denom * math.sqrt(max(0.0, share * (1 - share)) / n + z * z / (4 * n * n))
    return max(0.0, centre - half), min(1.0, centre + half)


def bootstrap_p(draws: Tensor) -> float:
    """The two-sided bootstrap p-value of "the difference is 0" from resampled differences ``[resample]``: twice the
    smaller share of resamples on either side of 0 (each share counted as (k + 1) / (n + 1), so no p is 0), at most
    1; NaN resamples left out, NaN without any."""
    d = draws.double().flatten()
    d = d[~d.isnan()]
    n = d.numel()
    if n == 0:
        return float("nan")
    below, above = (int((d <= 0).sum()) + 1) / (n + 1), (int((d >= 0).sum()) + 1) / (n + 1)
    return min(1.0, 2 * min(below, above))


def holm(p_values: list[float], alpha: float = 0.05) -> tuple[list[bool], list[float]]:
    """Holm's step-down family-wise correction over ``p_values`` (one per comparison a table makes): the i-th smallest
    p (i = 0, 1, ...) is compared with ``alpha / (m - i)``, and the comparisons are rejected ("apart") in that order
    until the first that is not. Returns, per comparison in the order given, whether it is rejected and the coverage
    ``1 - alpha / (m - i)`` its corrected interval is drawn at. A NaN p (no resamples) is never rejected and its level
    is NaN; the family ``m`` counts the others."""
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must lie in (0, 1), got {alpha}")
    finite = sorted((p, i) for i, p in enumerate(p_values) if p == p)
    m = len(finite)
    rejected = [False] * len(p_values)
    levels = [float("nan")] * len(p_values)
    going = True
    for rank, (p, i) in enumerate(finite):
        levels[i] = 1 - alpha / (m - rank)
        going = going and p <= alpha / (m - rank)
        rejected[i] = going
    return rejected, levels

