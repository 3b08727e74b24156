"""Plain patching: one ``run_with_hooks`` per component, as a TransformerLens user writes it.

Slow on purpose. It is the reference the engine in :mod:`circuits.patching.engines.end_sweep` is tested against (its
baseline too: :func:`baseline_plain` reads the unpatched quantities from two full forward passes), and the
baseline of ``benchmarks/sweep_speed.py``. For path patching the hooks also freeze every other
head's ``hook_z`` at its reference value (every position), so only paths through MLPs and the
residual stream carry the sender's change.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import torch
from jaxtyping import Float
from torch import Tensor

from circuits.models.backend import ActivationCache, Model, act_name, apply_softcap
from circuits.data.pairs import PairBatch, second_answers
from circuits.patching.engines.end_sweep import SweepResult, all_components
from circuits.patching.engines.input_node import INPUT_SITE, input_effect  # the input node: the embeddings
from circuits.patching.core.metrics import Baseline, Metric, get_metric
from circuits.patching.core.readouts import READOUTS, Readouts
from circuits.patching.core.scores import Scores
from circuits.types import Component, Mode


@torch.no_grad()
def baseline_plain(model: Model, batch: PairBatch) -> Baseline:
    """The unpatched END quantities from two full forward passes (no cache, no END-only shortcut)."""
    rows = torch.arange(len(batch))
    ref = model(batch.reference)[rows, batch.end].float()
    cf = model(batch.counterfactual)[rows, batch.end].float()
    answer, cf_answer = batch.answer, second_answers(batch.cf_label, cf)
    values = [*readouts_of(ref, answer, cf_answer).values(), *readouts_of(cf, answer, cf_answer).values()]
    return Baseline(answer.cpu(), cf_answer.cpu(), *(t.cpu() for t in values))


@torch.no_grad()
def cache_runs(model: Model, batch: PairBatch) -> tuple[ActivationCache, ActivationCache]:
    """``hook_z`` of the reference run; ``hook_z`` and ``hook_mlp_out`` of the counterfactual run."""
    _, ref_cache = model.run_with_cache(batch.reference, names_filter=lambda n: n.endswith("hook_z"))
    _, cf_cache = model.run_with_cache(
        batch.counterfactual, names_filter=lambda n: n.endswith("hook_z") or n.endswith("hook_mlp_out")
    )
    return ref_cache, cf_cache


def patch_at(cf: Any, rows: Tensor, pos: Tensor, index: int | None = None):
    """A hook putting the counterfactual run's activation (``cf[hook.name]``) into the run at each row's ``pos``: the
    whole activation (an MLP's output), or its ``index`` (a head's z, a neuron's post)."""

    def patch(act: Tensor, hook) -> Tensor:
        act = act.clone()
        if index is None:
            act[rows, pos] = cf[hook.name][rows, pos]
        else:
            act[rows, pos, index] = cf[hook.name][rows, pos, index]
        return act

    return patch


def freeze_heads(ref: Any, cf: Any, rows: Tensor, pos: Tensor, sender: Any = None):
    """A z hook for path patching: every head at its reference value (``ref[hook.name]``), except ``sender`` (when it
    is a head) at its counterfactual value at each row's ``pos``."""

    def freeze(z: Tensor, hook) -> Tensor:
        z = ref[hook.name].clone()
        if getattr(sender, "kind", None) == "head" and hook.name == act_name("z", sender.layer):
            z[rows, pos, sender.head] = cf[hook.name][rows, pos, sender.head]
        return z

    return freeze


def _run_end(model: Model, tokens: Tensor, hooks: list, batch: PairBatch) -> Tensor:
    """END logits of a hooked forward: every block, then the model's final norm and unembedding at END only (the
    whole-vocabulary logits of every position would dominate a tiny model's plain loop)."""
    resid = model.run_with_hooks(tokens, fwd_hooks=hooks, stop_at_layer=model.cfg.n_layers)
    x = resid[torch.arange(len(batch)), batch.end]
    logits = model.unembed(model.ln_final(x[:, None]))[:, 0]
    return apply_softcap(logits, model.backend.logit_softcap()).float()  # Gemma 2's final soft-cap, as forward applies


def readouts_of(logits: Tensor, answer: Tensor, cf_answer: Tensor) -> dict[str, Tensor]:
    rows = torch.arange(len(answer))
    logit = logits[rows, answer]
    return {"logit": logit, "logit_diff": logit - logits[rows, cf_answer], "prob": logits.softmax(-1)[rows, answer]}


@torch.no_grad()
def input_plain(model: Model, batch: PairBatch, offset: int, cf_answer: Tensor, mode: Mode = "activation"
                ) -> dict[str, Tensor]:
    """END readouts ``[pair]`` after writing the counterfactual run's input node (``blocks.0.hook_resid_pre``, MIB's
    node graph: the embeddings) at position ``end - offset`` by hand, one ``run_with_hooks`` per pair (``mode="path"``:
    every head's ``hook_z`` frozen at its reference value too, as :func:`patch_at_plain` freezes them)."""
    out: dict[str, list[Tensor]] = {}
    for i in range(len(batch)):
        one = batch.select(torch.tensor([i], device=batch.end.device))
        pos = int(one.end[0]) - offset
        _, cf = model.run_with_cache(one.counterfactual, names_filter=lambda n: n == INPUT_SITE)
        _, ref = model.run_with_cache(one.reference, names_filter=lambda n: n.endswith("hook_z"))

        def patch(act: Tensor, hook) -> Tensor:
            act = act.clone()
            act[0, pos] = cf[INPUT_SITE][0, pos]
            return act

        hooks = [(INPUT_SITE, patch)]
        if mode == "path":
            hooks += [(act_name("z", l), lambda z, hook: ref[hook.name].clone()) for l in range(model.cfg.n_layers)]
        row = readouts_of(_run_end(model, one.reference, hooks, one), one.answer, cf_answer[i : i + 1])
        for k, v in row.items():
            out.setdefault(k, []).append(v.float().cpu())
    return {k: torch.cat(v) for k, v in out.items()}


@torch.no_grad()
def patch_component_plain(
    model: Model,
    batch: PairBatch,
    component: Component,
    mode: Mode,
    base: Baseline,
    caches: tuple[ActivationCache, ActivationCache] | None = None,
) -> tuple[Float[Tensor, " pair"], Float[Tensor, " pair"], Float[Tensor, " pair"]]:
    """Answer logit, logit difference and answer probability after patching one component."""
    rows = torch.arange(len(batch))
    end = batch.end
    ref_cache, cf_cache = caches or cache_runs(model, batch)

    hooks = []
    if mode == "path":
        freeze = freeze_heads(ref_cache, cf_cache, rows, end, component)
        hooks += [(act_name("z", l), freeze) for l in range(model.cfg.n_layers)]
    elif component.kind == "head":
        hooks.append((act_name("z", component.layer), patch_at(cf_cache, rows, end, component.head)))
    if component.kind == "mlp":
        hooks.append((act_name("mlp_out", component.layer), patch_at(cf_cache, rows, end)))
    logits = model.run_with_hooks(batch.reference, fwd_hooks=hooks)[rows, end].float()
    return tuple(v.cpu() for v in readouts_of(logits, base.answer, base.cf_answer).values())  # type: ignore[return-value]


@torch.no_grad()
def sweep_plain(
    model: Model, batch: PairBatch, mode: Mode, components: list[Component]
) -> tuple[Baseline, dict[Component, tuple[Tensor, Tensor, Tensor]]]:
    """The plain loop over ``components``: its own baseline, and ``{component: (logit, logit_diff, prob)}`` per pair."""
    base = baseline_plain(model, batch)
    caches = cache_runs(model, batch)
    return base, {c: patch_component_plain(model, batch, c, mode, base, caches) for c in components}


# --- the END sweep's references in the registry (circuits.patching.engines.registry) ----------------------------------------
def _sweep_reference(model: Model, batch: PairBatch, mode: Mode, metric: str | Metric) -> Scores:
    cfg = model.cfg
    base, values = sweep_plain(model, batch, mode, all_components(model))
    heads, mlps = Readouts.empty((cfg.n_layers, cfg.n_heads, len(batch))), Readouts.empty((cfg.n_layers, len(batch)))
    for c, v in values.items():
        row = dict(zip(READOUTS, v))
        if c.kind == "head":
            heads.put((c.layer, c.head), row)
        else:
            mlps.put((c.layer,), row)
    scores = SweepResult(mode, base.to("cpu"), heads, mlps).scores(metric)
    # the input node (MIB's graph: the embeddings) patched the same way, one run_with_hooks per pair
    view = Readouts(**input_plain(model, batch, 0, base.cf_answer.to(batch.end.device), mode))
    effect, per = input_effect(view, base.to("cpu"), get_metric(metric))
    return replace(scores, parts={"input": effect, **scores.parts}, per_pair={"input": per, **scores.per_pair})


def reference_path(model: Model, batch: PairBatch, *, metric: str | Metric, positions: str, **options) -> Scores:
    """circuits.patching.engines.end_sweep_plain.sweep_plain: one run_with_hooks per component"""
    return _sweep_reference(model, batch, "path", metric)


def reference_activation(model: Model, batch: PairBatch, *, metric: str | Metric, positions: str,
                         **options) -> Scores:
    """circuits.patching.engines.end_sweep_plain.sweep_plain: one run_with_hooks per component"""
    return _sweep_reference(model, batch, "activation", metric)
