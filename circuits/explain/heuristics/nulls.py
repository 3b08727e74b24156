"""The nulls of "X% of the top neurons are classified" (issue 43): the same classifier, at the same thresholds, on
neurons of the same MLPs that were not chosen for their effect.

- :func:`null_neurons`: per key MLP, ``k`` neurons drawn at random from those outside the top set, and the ``k`` with
  the smallest absolute effect (the least important: a neuron that does nothing for the answer). If the classifier
  passes as many of those as of the top neurons, the share classified says nothing about the top neurons.
- :func:`rate`: a share classified with its 95% Wilson interval (a binomial count: the neurons are the units), and
  :func:`fisher_p`: whether a null group's share differs from the top neurons' (Fisher's exact test).
- :func:`knockout_vs_random`: the causal check read against its own control with a family-wise correction: per
  knocked-out class, the covered prompts' drop minus the random neurons' drop on the same prompts (paired), a
  percentile bootstrap over those prompts, a two-sided bootstrap p-value, and Holm's correction over the classes
  (:func:`~circuits.patching.core.uncertainty.holm`); each interval drawn at its corrected level. Computed from the
  per-prompt drops every knockout result holds, so results saved before it read the same way.

Pure tensor code: no model.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import Tensor

from circuits.types import Neuron


def null_neurons(effects: Mapping[int, Tensor], layers: Sequence[int], top: Sequence[Neuron], k: int,
                 seed: int = 0) -> dict[str, list[Neuron]]:
    """``{"random": ..., "low_effect": ...}``: per layer of ``layers``, ``k`` neurons drawn uniformly (``seed``) from
    those not in ``top``, and the ``k`` not in ``top`` with the smallest ``|effect|`` (NaN effects never; ties by
    index). Fewer where a layer has fewer left."""
    if k < 0:
        raise ValueError(f"k must be at least 0, got {k}")
    rng = random.Random(seed)
    taken = {(n.layer, n.index) for n in top}
    out: dict[str, list[Neuron]] = {"random": [], "low_effect": []}
    for l in layers:
        e = effects[l]
        rest = [i for i in range(len(e)) if (l, i) not in taken]
        out["random"] += [Neuron(l, i) for i in sorted(rng.sample(rest, min(k, len(rest))))]
        known = [i for i in rest if not math.isnan(float(e[i]))]
        known.sort(key=lambda i: (abs(float(e[i])), i))
        out["low_effect"] += [Neuron(l, i) for i in sorted(known[:k])]
    return out


def rate(n_classified: int, n: int, z: float = 1.959964) -> dict[str, float]:
    """``n_classified`` of ``n`` as a share with its Wilson score interval (95% by default); NaN for ``n = 0``."""
    if not 0 <= n_classified <= n:
        raise ValueError(f"n_classified must lie in 0..n, got {n_classified} of {n}")
    if n == 0:
        return {"n": 0, "n_classified": 0, "rate": float("nan"), "low": float("nan"), "high": float("nan")}
    p = n_classified / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return {"n": n, "n_classified": n_classified, "rate": p, "low": max(0.0, centre - half), "high": min(1.0, centre + half)}


def fisher_p(k1: int, n1: int, k2: int, n2: int) -> float:
    """Fisher's exact two-sided p-value of "``k1`` of ``n1`` and ``k2`` of ``n2`` are the same share": the
    probability, given the margins, of every table no more likely than the one seen (hypergeometric)."""
    if not (0 <= k1 <= n1 and 0 <= k2 <= n2) or n1 + n2 == 0:
        raise ValueError(f"counts must lie in 0..n, got {k1} of {n1} and {k2} of {n2}")
    k, n = k1 + k2, n1 + n2
    total = math.comb(n, k)
    prob = [math.comb(n1, j) * math.comb(n2, k - j) / total for j in range(max(0, k - n2), min(k, n1) + 1)]
    seen = math.comb(n1, k1) * math.comb(n2, k2) / total
    return min(1.0, sum(p for p in prob if p <= seen * (1 + 1e-9)))


def knockout_vs_random(classes: Mapping[str, Mapping[str, Any]], n_boot: int = 1000, seed: int = 0,
                       alpha: float = 0.05) -> dict[str, dict[str, Any]]:
    """Per knocked-out class (a :func:`~circuits.explain.heuristics.causal_check.class_knockout` entry: ``drop``,
    ``random_drop``, ``covered``), the covered prompts' drop minus the random neurons' on the same prompts: ``mean``,
    the interval at Holm's corrected level (``low``, ``high``, ``level``), the uncorrected two-sided bootstrap ``p``,
    and ``holm_apart`` (the class moves its covered prompts differently from random neurons, family-wise over the
    classes at ``alpha``). A class covering no prompt gets NaN and is left out of the family."""
    from circuits.patching.core.uncertainty import bootstrap_p, holm, percentile_interval, resample_pairs

    draws: dict[str, Tensor] = {}
    means: dict[str, float] = {}
    for name, c in classes.items():
        cov = torch.tensor(c["covered"], dtype=torch.bool)
        d = (torch.tensor(c["drop"], dtype=torch.float64) - torch.tensor(c["random_drop"], dtype=torch.float64))[cov]
        if len(d):
            draws[name] = d[resample_pairs(len(d), n_boot, seed)].mean(1)
            means[name] = float(d.mean())
    names = list(classes)
    p = [bootstrap_p(draws[n]) if n in draws else float("nan") for n in names]
    apart, levels = holm(p, alpha)
    out = {}
    for name, pv, a, level in zip(names, p, apart, levels):
        if name in draws:
            low, high = percentile_interval(draws[name], level)
            out[name] = {"mean": means[name], "low": float(low), "high": float(high), "level": level, "p": pv,
                         "holm_apart": a}
        else:
            out[name] = {"mean": float("nan"), "low": float("nan"), "high": float("nan"), "level": float("nan"),
                         "p": float("nan"), "holm_apart": False}
    return out


__all__ = ["fisher_p", "knockout_vs_random", "null_neurons", "rate"]
