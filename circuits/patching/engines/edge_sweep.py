"""Edges: which components feed the key heads and MLPs (path patching to a receiver, Wang et al. 2023a).

An edge ends at a *receiver*: a later head's query, key or value input at END, or an MLP's input at END. Its
effect is measured as in the original path-patching algorithm:

1. the sender takes its counterfactual value at END while every other head is frozen at its reference value
   (MLPs recompute), and the receiver's input is recorded -- the END engine's path mode up to the receiver;
2. the reference run is repeated with only that input replaced (the receiver head's query, key or value, or the
   MLP's input; the other heads of its layer keep their reference outputs), everything after it recomputing, and
   the answer is read at END.

Only END changes at any step, so both steps are END-only work: step 1 is the END engine's path-mode pass, run once
for all receivers; in step 2 the receiver head's new output comes from the model's attention at END (its
query, key and value inputs given separately, earlier positions' keys and values from the reference run:
:func:`circuits.patching.core.end_layers.z_at_end`), and the layers after it are the END engine's activation-mode pieces. Many senders share each
pass. Tests assert equality with the plain two-run loop of :func:`circuits.patching.engines.plain.edge_plain`.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from dataclasses import dataclass, field

import torch
from torch import Tensor
from tqdm.auto import tqdm

from circuits.io import Shapes
from circuits.models.backend import Model
from circuits.data.pairs import Pairs, as_batch
from circuits.patching.core.end_layers import (attention_at_end, attention_output, baseline_from, check_supported,
    collect_runs, mlp_at_end, readout, z_at_end)
from circuits.patching.engines.end_sweep import all_components, rows_for_budget
from circuits.patching.core.metrics import DEFAULT_METRIC, Baseline, Metric, get_metric, PROB_METRICS
from circuits.patching.core.readouts import MetricLookup, Readouts, check_senders
from circuits.patching.core.scores import Scores
from circuits.types import Component, Receiver


def upstream(sender: Component, receiver: Receiver) -> bool:
    """Whether ``sender``'s END output can reach ``receiver``'s input: an earlier layer, or (for an MLP receiver) a
    head of the same layer."""
    if receiver.channel is not None:
        return sender.layer < receiver.layer
    return sender.layer < receiver.layer or (sender.layer == receiver.layer and sender.kind == "head")


def check_edges(model: Model, senders: Sequence[Component], receivers: Sequence[Receiver]) -> None:
    """One clear line for receivers outside the model or upstream of every sender given."""
    check_senders(model, [r.component for r in receivers])
    check_senders(model, senders)
    for r in receivers:
        if not senders:
            raise ValueError(f"Receiver {r} has no sender upstream of it (nothing comes before the heads of layer 0); "
                             "a receiver must come after its sender")
        if not any(upstream(s, r) for s in senders):
            first = min(senders, key=lambda s: (s.layer, s.kind == "mlp"))
            raise ValueError(f"Receiver {r} is upstream of (or level with) every sender (the earliest is {first}); a "
                             "receiver must come after its sender: a later layer, or for an MLP receiver a head of "
                             "its own layer")


@dataclass
class EdgeSweep(MetricLookup):
    """Patched END quantities for each (sender, receiver) edge, ``[sender, receiver, pair]`` (NaN where the sender
    is not upstream of the receiver; ``prob`` NaN unless asked for)."""

    baseline: Baseline
    senders: list[Component]
    receivers: list[Receiver]
    readouts: Readouts
    custom_metrics: dict[str, Metric] = field(default_factory=dict)

    def scores(self, metric: str | Metric = DEFAULT_METRIC) -> Scores:
        """:class:`~circuits.patching.core.scores.Scores` of every edge, ``[sender, receiver]`` (NaN where the sender is
        not upstream)."""
        m = self.metric(metric)
        return Scores({"edges": m.effect(self.readouts, self.baseline)}, m.name, m.sign, self.baseline,
                      labels={"edges": (list(self.senders), list(self.receivers))}, engine="edges")

    def tensors(self) -> dict:
        return {**self.readouts.tensors("edge"), "senders": [str(s) for s in self.senders],
                "receivers": [str(r) for r in self.receivers], "baseline": self.baseline.to_dict()}

    @classmethod
    def from_tensors(cls, d: dict, source: str | Path = "the edge sweep") -> EdgeSweep:
        """The sweep :meth:`tensors` gave (``source``: the file it was read from), checked first: ``edge_*``
        ``[sender, receiver, pair]`` over as many senders and receivers as it names and the baseline's pairs; else one
        :class:`~circuits.io.TensorError` line naming ``source`` and the tensor."""
        shapes = Shapes(source)
        if not isinstance(d, dict) or not all(isinstance(d.get(k), list) for k in ("senders", "receivers")):
            raise shapes.fail("it is not an edge sweep's tensors with the senders' and receivers' names")
        try:
            senders = [Component.parse(s) for s in d["senders"]]
            receivers = [Receiver.parse_many(r)[0] for r in d["receivers"]]
        except (TypeError, ValueError, IndexError, AttributeError) as err:
            raise shapes.fail(f"its senders or receivers cannot be read ({err})") from None
        shapes.sizes.update(sender=(len(senders), "senders"), receiver=(len(receivers), "receivers"))
        readouts = Readouts.checked(d, "edge", ("sender", "receiver", "pair"), shapes)
        return cls(Baseline.checked(d.get("baseline"), shapes), senders, receivers, readouts)


def _receiver_z(model: Model, r: Receiver, x: Tensor, x_ref: Tensor, keys: Tensor, values: Tensor,
                end: Tensor) -> Tensor:
    """The receiver head's END output ``[sender, pair, d_head]`` when its ``r.channel`` input is ``x`` ``[sender,
    pair, d_model]`` and its other inputs are the reference ``x_ref`` ``[pair, d_model]``: the model's attention on
    one query (:func:`circuits.patching.core.end_layers.z_at_end`), earlier positions' keys and values from the
    reference run."""
    S, P, d = x.shape
    ref = x_ref[None].expand(S, P, d)
    inputs = {c: (x if c == r.channel else ref) for c in ("q", "k", "v")}
    z = z_at_end(model, r.layer, inputs["q"], inputs["k"], inputs["v"], keys, values, end)
    return z[:, :, r.component.head]


@torch.no_grad()
def sweep_edges(
    model: Model,
    pairs: Pairs,
    receivers: Sequence[Receiver | str] | str,
    *,
    senders: Sequence[Component | str] | None = None,
    metrics: Sequence[str | Metric] = (),
    prob: bool = False,
    memory_mb: float = 1024,
    progress: bool = True,
) -> EdgeSweep:
    """Path patching from every sender to every receiver at END (see the module docstring).

    Args:
        receivers: :class:`~circuits.types.Receiver` values or text (``"20.8"`` = its q, k and v inputs,
            ``"20.8.q"``, ``"MLP19"``).
        senders: heads and MLPs (default: every component upstream of some receiver).
        prob: also read the answer probability (a log-sum-exp over the whole vocabulary per row).
    """
    check_supported(model)
    recv = Receiver.parse_many(receivers)
    comps = [Component.parse(s) for s in senders] if senders is not None else all_components(model)
    check_senders(model, [r.component for r in recv])
    if senders is None:
        comps = [c for c in comps if any(upstream(c, r) for r in recv)]
    check_edges(model, comps, recv)
    comps = sorted(comps, key=Component.sort_key)
    custom = [m for m in map(get_metric, metrics) if m.logits_fn is not None]
    batch = as_batch(pairs, model)
    cfg = model.cfg
    L, P, device = cfg.n_layers, len(batch), cfg.device
    runs = collect_runs(model, batch, need_kv=True)
    base = baseline_from(model, batch.answer.to(device), runs, custom, batch.cf_label)
    end = batch.end.to(device)
    out = Readouts.empty((len(comps), len(recv), P), [m.name for m in custom])
    last = max(r.layer for r in recv)
    per_chunk = max(1, rows_for_budget(model, P, memory_mb) // 2)
    bar = tqdm(total=len(comps) * len(recv), desc="edges", unit="edge", disable=not progress)
    for c0 in range(0, len(comps), per_chunk):
        chunk = comps[c0 : c0 + per_chunk]
        # Step 1: the sender patched, other heads frozen, MLPs recomputing (path mode), up to the last receiver.
        x: Tensor | None = None
        pre: dict[int, tuple[Tensor, int]] = {}
        mid: dict[int, tuple[Tensor, int]] = {}
        for layer in range(chunk[0].layer, last + 1):
            if x is not None:
                pre[layer] = (x, x.shape[0])
                x = x + runs.attn_out[layer][None]
            heads = [c for c in chunk if c.layer == layer and c.kind == "head"]
            if heads:
                idx = torch.tensor([c.head for c in heads], device=device)
                z = runs.z_ref[layer][None].repeat(len(heads), 1, 1, 1)
                z[torch.arange(len(heads), device=device), :, idx] = runs.z_cf[layer][:, idx].transpose(0, 1)
                new = runs.resid_pre[layer][None] + attention_output(model, layer, z)
                x = new if x is None else torch.cat([x, new])
            if x is not None:
                mid[layer] = (x, x.shape[0])
                x = x + mlp_at_end(model, layer, x)
            mlps = [c for c in chunk if c.layer == layer and c.kind == "mlp"]
            if mlps:
                new = (runs.resid_mid[layer] + runs.mlp_out_cf[layer])[None].expand(len(mlps), -1, -1)
                x = new if x is None else torch.cat([x, new])
        # Step 2: per receiver, only its input from step 1; everything after it recomputes (activation mode).
        for j, r in enumerate(recv):
            rows = [i for i, c in enumerate(chunk) if upstream(c, r)]
            if not rows:
                bar.update(len(chunk))
                continue
            state, n = (pre if r.channel else mid).get(r.layer, (None, 0))
            assert state is not None and n >= len(rows)
            got = state[torch.tensor(rows, device=device)]
            if r.channel:
                zr = _receiver_z(model, r, got, runs.resid_pre[r.layer], runs.keys[r.layer], runs.values[r.layer], end)
                z = runs.z_ref[r.layer][None].repeat(len(rows), 1, 1, 1)
                z[:, :, r.component.head] = zr.to(z.dtype)
                y = runs.resid_pre[r.layer][None] + attention_output(model, r.layer, z)
                y = y + mlp_at_end(model, r.layer, y)
            else:
                y = runs.resid_mid[r.layer][None] + mlp_at_end(model, r.layer, got)
            for layer in range(r.layer + 1, L):
                y = y + attention_at_end(model, layer, y, runs.keys[layer], runs.values[layer], end)
                y = y + mlp_at_end(model, layer, y)
            values = readout(model, y, base.answer, base.cf_answer, custom, prob=prob)
            for a, i in enumerate(rows):
                out.put((c0 + i, j), {k: v[a].cpu() for k, v in values.items()})
            bar.update(len(chunk))
    bar.close()
    return EdgeSweep(base.to("cpu"), comps, recv, out, {m.name: m for m in custom})


def every_receiver(model: Model) -> list[Receiver]:
    """Every receiver some component sends to: each head's q, k and v input after layer 0 and every MLP's input."""
    cfg = model.cfg
    return [r for l in range(cfg.n_layers) for r in
            [*(Receiver(Component("head", l, h), c) for h in range(cfg.n_heads) for c in ("q", "k", "v") if l),
             Receiver(Component.mlp(l), None)]]


def score_edges(model: Model, pairs: Pairs, *, metric: str | Metric, positions: str, progress: bool,
                memory_mb: float, receivers: Sequence[Receiver | str] | str | None = None, **options) -> Scores:
    """The registry's ``edges``: :func:`sweep_edges` into ``receivers`` (every receiver by default) scored by
    ``metric``."""
    prob = get_metric(metric).name in PROB_METRICS  # the probability's log-sum-exp only where the metric reads it
    return sweep_edges(model, pairs, every_receiver(model) if receivers is None else receivers, prob=prob,
                       memory_mb=memory_mb, progress=progress, **options).scores(metric)
