"""What the engines beyond END-by-component share: patched END readouts as a view a metric can score, the
baseline read from two END residuals, senders (heads, MLPs, neurons), and where two prompts first differ.

Every engine of this step -- the END sweep (:mod:`~circuits.patching.engines.end_sweep`), the per-position sweep
(:mod:`~circuits.patching.engines.position_sweep`), single neurons (:mod:`~circuits.patching.engines.neuron_sweep`), edges
(:mod:`~circuits.patching.engines.edge_sweep`) and the attribution screen (:mod:`~circuits.patching.engines.attribution`) -- reads the
same three END quantities of each patched row (answer logit, logit difference, answer probability) and hands
them to a :class:`~circuits.patching.core.metrics.Metric` with the unpatched :class:`Baseline`. :class:`Readouts` is the
one type they return (the ``Patched`` protocol those metrics take, for tensors of any leading shape ``[..., pair]``):
the END sweep holds one for heads and one for MLPs, the position, neuron and edge sweeps theirs; a subset of pairs
is :meth:`Readouts.select` (a bootstrap resample, a split by problem form) and pooled parts are :meth:`Readouts.cat`.
:class:`MetricLookup` gives every result the same ``metric`` lookup; each result's ``scores(metric)`` turns its
readouts into :class:`~circuits.patching.core.scores.Scores`, where every reading (ranked, key, top) is done.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Union

import torch
from jaxtyping import Float, Int
from torch import Tensor

from circuits.io import Shapes
from circuits.models.backend import Model
from circuits.data.pairs import PairBatch
from circuits.patching.core.end_layers import baseline_from
from circuits.patching.core.metrics import DEFAULT_METRIC, Baseline, Metric, get_metric
from circuits.types import Component, Neuron

READOUTS = ("logit", "logit_diff", "prob")
Sender = Union[Component, Neuron]


def checked_neurons(d: dict, key: str, shapes: Shapes) -> list[Neuron]:
    """The neurons a saved sweep names (``d[key]``, ``[layer, index]`` pairs), their count fixing the file's
    ``neuron`` axis; else one :meth:`~circuits.io.Shapes.fail` line."""
    neurons = shapes.build(lambda: [Neuron(*map(int, n)) for n in d[key]],
                           f"its {key} holds something other than [layer, index] pairs", (TypeError, ValueError))
    shapes.sizes["neuron"] = (len(neurons), key)
    return neurons


@dataclass
class Readouts:
    """Patched END quantities ``[..., pair]`` (float32): what a metric scores (``Metric.per_pair(view, base)``).

    ``custom`` holds each custom metric's ``logits_fn`` value. Entries not computed are NaN.
    """

    logit: Tensor
    logit_diff: Tensor
    prob: Tensor
    custom: dict[str, Tensor] = field(default_factory=dict)

    @property
    def n_pairs(self) -> int:
        return self.logit.shape[-1]

    def select(self, idx: Tensor | slice | list[int]) -> Readouts:
        """The same view over a subset of pairs (the last axis; in the order of ``idx``, repeats allowed)."""
        return Readouts(self.logit[..., idx], self.logit_diff[..., idx], self.prob[..., idx],
                        {k: v[..., idx] for k, v in self.custom.items()})

    def index(self, idx: tuple) -> Readouts:
        """The same view over leading indices (e.g. one component: ``view.index((layer, head))``)."""
        return Readouts(self.logit[idx], self.logit_diff[idx], self.prob[idx], {k: v[idx] for k, v in self.custom.items()})

    def tensors(self, prefix: str) -> dict[str, Tensor]:
        out = {f"{prefix}_{r}": getattr(self, r) for r in READOUTS}
        out.update({f"{prefix}_custom_{k}": v for k, v in self.custom.items()})
        return out

    @classmethod
    def checked(cls, d: dict[str, Tensor], prefix: str, axes: Sequence[str], shapes: Shapes) -> Readouts:
        """:meth:`from_tensors` of what a file holds, each readout (and custom metric) first checked by ``shapes``
        (the file's :class:`~circuits.io.Shapes`) as a float tensor of ``axes`` without infinity."""
        for r in READOUTS:
            shapes.tensor(f"{prefix}_{r}", d.get(f"{prefix}_{r}"), axes, no_inf=True)
        for k, v in d.items():
            if isinstance(k, str) and k.startswith(f"{prefix}_custom_"):
                shapes.tensor(k, v, axes, no_inf=True)
        return cls.from_tensors(d, prefix)

    @classmethod
    def from_tensors(cls, d: dict[str, Tensor], prefix: str) -> Readouts:
        custom = {k[len(prefix) + 8:]: v for k, v in d.items() if k.startswith(f"{prefix}_custom_")}
        return cls(*(d[f"{prefix}_{r}"] for r in READOUTS), custom=custom)

    @classmethod
    def cat(cls, parts: Sequence[Readouts], custom: Sequence[str] | None = None) -> Readouts:
        """Views of consecutive sets of pairs as one (joined along the pair axis); ``custom``: the custom metrics to
        keep (default: those of the first part; every part must have them)."""
        if not parts:
            raise ValueError("Readouts.cat needs at least one part")
        keep = list(parts[0].custom) if custom is None else list(custom)
        for k in keep:
            if any(k not in p.custom for p in parts):
                raise ValueError(f"Custom metric {k!r} is missing from some of the readouts joined; keep only the "
                                 f"ones every part has ({', '.join(sorted(set.intersection(*(set(p.custom) for p in parts))))})")
        return cls(*(torch.cat([getattr(p, r) for p in parts], -1) for r in READOUTS),
                   custom={k: torch.cat([p.custom[k] for p in parts], -1) for k in keep})

    @classmethod
    def empty(cls, shape: tuple[int, ...], custom: Sequence[str] = ()) -> Readouts:
        nan = lambda: torch.full(shape, float("nan"))  # noqa: E731
        return cls(nan(), nan(), nan(), {k: nan() for k in custom})

    def put(self, idx: tuple, values: dict[str, Tensor]) -> None:
        """Write one row of values (``{readout: [pair]}``) at leading index ``idx``."""
        for r in READOUTS:
            getattr(self, r)[idx] = values[r]
        for k in self.custom:
            self.custom[k][idx] = values[k]

    def fill_baseline(self, idx: tuple, base: Baseline, pairs: Tensor) -> None:
        """Unpatched values at ``idx`` for ``pairs`` (a patch that changes nothing, e.g. before the prompts differ)."""
        self.logit[idx + (pairs,)] = base.logit[pairs]
        self.logit_diff[idx + (pairs,)] = base.logit_diff[pairs]
        self.prob[idx + (pairs,)] = base.prob[pairs]
        for k in self.custom:
            self.custom[k][idx + (pairs,)] = base.custom[k][pairs]


def baseline_of(model: Model, answer: Int[Tensor, " pair"], ref_end: Float[Tensor, "pair d_model"],
                cf_end: Float[Tensor, "pair d_model"], custom: Sequence[Metric] = (),
                cf_label: Int[Tensor, " pair"] | None = None) -> Baseline:
    """The unpatched END quantities from the final END residuals of both runs (the END engine's own arithmetic)."""
    return baseline_from(model, answer, SimpleNamespace(ref_end_resid=ref_end, cf_end_resid=cf_end), custom,
                         cf_label)  # type: ignore[arg-type]


def cat_baselines(parts: Sequence[Baseline]) -> Baseline:
    """Baselines of consecutive chunks of pairs as one. ``answer_rank`` is kept where every part has it (``None``
    otherwise: a baseline saved before it existed); custom values are kept where every part has them."""
    if not parts:
        raise ValueError("cat_baselines needs at least one baseline")
    names = [k for k in parts[0].to_dict() if k not in ("custom", "answer_rank")]
    ranks = [b.answer_rank for b in parts]
    shared = [k for k in parts[0].custom if all(k in b.custom for b in parts)]
    return Baseline(**{k: torch.cat([getattr(b, k) for b in parts]) for k in names},
                    custom={k: torch.cat([b.custom[k] for b in parts]) for k in shared},
                    answer_rank=None if any(r is None for r in ranks) else torch.cat(ranks))


def first_difference(batch: PairBatch) -> Int[Tensor, " pair"]:
    """Per pair, the first position where reference and counterfactual tokens differ (``end + 1`` when they never
    do). Before it both runs are identical at every layer (causal attention), so no patch there changes anything."""
    differ = batch.reference != batch.counterfactual
    pos = torch.arange(differ.shape[1], device=differ.device)
    differ = differ & (pos[None] <= batch.end[:, None])
    first = torch.where(differ, pos[None], torch.full_like(differ, 10**9, dtype=torch.long)).min(-1).values
    return torch.minimum(first, batch.end + 1)


def sender_sort_key(s: Sender) -> tuple[int, int, int]:
    """Forward order within a layer: heads (attention), then neurons (inside the MLP), then the MLP's output."""
    if isinstance(s, Neuron):
        return (s.layer, 1, s.index)
    return (s.layer, 0 if s.kind == "head" else 2, s.head or 0)


def check_senders(model: Model, senders: Sequence[Sender]) -> None:
    """One clear line for a sender outside the model."""
    cfg = model.cfg
    for s in senders:
        if isinstance(s, Neuron):
            s.check(cfg.n_layers, cfg.d_mlp or 0)
        elif not 0 <= s.layer < cfg.n_layers or (s.kind == "head" and not (s.head is not None and 0 <= s.head < cfg.n_heads)):
            raise ValueError(f"Component {s} is outside this model ({cfg.n_layers} layers x {cfg.n_heads} heads).")


def spearman(a: Tensor, b: Tensor) -> float:
    """Spearman rank correlation of two flat tensors (average ranks for ties; NaN entries of either dropped)."""
    a, b = a.flatten().double(), b.flatten().double()
    keep = ~(a.isnan() | b.isnan())
    a, b = a[keep], b[keep]
    if a.numel() < 2:
        return float("nan")

    def ranks(x: Tensor) -> Tensor:
        order = torch.argsort(x, stable=True)
        r = torch.empty_like(x)
        r[order] = torch.arange(len(x), dtype=x.dtype)
        values, counts = x.unique(return_counts=True)
        for v in values[counts > 1]:  # ties share their average rank
            m = x == v
            r[m] = r[m].mean()
        return r

    ra, rb = ranks(a), ranks(b)
    ra, rb = ra - ra.mean(), rb - rb.mean()
    denom = (ra.norm() * rb.norm()).item()
    return float((ra @ rb).item() / denom) if denom > 0 else float("nan")


class MetricLookup:
    """A metric by name for a result holding ``custom_metrics`` (a custom one first, then the built-in ones)."""

    custom_metrics: dict[str, Metric]

    def metric(self, metric: str | Metric = DEFAULT_METRIC) -> Metric:
        if isinstance(metric, str) and metric in self.custom_metrics:
            return self.custom_metrics[metric]
        return get_metric(metric)

