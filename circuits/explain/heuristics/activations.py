"""Neuron activations over the operand grid, and which answers a neuron's output promotes.

:func:`grid_activations` reads ``hook_post`` at each grid prompt's END for chosen neurons, in batches, the few-shot
prefix run once (:func:`circuits.models.forward.end_residuals`). :func:`promotion` reads a neuron's output direction
on the unembedding (``W_out[n] @ W_U``, the direct logit effect of a unit of activation, before the final norm, as
:mod:`circuits.explain.logit_lens` reads MLP outputs) at each cell's answer token: does the neuron, where its rule
drives it, raise the answers of those cells above the others' (Nikankin et al.: a heuristic neuron *promotes the
answers its rule predicts*)?
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from jaxtyping import Bool, Float
from torch import Tensor
from tqdm.auto import tqdm

from circuits.data.grid import OperandGrid
from circuits.models.backend import Model, act_name
from circuits.models.forward import end_residuals
from circuits.types import Neuron


@torch.no_grad()
def grid_activations(model: Model, grid: OperandGrid, neurons: Sequence[Neuron], *, batch_size: int = 64,
                     progress: bool = True) -> Float[Tensor, "neuron prompt"]:
    """``hook_post`` of each neuron at every grid prompt's last token (float32, on the CPU)."""
    if not neurons:
        raise ValueError("No neurons to record")
    for n in neurons:
        Neuron(*n).check(model.cfg.n_layers, model.cfg.d_mlp)
    layers = sorted({n.layer for n in neurons})
    idx = {l: torch.tensor([n.index for n in neurons if n.layer == l]) for l in layers}
    out = {l: torch.zeros(len(idx[l]), len(grid)) for l in layers}
    bar = tqdm(total=len(grid), desc="grid activations", unit="prompt", disable=not progress)

    def row_hooks(rows: list[int], ends: Tensor) -> list:
        def grab(l: int):
            def hook(act: Tensor, hook: object) -> None:
                at_end = act[torch.arange(len(rows), device=act.device), ends.to(act.device)]
                out[l][:, rows] = at_end[:, idx[l].to(act.device)].T.float().cpu()
            return hook
        bar.update(len(rows))
        return [(act_name("post", l), grab(l)) for l in layers]

    end_residuals(model, [p.reference_token_ids for p in grid.prompts], [p.prefix_length for p in grid.prompts],
                  row_hooks=row_hooks, batch_size=batch_size)
    bar.close()
    pos = {l: 0 for l in layers}
    rows = []
    for n in neurons:
        rows.append(out[n.layer][pos[n.layer]])
        pos[n.layer] += 1
    return torch.stack(rows)


@torch.no_grad()
def output_logits(model: Model, neurons: Sequence[Neuron], tokens: Tensor) -> Float[Tensor, "neuron token"]:
    """``W_out[n] @ W_U`` at ``tokens``: the logit a unit of the neuron's activation adds to each token (direct
    path, final norm left out)."""
    W_U, _ = model.backend.unembed_weights()
    rows = torch.stack([model.blocks[n.layer].mlp.W_out[n.index] for n in neurons])
    return (rows.to(W_U) @ W_U[:, tokens.to(W_U.device)]).float().cpu()


def promotion(logits: Float[Tensor, "neuron cell"], covered: Bool[Tensor, "neuron cell"],
              polarity: Tensor) -> Float[Tensor, " neuron"]:
    """How much a neuron favours the answers of the cells its rule covers: ``polarity * (mean logit of the covered
    cells' answers - mean over the other cells') / std over all cells``, from ``logits[n, cell]`` (:func:`output_logits`
    at each cell's answer token). Positive: where the rule drives the neuron (its activation moving by
    ``polarity``), the neuron's output raises those cells' answers against the rest's."""
    cov = covered.float()
    unc = 1 - cov
    m_cov = (logits * cov).sum(1) / cov.sum(1).clamp_min(1)
    m_unc = (logits * unc).sum(1) / unc.sum(1).clamp_min(1)
    return polarity.float() * (m_cov - m_unc) / logits.std(1).clamp_min(1e-8)
