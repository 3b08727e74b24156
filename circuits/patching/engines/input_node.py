"""The input node (MIB's node graph: the embeddings, ``blocks.0.hook_resid_pre``) scored as each exact engine scores
a head or an MLP (issue 43).

MIB's node graph has one node besides the heads and MLPs: the input, the residual stream entering the first block
(the token embeddings, plus the position embeddings where a model adds them). EAP-IG scores it with its own
estimate (:mod:`circuits.patching.engines.eap_ig`); here the exact engines score it by their own method, so every
ranking of the faithfulness job can rank it among the nodes:

- **activation patching at END** (``exact-activation``): the reference run with the input's END vector from the
  counterfactual run, everything downstream recomputed: the END engine's own pieces
  (:mod:`circuits.patching.core.end_layers`: attention at END over the reference's cached keys and values, the MLP
  on the END vector), from the first block on (a pair whose prompts end in the same token: the unpatched run);
- **path patching at END** (``exact-path``, the paper's: the sender from the counterfactual run, every head frozen
  at its reference value, MLPs recompute, the receiver the logits): the same with every layer's attention output
  the reference's, so the input's change reaches the logits through the residual stream directly and through the
  MLPs, as a head's does in this engine. (Wang et al.'s path patching proper, input -> logits with the MLPs frozen
  too, is the direct path alone; this engine's path patching of a head lets MLPs recompute, and the input is read
  the same way.)
- **activation patching at every position** (``positions``): the input's vector at position ``END - k`` from the
  counterfactual run, for every offset ``k`` the engine scores; the reference prompt runs whole with that one
  position changed (one forward per offset over a chunk of pairs). Where both prompts hold the same token (every
  position before their first difference, and others) the embedding is the same in both runs: the unpatched run.

The attribution engines (``screen``, ``graddrop``) score it inside :func:`circuits.patching.engines.attribution.attribute`:
the gradient at ``blocks.0.hook_resid_pre`` times its change, at each position.

Each equals a plain loop (:mod:`circuits.patching.engines.plain`'s ``input_plain``: one ``run_with_hooks`` per pair
writing the counterfactual's ``blocks.0.hook_resid_pre`` by hand), asserted through the engine registry's reference
test on both TransformerLens lines.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from jaxtyping import Float, Int
from torch import Tensor

from circuits.data.pairs import PairBatch
from circuits.models.backend import Model
from circuits.patching.core.end_layers import attention_at_end, mlp_at_end, readout
from circuits.patching.core.metrics import Baseline, Metric
from circuits.patching.core.readouts import Readouts, first_difference
from circuits.types import Mode

INPUT_SITE = "blocks.0.hook_resid_pre"  # the input node: the residual stream entering the first block


@torch.no_grad()
def input_vectors(model: Model, tokens: Int[Tensor, "pair pos"]) -> Float[Tensor, "pair pos d_model"]:
    """``blocks.0.hook_resid_pre`` of ``tokens`` at every position (the first block alone runs)."""
    store: dict[str, Tensor] = {}

    def keep(act: Tensor, hook) -> None:
        store["x"] = act.detach()

    model.run_with_hooks(tokens.to(model.cfg.device), fwd_hooks=[(INPUT_SITE, keep)], stop_at_layer=1)
    return store["x"]


@torch.no_grad()
def input_at_end(model: Model, runs, batch: PairBatch, blocks: Sequence[slice], mode: Mode, baseline: Baseline,
                 custom: Sequence[Metric] = (), prob: bool = True) -> Readouts:
    """The END readouts ``[pair]`` with the input's END vector from the counterfactual run (``mode``: ``"path"``,
    every layer's attention output the reference's; ``"activation"``, attention recomputed at END over the
    reference's keys and values), from the END engine's runs (``runs``: one
    :class:`~circuits.patching.core.end_layers.Runs` per block of pairs, ``blocks`` their slices; activation mode
    needs the keys and values)."""
    L, P = model.cfg.n_layers, len(batch)
    rows = torch.arange(P, device=batch.end.device)
    cf_in = input_vectors(model, batch.counterfactual)[rows.to(model.cfg.device), batch.end.to(model.cfg.device)]
    out = Readouts.empty((P,), [m.name for m in custom])
    dev_out = model.backend.output_device()
    for r, block in zip(runs, blocks):
        end = batch.end[block]
        x = cf_in[block][None]  # [1, pair, d_model]: one sender row, the input
        for layer in range(L):
            dev = model.backend.layer_device(layer)
            x = x.to(dev)
            if mode == "path":  # every head frozen: the reference's attention output at END
                x = x + r.attn_out[layer][None]
            else:
                x = x + attention_at_end(model, layer, x, r.keys[layer], r.values[layer], end.to(dev))
            x = x + mlp_at_end(model, layer, x)
        values = readout(model, x.to(dev_out), baseline.answer[block].to(dev_out),
                         baseline.cf_answer[block].to(dev_out), custom, prob=prob)
        out.put((block,), {k: v[0].float().cpu() for k, v in values.items()})
    # A pair whose two prompts end in the same token (and position) has the same input vector at END in both runs:
    # the patch changes nothing, and the unpatched values are written (as the position engine writes them before the
    # prompts' first difference), not the END-only pieces' float rounding of them.
    ref_in = input_vectors(model, batch.reference)[rows.to(model.cfg.device), batch.end.to(model.cfg.device)]
    same = torch.nonzero((ref_in == cf_in).all(-1).cpu()).flatten()
    if len(same):
        out.fill_baseline((), baseline, same)
    return out


@torch.no_grad()
def input_by_offset(model: Model, batch: PairBatch, offsets: Sequence[int], baseline: Baseline,
                    custom: Sequence[Metric] = (), prob: bool = True, pairs_per_chunk: int = 16) -> Readouts:
    """The END readouts ``[offset, pair]`` (``int(batch.end.max()) + 1`` offsets; those not in ``offsets`` NaN)
    with the input's vector at position ``END - k`` from the counterfactual run, for each ``k`` of ``offsets``:
    the reference prompt runs whole with that position's ``blocks.0.hook_resid_pre`` replaced. Offsets beyond a
    pair's prompt are NaN; where the input's vector is the same in both runs (the same token: every position before
    the prompts' first difference, and others), the unpatched run (the baseline)."""
    P, K = len(batch), int(batch.end.max()) + 1
    out = Readouts.empty((K, P), [m.name for m in custom])
    first = first_difference(batch).cpu()
    ends = batch.end.cpu()
    dev_out = model.backend.output_device()
    for c0 in range(0, P, pairs_per_chunk):
        idx = torch.arange(c0, min(P, c0 + pairs_per_chunk))
        sub = batch.select(idx.to(batch.end.device))
        cf_in = input_vectors(model, sub.counterfactual)
        # where both prompts hold the same token at a position the input's vector there is the same in both runs
        differs = (cf_in != input_vectors(model, sub.reference)).any(-1).cpu()  # [pair, pos]
        for k in offsets:
            k = int(k)
            live = [i for i in range(len(idx)) if int(ends[idx[i]]) - k >= int(first[idx[i]])
                    and bool(differs[i, int(ends[idx[i]]) - k])]
            same = [i for i in range(len(idx)) if int(ends[idx[i]]) - k >= 0 and i not in live]
            if same:
                cols = idx[same]
                out.fill_baseline((k,), baseline, cols)
            if not live:
                continue
            g = torch.tensor(live, device=sub.end.device)
            pos = sub.end[g] - k
            tokens = sub.reference[g][:, : int(sub.end[g].max()) + 1].to(model.cfg.device)
            rows = torch.arange(len(live), device=model.cfg.device)
            pos_d = pos.to(model.cfg.device)
            patch = cf_in[g.to(cf_in.device), pos.to(cf_in.device)]

            def write(act: Tensor, hook, rows=rows, pos_d=pos_d, patch=patch) -> Tensor:
                act = act.clone()
                act[rows, pos_d] = patch.to(act)
                return act

            with model.hooks(fwd_hooks=[(INPUT_SITE, write)]):
                resid = model.backend.final_residual(tokens)
            final = resid[rows.to(resid.device), sub.end[g].to(resid.device)][None]
            cols = idx[live]
            values = readout(model, final.to(dev_out), baseline.answer[cols].to(dev_out),
                             baseline.cf_answer[cols].to(dev_out), custom, prob=prob)
            out.put((k, cols), {n: v[0].float().cpu() for n, v in values.items()})
    return out


def input_effect(view: Readouts, baseline: Baseline, metric: Metric, ends: Tensor | None = None
                 ) -> tuple[Tensor, Tensor]:
    """The metric's effect of the input node and its per-pair values: ``[]`` and ``[pair]`` from a ``[pair]`` view,
    or, with ``ends`` (each pair's END), ``[offset]`` over the pairs that have each offset and ``[offset, pair]``
    from an ``[offset, pair]`` view (as the position engines read their senders)."""
    if ends is None:
        return metric.effect(view, baseline), metric.per_pair(view, baseline)
    K = view.logit.shape[0]
    effect = torch.full((K,), float("nan"))
    for k in range(K):
        valid = torch.nonzero(ends >= k).flatten()
        if len(valid):
            effect[k] = metric.effect(view.index((k,)).select(valid), baseline.select(valid))
    per = torch.stack([metric.per_pair(view.index((k,)), baseline) for k in range(K)])
    return effect, per


__all__ = ["INPUT_SITE", "input_at_end", "input_by_offset", "input_effect", "input_vectors"]
