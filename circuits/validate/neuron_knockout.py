"""Knocking out single MLP neurons (Nikankin et al. 2025), as :mod:`circuits.validate.knockout` knocks out heads.

A knocked-out neuron's activation (``hook_post``) is replaced by its mean over the counterfactual prompts, per
template position (the paper's mean ablation, Section 4.1), or by zero; everything else runs as usual. The values
are :class:`~circuits.patching.ablation.values.AblationValues` and the run is the mechanism's one masked forward
(:func:`circuits.patching.ablation.executor.run_ablation`), few-shot prefixes shared as in knockout.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from circuits.data.pairs import PromptPair
from circuits.models.backend import Model
from circuits.patching.ablation.executor import AblationMasks, AblationSpec, run_ablation
from circuits.patching.ablation.values import AblationValues, compute_means, zero_values  # noqa: F401
from circuits.types import Ablation
from circuits.validate.knockout import KnockoutScore, score_residuals


@torch.no_grad()
def neuron_means(model: Model, pairs: Sequence[PromptPair], layers: Sequence[int],
                 ablation: Ablation | str = Ablation.MEAN, batch_size: int = 32) -> AblationValues:
    """Replacement ``hook_post`` values of ``layers``: means over the counterfactual prompts, per (template, length)
    and position (``MEAN``), or zeros (``ZERO``)."""
    ablation = Ablation.parse(ablation)
    if ablation is Ablation.ZERO:
        return zero_values(model, layers)
    if ablation is not Ablation.MEAN:
        raise ValueError(f"Neuron knockout supports mean and zero ablation, not {ablation.value}")
    return compute_means(model, pairs, batch_size=batch_size, progress=False, heads_and_mlps=False,
                         neuron_layers=layers)


@torch.no_grad()
def knockout_neurons(model: Model, pairs: Sequence[PromptPair], neurons: dict[int, Sequence[int]],
                     means: AblationValues, batch_size: int = 64) -> KnockoutScore:
    """Accuracy and answer probability with ``neurons`` (``{layer: [index, ...]}``) knocked out."""
    pairs = list(pairs)
    for layer, idx in neurons.items():
        if layer not in means.post:
            raise ValueError(f"No replacement values for MLP layer {layer}; take means over layers {sorted(means.post)}")
        bad = [i for i in idx if not 0 <= int(i) < model.cfg.d_mlp]
        if bad:
            raise ValueError(f"Neuron index {bad[0]} of layer {layer} is outside d_mlp (accepted: 0..{model.cfg.d_mlp - 1})")
    masks = AblationMasks.of_sets(model, [((), ())], [neurons])
    resid = run_ablation(model, pairs, AblationSpec(means, masks), rows_per_batch=batch_size).resid
    return score_residuals(model, resid[0], [p.answer_token_id for p in pairs], batch_size)
