"""The END-position patching engine (Section 4.1, Algorithm 1, Appendix B).

Two sweeps over every component -- each attention head (``hook_z`` of one head at END) and each MLP
(``hook_mlp_out`` at END) -- on a batch of prompt pairs:

- **path patching** (the paper's): the sender takes its counterfactual value at END, every other
  head is frozen at its reference value, MLPs recompute; the receiver is the logits.
- **activation patching**: the sender takes its counterfactual value at END and everything
  downstream recomputes.

Why this is exact and fast. Attention is causal and only the END position is changed, so every
earlier position keeps its reference value in every layer. After a patch at layer ``l`` the work
left is one token per layer (:mod:`circuits.patching.core.end_layers`):

- path patching: the frozen heads add their reference attention output at END, and each MLP
  recomputes on the END vector alone -- no attention is computed at all (where a norm follows attention, as in
  Gemma 2/3, the sender's layer re-normalises its patched sum of heads; later layers' attention outputs are
  the reference's, since all their heads are frozen);
- activation patching: later attention recomputes at END only; its keys and values at earlier
  positions are those of the reference run (cached once), and only END's own query, key and value
  are new.

Many senders share one pass: the END state is a ``[sender, pair, d_model]`` tensor, senders join it
at their own layer, and the answer logits are read from the unembedding. Chunks of senders keep memory
within a budget. The plain one-forward-per-component loop lives in :mod:`circuits.patching.engines.end_sweep_plain`;
tests assert the two agree.

Across ranks (``torchrun``). The sweep is cut into work items -- blocks of at most ``PAIR_BLOCK`` pairs times
chunks of senders (at least ``MIN_CHUNKS`` of them) -- decided by the model, the pairs and the memory budget alone,
never by the number of ranks. Under ``torch.distributed`` each rank runs its items
(:func:`circuits.distributed.assign`) and every rank gathers all of them, so the result equals a one-process run's
bit for bit: each item is the same computation, with the same shapes, wherever it runs. A model spread over GPUs
(:mod:`circuits.models.backend`) is followed layer by layer: the END state moves to each layer's device.
"""

from __future__ import annotations

import math
import warnings
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import Tensor
from tqdm.auto import tqdm

from circuits import distributed as D
from circuits.data.pairs import PairBatch, Pairs, as_batch
from circuits.patching.core.end_layers import (Runs, attention_at_end, attention_output, baseline_from,
    check_supported, collect_runs, mlp_at_end, readout)
from circuits.patching.core.metrics import DEFAULT_METRIC, Baseline, Metric, get_metric
from circuits.models.backend import Model
from circuits.models.forward import EndRecord
from circuits.patching.core.scores import Scores
from circuits.patching.core.readouts import READOUTS, MetricLookup, Readouts, cat_baselines
from circuits.timing import timed
from circuits.types import MODES, Component, Mode, as_components

# Work items: pairs in blocks of at most PAIR_BLOCK (bounded memory for the runs' END state and, in activation mode,
# keys and values), senders in at least MIN_CHUNKS chunks, so up to MIN_CHUNKS ranks per pair block share a sweep.
PAIR_BLOCK = 256
MIN_CHUNKS = 16


@dataclass
class SweepResult(MetricLookup):
    """Patched END quantities for every head and MLP, per pair (float32): the readouts of heads
    (:class:`~circuits.patching.core.readouts.Readouts` ``[layer, head, pair]``) and of MLPs (``[layer, pair]``).

    Each holds the answer logit, the answer-minus-counterfactual-answer logit difference and the answer probability
    after patching, and each custom metric's value (``custom``). Components not swept are NaN, and so is the
    probability of components it was not asked for (``sweep(prob=...)``; ``circuits identify`` computes it for the
    key components only unless ``--prob all``), so the ``prob`` metric is NaN for them. ``head_logit``,
    ``mlp_prob``, ... name the tensors as ``sweep.pt`` stores them.
    """

    mode: Mode
    baseline: Baseline
    heads: Readouts
    mlps: Readouts
    custom_metrics: dict[str, Metric] = field(default_factory=dict)

    def __repr__(self) -> str:  # one line, not the tensors (print(result) in a notebook)
        L, H, n = self.head_logit.shape
        return (f"<SweepResult: {self.mode} patching, {L} layers x {H} heads and {L} MLPs, {n} pairs"
                f"{', custom ' + ', '.join(self.custom) if self.custom else ''}>")

    # The tensors as sweep.pt names them: heads [layer, head, pair], MLPs [layer, pair], one per readout.
    head_logit = property(lambda self: self.heads.logit)
    head_logit_diff = property(lambda self: self.heads.logit_diff)
    head_prob = property(lambda self: self.heads.prob)
    mlp_logit = property(lambda self: self.mlps.logit)
    mlp_logit_diff = property(lambda self: self.mlps.logit_diff)
    mlp_prob = property(lambda self: self.mlps.prob)

    @property
    def custom(self) -> dict[str, tuple[Tensor, Tensor]]:
        """Each custom metric's patched values, ``(heads, mlps)``."""
        return {k: (v, self.mlps.custom[k]) for k, v in self.heads.custom.items()}

    @property
    def n_pairs(self) -> int:
        return self.heads.n_pairs

    def scores(self, metric: str | Metric = DEFAULT_METRIC) -> Scores:
        """:class:`~circuits.patching.core.scores.Scores` of every head ``[layer, head]`` and MLP ``[layer]`` by
        ``metric``: the metric over pairs (a mean, or the metric's own aggregate: ``fraction`` is a ratio of means),
        with the per-pair values in ``per_pair``. Every reading (ranked, key, top) goes through it."""
        m = self.metric(metric)
        return Scores({"heads": m.effect(self.heads, self.baseline), "mlps": m.effect(self.mlps, self.baseline)},
                      m.name, m.sign, self.baseline, engine=f"exact-{self.mode}",
                      per_pair={"heads": m.per_pair(self.heads, self.baseline), "mlps": m.per_pair(self.mlps, self.baseline)})

    def select(self, idx: Sequence[int] | Tensor) -> SweepResult:
        """The same sweep restricted to the pairs ``idx`` (in that order; repeats allowed, as a bootstrap draws)."""
        i = torch.as_tensor(idx if isinstance(idx, Tensor) else list(idx), dtype=torch.long)
        return SweepResult(self.mode, self.baseline.select(i), self.heads.select(i), self.mlps.select(i),
                           dict(self.custom_metrics))

    @classmethod
    def pool(cls, parts: Sequence[SweepResult]) -> SweepResult:
        """One sweep over the pairs of ``parts`` one after another (same mode and model). Each pair's patched values
        depend on that pair alone, so this is what a sweep over the pooled pairs computes (up to float rounding
        from other batch shapes). Custom metrics every part has are kept."""
        if not parts or len({p.mode for p in parts}) != 1:
            raise ValueError(f"Pooling needs sweeps of one mode, got {[p.mode for p in parts]}")
        shared = sorted(set.intersection(*(set(p.heads.custom) for p in parts)))
        return SweepResult(
            parts[0].mode, cat_baselines([p.baseline for p in parts]),
            Readouts.cat([p.heads for p in parts], shared), Readouts.cat([p.mlps for p in parts], shared),
            {k: parts[0].custom_metrics[k] for k in shared if k in parts[0].custom_metrics},
        )

    def tensors(self) -> dict[str, Tensor]:
        """What ``sweep.pt`` stores: ``head_logit`` ... ``mlp_prob``, ``baseline``, ``mode`` and ``custom``
        (``{name: [heads, mlps]}``)."""
        out: dict = {f"{k}_{r}": getattr(view, r) for k, view in (("head", self.heads), ("mlp", self.mlps))
                     for r in READOUTS}
        out["baseline"] = self.baseline.to_dict()
        out["mode"] = self.mode
        out["custom"] = {k: list(v) for k, v in self.custom.items()}
        return out

    def save(self, folder: str | Path, *, overwrite: bool = False) -> Path:
        """Write every per-pair value into ``folder`` (``sweep.pt``, ``sweep.json``), atomically; a folder holding
        anything but a saved sweep is refused unless ``overwrite`` (:mod:`circuits.patching.engines.end_sweep_files`)."""
        from circuits.patching.engines.end_sweep_files import save

        return save(self, folder, overwrite=overwrite)

    @classmethod
    def load(cls, folder: str | Path, metrics: Sequence[Metric] = ()) -> SweepResult:
        """The sweep :meth:`save` wrote, equal to it; ``metrics``: its custom metrics, to compute their effects."""
        from circuits.patching.engines.end_sweep_files import load

        return load(cls, folder, metrics)

    @classmethod
    def from_tensors(cls, d: dict, mode: Mode = "path") -> SweepResult:
        custom = d.get("custom", {})
        views = [Readouts(*(d[f"{k}_{r}"] for r in READOUTS), custom={c: v[i] for c, v in custom.items()})
                 for i, k in enumerate(("head", "mlp"))]
        return cls(d.get("mode", mode), Baseline.from_dict(d["baseline"]), *views)


def _warn_unlikely_answers(base: Baseline, top: int = 10) -> None:
    """Patching measures how a component moves an answer the model gives; warn when it does not give it."""
    if base.answer_rank is None:
        return
    far = base.answer_rank >= top
    if far.any():
        warnings.warn(f"{int(far.sum())} of {len(far)} pairs: the model does not rank the answer among its top {top} "
                      f"tokens at END (ranks {sorted(int(r) for r in base.answer_rank[far])[:5]}...), so their effects "
                      "measure little. Check that each prompt ends right before the answer's first token (for SmolLM2, "
                      "after a space) and that the model can do the task.", stacklevel=4)


def all_components(model: Model) -> list[Component]:
    heads = [Component("head", l, h) for l in range(model.cfg.n_layers) for h in range(model.cfg.n_heads)]
    return heads + [Component.mlp(l) for l in range(model.cfg.n_layers)]


def rows_for_budget(model: Model, n_pairs: int, memory_mb: float) -> int:
    """Senders per chunk so that one chunk's working tensors fit ``memory_mb``."""
    cfg = model.cfg
    per_row = cfg.d_model * 6 + (cfg.d_mlp or 4 * cfg.d_model) * 3 + cfg.n_heads * 64
    bytes_per = torch.finfo(cfg.dtype).bits // 8
    rows = int(memory_mb * 2**20 / (per_row * bytes_per))
    return max(1, rows // max(n_pairs, 1))


def work_items(model: Model, n_pairs: int, comps: Sequence[Component], memory_mb: float
               ) -> tuple[list[slice], list[tuple[int, list[Component]]]]:
    """The pair blocks, and the ``(block, senders)`` items of a sweep, in order. They depend on the model, the
    number of pairs, the components and the budget, never on the number of ranks (which is what makes a sweep split
    across ranks equal a one-process sweep exactly)."""
    blocks = [slice(i, min(i + PAIR_BLOCK, n_pairs)) for i in range(0, n_pairs, PAIR_BLOCK)]
    items: list[tuple[int, list[Component]]] = []
    for b, block in enumerate(blocks):
        per = min(rows_for_budget(model, block.stop - block.start, memory_mb), max(1, math.ceil(len(comps) / MIN_CHUNKS)))
        items += [(b, list(comps[i : i + per])) for i in range(0, len(comps), per)]
    return blocks, items


def _item_cost(model: Model, blocks: list[slice], item: tuple[int, list[Component]]) -> float:
    """Work of an item: each sender row runs every layer from its own to the last, for every pair of its block."""
    block = blocks[item[0]]
    return float((block.stop - block.start) * sum(model.cfg.n_layers - c.layer for c in item[1]))


@dataclass
class PreparedRuns:
    """The reference and counterfactual runs of a sweep (:func:`prepare`), to pass as ``sweep(runs=...)``.

    Holds the END activations the engine reads, one :class:`~circuits.patching.core.end_layers.Runs` per block of at most
    ``PAIR_BLOCK`` pairs (activation mode: also the reference's keys and values at every position, about
    ``2 x n_layers x pairs x positions x d_head x kv_heads`` numbers), on the model's devices. Tied to the pairs, the
    mode and the model object it was made with; weights changed in place afterwards are not detected.
    """

    mode: Mode
    batch: PairBatch  # the pairs' tensors, on the CPU: what a later sweep's pairs are checked against
    blocks: list[Runs]
    model_name: str
    _model: weakref.ref = field(repr=False)

    def __repr__(self) -> str:
        return f"<PreparedRuns: {self.mode} patching, {len(self.batch)} pairs, {self.model_name}>"

    def check(self, model: Model, batch: PairBatch, mode: Mode) -> None:
        """One line when these runs were made for another mode, model or pairs than a sweep's."""
        if mode != self.mode:
            raise ValueError(f"runs= were prepared for {self.mode} patching, not {mode}; accepted: runs from "
                             f"cc.prepare(model, pairs, {mode!r})")
        if self._model() is not model:
            raise ValueError(f"runs= were prepared with another model ({self.model_name}); accepted: runs from "
                             f"cc.prepare() with this model object ({model.cfg.model_name})")
        b = batch.to("cpu")
        same = len(b) == len(self.batch) and all(
            getattr(b, f).shape == getattr(self.batch, f).shape and torch.equal(getattr(b, f), getattr(self.batch, f))
            for f in ("reference", "counterfactual", "end", "answer"))
        if not same:
            raise ValueError(f"runs= were prepared for other pairs ({len(self.batch)} pairs) than these "
                             f"({len(b)}); accepted: runs from cc.prepare() with the same pairs in the same order")


@torch.no_grad()
def prepare(model: Model, pairs: Pairs, mode: Mode = "path") -> PreparedRuns:
    """The reference and counterfactual forwards of ``sweep(model, pairs, mode)``, run once to pass to later sweeps.

    ``sweep(model, pairs, mode, runs=prepare(model, pairs, mode))`` equals ``sweep(model, pairs, mode)`` exactly and
    skips both forwards, which dominate a sweep of a few components (a custom metric on 4 components, issue 21)::

        runs = cc.prepare(model, pairs)
        first = cc.sweep(model, pairs, components=["20.8", "MLP19"], runs=runs)
        again = cc.sweep(model, pairs, components=["14.3"], metrics=[my_metric], runs=runs)

    Keep ``runs`` while the sweeps need it: it holds END activations of every layer (and, in activation mode,
    the reference's keys and values) on the model's devices.
    """
    if mode not in MODES:
        raise ValueError(f"Unknown mode {mode!r}; accepted: {', '.join(MODES)}")
    check_supported(model)
    batch = as_batch(pairs, model)
    P = len(batch)
    blocks = [slice(i, min(i + PAIR_BLOCK, P)) for i in range(0, P, PAIR_BLOCK)]
    runs = [collect_runs(model, batch if len(blocks) == 1 else batch.select(b), need_kv=(mode == "activation"))
            for b in blocks]
    return PreparedRuns(mode, batch.to("cpu"), runs, model.cfg.model_name, weakref.ref(model))


@timed("sweep")
@torch.no_grad()
def sweep(
    model: Model,
    pairs: Pairs,
    mode: Mode = "path",
    *,
    components: Sequence[Component] | None = None,
    metrics: Sequence[str | Metric] = (),
    memory_mb: float = 1024,
    progress: bool = True,
    distribute: bool = True,
    prob: bool | Callable[[SweepResult], Sequence[Component]] = True,
    runs: PreparedRuns | None = None,
    record: EndRecord | None = None,
) -> SweepResult:
    """Patch every component's END value from the counterfactual run, one END-only pass for many.

    Args:
        model: a ``Model`` (fp32, bf16 or fp16; grouped-query attention supported; possibly spread over
            several GPUs, :meth:`~circuits.models.backend.Backend.spread`).
        pairs: prompt pairs: a list of :class:`~circuits.data.pairs.PromptPair`, a ``PairSet`` or a ``PairBatch``.
        mode: ``"path"`` (other heads frozen at their reference values) or ``"activation"``.
        components: senders to patch (default: every head and MLP); others are left NaN. Heads (``cc.Head(20, 8)``,
            ``"20.8"``, the ``(Head, effect)`` pairs ``key_heads()`` returns) and MLPs (``cc.Component.mlp(19)``,
            ``"MLP19"``).
        metrics: custom metrics (:func:`~circuits.patching.core.metrics.logits_metric`) to compute besides the
            built-in ones, which are always available.
        memory_mb: working-memory budget that sets how many senders share a pass.
        progress: show a progress bar over components (rank 0's share under torchrun).
        distribute: when ``torch.distributed`` is initialised, split the work items across ranks and gather them
            (every rank must call ``sweep`` with the same arguments); every rank returns the whole result.
        prob: the patched answer probability, which needs a log-sum-exp over the vocabulary for every patched row
            (the logit and logit difference read two unembedding columns): ``True`` for every component,
            ``False`` for none (NaN), or a function that picks components from the finished sweep (e.g. its key
            heads by a logit rule), whose probability a second pass over the same runs computes (NaN elsewhere).
        runs: the reference and counterfactual runs from :func:`prepare` for the same model, pairs and mode (one
            line refuses others): the sweep skips those two forwards and equals one without ``runs`` exactly.
        record: END activations an earlier pass over the reference prompts kept (the identify job's filtering,
            :class:`~circuits.models.forward.EndRecord`; path mode): the reference prompts it holds are not run again.
    """
    if mode not in MODES:
        raise ValueError(f"Unknown mode {mode!r}; accepted: {', '.join(MODES)}")
    check_supported(model)
    custom = [m for m in map(get_metric, metrics) if m.logits_fn is not None]
    batch = as_batch(pairs, model)
    if runs is not None:
        runs.check(model, batch, mode)
    prepared = runs
    cfg = model.cfg
    L, H, P = cfg.n_layers, cfg.n_heads, len(batch)
    comps = sorted(as_components(components or ()) or all_components(model), key=Component.sort_key)
    for c in comps:
        if not 0 <= c.layer < L or (c.kind == "head" and not (c.head is not None and 0 <= c.head < H)):
            raise ValueError(f"Component {c} is outside this model ({L} layers x {H} heads).")

    blocks, items = work_items(model, P, comps, memory_mb)
    split = distribute and D.is_distributed()
    if split:
        D.check_enough_work(len(items), f"work items ({P} pairs x {len(comps)} components, in {len(items)} chunks)")
        owner = D.assign([_item_cost(model, blocks, it) for it in items], D.world_size())
    else:
        owner = [0] * len(items)
    mine = [i for i, o in enumerate(owner) if o == D.rank()]
    bar = tqdm(total=sum(len(items[i][1]) for i in mine), desc=f"{mode} patching", unit="comp",
               disable=not progress or not D.is_main())
    bases: dict[int, Baseline] = {}
    done: dict[int, tuple[list[Component], dict[str, Tensor]]] = {}
    kept_runs: dict[int, object] = {}  # a single block's runs, kept for the second (probability) pass
    out_dev = model.backend.output_device()
    for b, block in enumerate(blocks):
        todo = [i for i in mine if items[i][0] == b]
        if not todo:
            continue
        sub = batch if len(blocks) == 1 else batch.select(block)
        block_runs = (prepared.blocks[b] if prepared is not None
                      else collect_runs(model, sub, need_kv=(mode == "activation"), record=record))
        base = baseline_from(model, sub.answer.to(out_dev), block_runs, custom, sub.cf_label)
        bases[b] = base.to("cpu")
        for i in todo:
            done[i] = _sweep_chunk(model, mode, block_runs, sub, base, items[i][1], custom, prob=prob is True)
            bar.update(len(items[i][1]))
        if callable(prob) and len(blocks) == 1:
            kept_runs[b] = block_runs
    bar.close()
    if split:
        for part_bases, part_done in D.all_gather_objects((bases, done)):
            bases.update(part_bases)
            done.update(part_done)

    names = [m.name for m in custom]
    heads_out, mlps_out = Readouts.empty((L, H, P), names), Readouts.empty((L, P), names)
    for i, (owners, values) in done.items():
        block = blocks[items[i][0]]
        for j, c in enumerate(owners):
            row = {k: v[j] for k, v in values.items()}
            if c.kind == "head":
                heads_out.put((c.layer, c.head, block), row)
            else:
                mlps_out.put((c.layer, block), row)
    baseline = cat_baselines([bases[b] for b in range(len(blocks))])
    if D.is_main():
        _warn_unlikely_answers(baseline)
    result = SweepResult(mode, baseline, heads_out, mlps_out, {m.name: m for m in custom})
    if callable(prob):
        if prepared is not None:
            kept_runs.update(enumerate(prepared.blocks))
        _fill_prob(model, mode, batch, blocks, bases, kept_runs, sorted(prob(result), key=Component.sort_key),
                   result, memory_mb)
    return result


def _fill_prob(model: Model, mode: Mode, batch: PairBatch, blocks: list[slice], bases: dict[int, Baseline],
               kept: dict[int, object], comps: list[Component], result: SweepResult, memory_mb: float) -> None:
    """The second pass of ``sweep(prob=fn)``: the answer probability of ``comps`` (every rank computes all of it:
    the same computation everywhere, so every rank's result stays equal), written into ``result``."""
    if not comps:
        return
    out_dev = model.backend.output_device()
    per = max(1, rows_for_budget(model, min(len(batch), PAIR_BLOCK), memory_mb))
    for b, block in enumerate(blocks):
        sub = batch if len(blocks) == 1 else batch.select(block)
        runs = kept.get(b) or collect_runs(model, sub, need_kv=(mode == "activation"))
        base = bases[b].to(out_dev)
        for i in range(0, len(comps), per):
            owners, values = _sweep_chunk(model, mode, runs, sub, base, comps[i : i + per], (), prob=True)
            for j, c in enumerate(owners):
                if c.kind == "head":
                    result.heads.prob[c.layer, c.head, block] = values["prob"][j]
                else:
                    result.mlps.prob[c.layer, block] = values["prob"][j]


def _sweep_chunk(model: Model, mode: Mode, runs, batch: PairBatch, base: Baseline,
                 chunk: list[Component], custom: Sequence[Metric], *, prob: bool = True
                 ) -> tuple[list[Component], dict[str, Tensor]]:
    """One END-only pass for the senders of ``chunk`` over one block of pairs: the senders in the order of their
    rows, and their readouts (``[sender, pair]``, on the CPU)."""
    L = model.cfg.n_layers
    x, owners = None, []
    for layer in range(chunk[0].layer, L):
        dev = model.backend.layer_device(layer)
        if x is not None:  # rows already past their sender layer: attention at this layer
            x = x.to(dev)
            if mode == "path":
                x = x + runs.attn_out[layer][None]
            else:
                x = x + attention_at_end(model, layer, x, runs.keys[layer], runs.values[layer], batch.end.to(dev))
        heads = [c for c in chunk if c.layer == layer and c.kind == "head"]
        if heads:
            # z at END with one head from the counterfactual run, projected like a forward pass does.
            idx = torch.tensor([c.head for c in heads], device=dev)
            z = runs.z_ref[layer][None].repeat(len(heads), 1, 1, 1)  # [n, pair, head, d_head]
            rows = torch.arange(len(heads), device=dev)
            z[rows, :, idx] = runs.z_cf[layer][:, idx].transpose(0, 1)
            new = runs.resid_pre[layer][None] + attention_output(model, layer, z)
            x = new if x is None else torch.cat([x, new])
            owners += heads
        if x is not None:
            x = x + mlp_at_end(model, layer, x)
        mlps = [c for c in chunk if c.layer == layer and c.kind == "mlp"]
        if mlps:
            new = (runs.resid_mid[layer] + runs.mlp_out_cf[layer])[None].expand(len(mlps), -1, -1)
            x = new if x is None else torch.cat([x, new])
            owners += mlps
    assert x is not None
    out = model.backend.output_device()
    values = readout(model, x.to(out), base.answer.to(out), base.cf_answer.to(out), custom, prob=prob)
    return owners, {k: v.cpu() for k, v in values.items()}



# --- the registry's entries (circuits.patching.engines.registry): the END sweep as Scores, by mode ---------------------------
def _score_end(model: Model, pairs: Pairs, mode: Mode, metric: str | Metric, progress: bool, memory_mb: float,
               **options) -> Scores:
    """:func:`sweep` in ``mode`` scored by ``metric``, with the input node (MIB's node graph: the embeddings) scored
    by the same patching from the same runs (part ``input``: :func:`circuits.patching.engines.input_node.input_at_end`)."""
    from dataclasses import replace

    from circuits.patching.engines.input_node import input_at_end, input_effect

    m = get_metric(metric)
    runs = prepare(model, pairs, mode)
    result = sweep(model, pairs, mode, memory_mb=memory_mb, progress=progress, runs=runs, **options)
    s = result.scores(m)
    custom = [result.custom_metrics[m.name]] if m.name in result.custom_metrics else []
    blocks = [slice(i, min(i + PAIR_BLOCK, len(runs.batch))) for i in range(0, len(runs.batch), PAIR_BLOCK)]
    view = input_at_end(model, runs.blocks, runs.batch, blocks, mode, result.baseline, custom)
    effect, per = input_effect(view, result.baseline, m)
    return replace(s, parts={"input": effect, **s.parts}, per_pair={"input": per, **s.per_pair})


def score_path(model: Model, pairs: Pairs, *, metric: str | Metric, positions: str, progress: bool,
               memory_mb: float, **options) -> Scores:
    """``exact-path``: :func:`sweep` in path mode, scored by ``metric`` (positions: END only), and the input node."""
    return _score_end(model, pairs, "path", metric, progress, memory_mb, **options)


def score_activation(model: Model, pairs: Pairs, *, metric: str | Metric, positions: str, progress: bool,
                     memory_mb: float, **options) -> Scores:
    """``exact-activation``: :func:`sweep` in activation mode, scored by ``metric`` (positions: END only), and the
    input node."""
    return _score_end(model, pairs, "activation", metric, progress, memory_mb, **options)
