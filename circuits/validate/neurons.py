"""Knocking out single MLP neurons (Nikankin et al. 2025), as :mod:`circuits.validate.knockout` knocks out heads.

A knocked-out neuron's activation (``hook_post``) is replaced by its mean over the counterfactual prompts, per
template position (the paper's mean ablation, Section 4.1), or by zero; everything else runs as usual. Rows are
grouped and their few-shot prefixes shared exactly as in :func:`circuits.validate.knockout.knockout_logits`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor
from circuits.models.backend import Model
from circuits.models.backend import act_name as get_act_name

from circuits.data.pairs import PromptPair
from circuits.models.forward import end_residuals, unembed_end
from circuits.types import Ablation
from circuits.validate.groups import group_index
from circuits.validate.knockout import GroupKey, KnockoutScore, group_key, score


@dataclass
class NeuronMeans:
    """Replacement ``hook_post`` values: ``post[layer]`` is ``[group, pos, d_mlp]`` (one group and position when
    ``pooled``, e.g. zero ablation)."""

    post: dict[int, Tensor]
    groups: dict[GroupKey, int]
    pooled: bool

    def group_of(self, pair: PromptPair) -> int:
        return group_index(self.groups, self.pooled, pair, "neuron mean")


@torch.no_grad()
def neuron_means(model: Model, pairs: Sequence[PromptPair], layers: Sequence[int],
                 ablation: Ablation | str = Ablation.MEAN, batch_size: int = 32) -> NeuronMeans:
    """Means of ``hook_post`` of ``layers`` over the counterfactual prompts, per (template, length) and position
    (``MEAN``), or zeros (``ZERO``)."""
    ablation = Ablation.parse(ablation)
    cfg = model.cfg
    if ablation is Ablation.ZERO:
        return NeuronMeans({l: torch.zeros(1, 1, cfg.d_mlp, dtype=cfg.dtype, device=cfg.device) for l in layers}, {}, True)
    if ablation is not Ablation.MEAN:
        raise ValueError(f"Neuron knockout supports mean and zero ablation, not {ablation.value}")
    by_group: dict[GroupKey, list[PromptPair]] = {}
    for p in pairs:
        by_group.setdefault(group_key(p), []).append(p)
    width = max(k[1] for k in by_group)
    post = {l: torch.zeros(len(by_group), width, cfg.d_mlp, dtype=cfg.dtype, device=cfg.device) for l in layers}
    names = {get_act_name("post", l): l for l in layers}
    for g, (key, group) in enumerate(by_group.items()):
        for i in range(0, len(group), batch_size):
            chunk = group[i : i + batch_size]
            tokens = torch.tensor([p.counterfactual_token_ids for p in chunk], device=cfg.device)
            _, cache = model.run_with_cache(tokens, names_filter=lambda n: n in names, stop_at_layer=max(layers) + 1)
            for name, l in names.items():
                post[l][g, : key[1]] += (cache[name].float().sum(0) / len(group)).to(cfg.dtype)
    return NeuronMeans(post, {k: g for g, k in enumerate(by_group)}, False)


def _hooks(means: NeuronMeans, group: int, offset: int, neurons: dict[int, Sequence[int]]) -> list:
    hooks = []
    for layer, idx in neurons.items():
        index = torch.tensor(sorted(set(idx)), dtype=torch.long)

        def hook(post: Tensor, hook, layer: int = layer, index: Tensor = index) -> Tensor:
            table = means.post[layer]
            value = table[0, 0] if means.pooled else table[group, offset : offset + post.shape[1]]
            i = index.to(post.device)
            post[:, :, i] = value[..., i].to(post.dtype)
            return post

        hooks.append((get_act_name("post", layer), hook))
    return hooks


@torch.no_grad()
def knockout_neurons(model: Model, pairs: Sequence[PromptPair], neurons: dict[int, Sequence[int]],
                     means: NeuronMeans, batch_size: int = 64) -> KnockoutScore:
    """Accuracy and answer probability with ``neurons`` (``{layer: [index, ...]}``) knocked out."""
    pairs = list(pairs)
    for layer, idx in neurons.items():
        if layer not in means.post:
            raise ValueError(f"No replacement values for MLP layer {layer}; take means over layers {sorted(means.post)}")
        bad = [i for i in idx if not 0 <= int(i) < model.cfg.d_mlp]
        if bad:
            raise ValueError(f"Neuron index {bad[0]} of layer {layer} is outside d_mlp (accepted: 0..{model.cfg.d_mlp - 1})")
    keys = [(means.group_of(p), -1 if means.pooled else len(p.reference_token_ids)) for p in pairs]
    resid = end_residuals(model, [p.reference_token_ids for p in pairs], [p.prefix_length for p in pairs],
                          group_keys=keys, batch_size=batch_size,
                          hooks=lambda key, offset: _hooks(means, key[0], offset, neurons))
    return score(unembed_end(model, resid).cpu(), [p.answer_token_id for p in pairs])
