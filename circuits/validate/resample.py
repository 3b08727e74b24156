"""Resample ablation (Chan et al. 2022): a knocked-out component takes its value on *another* prompt's counterfactual
run, position by position, instead of a mean (:mod:`circuits.validate.knockout`) or zero.

Each pair's donor is drawn from its own (template, length) group, so positions align, by a seeded derangement;
donors' counterfactual ``hook_z`` and ``hook_mlp_out`` are cached once at every position and the knockout runs full
prompts (a donor's few-shot prefix may differ from the row's, so no prefix is shared).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor
from circuits.models.backend import Model
from circuits.models.backend import act_name as get_act_name
from circuits.models.backend import final_residual

from circuits.data.pairs import PromptPair
from circuits.models.forward import unembed_end
from circuits.types import Head
from circuits.validate.groups import GroupKey, group_key


@dataclass
class ResampledActivations:
    """Resample ablation: each pair's knocked-out outputs come from one other pair's counterfactual run (a donor of
    the same template and length, so positions align), at every position.

    ``z[layer]`` is ``[pair, pos, head, d_head]`` and ``mlp_out[layer]`` ``[pair, pos, d_model]``, indexed by the
    *receiving* pair (its donor's values); ``rows`` finds a pair's row from its token ids; ``donor`` names each
    pair's donor (itself when its group has no other pair)."""

    z: list[Tensor]
    mlp_out: list[Tensor]
    rows: dict[tuple, int]
    donor: list[int]

    def row_of(self, pair: PromptPair) -> int:
        key = (pair.reference_token_ids, pair.counterfactual_token_ids)
        if key not in self.rows:
            raise KeyError("This pair was not among the pairs the resampled values were drawn for; draw them for the "
                           "pairs you knock out")
        return self.rows[key]


@torch.no_grad()
def resample_values(model: Model, pairs: Sequence[PromptPair], seed: int = 0,
                    batch_size: int = 32) -> ResampledActivations:
    """Donors for resample ablation: within each (template, length) group a seeded derangement of the pairs, and
    the donors' counterfactual ``hook_z`` and ``hook_mlp_out`` at every position."""
    pairs = list(pairs)
    if not pairs:
        raise ValueError("resample_values needs at least one pair.")
    L, cfg = model.cfg.n_layers, model.cfg
    rng = random.Random(seed)
    donor = list(range(len(pairs)))
    by_group: dict[GroupKey, list[int]] = {}
    for i, p in enumerate(pairs):
        by_group.setdefault(group_key(p), []).append(i)
    for members in by_group.values():
        order = members[:]
        rng.shuffle(order)
        for j, i in enumerate(order):
            donor[i] = order[(j + 1) % len(order)]
    width = max(len(p.reference_token_ids) for p in pairs)
    z = [torch.zeros(len(pairs), width, cfg.n_heads, cfg.d_head, dtype=cfg.dtype, device=cfg.device) for _ in range(L)]
    m = [torch.zeros(len(pairs), width, cfg.d_model, dtype=cfg.dtype, device=cfg.device) for _ in range(L)]
    names = {get_act_name("z", l) for l in range(L)} | {get_act_name("mlp_out", l) for l in range(L)}
    for members in by_group.values():
        for i in range(0, len(members), batch_size):
            chunk = members[i : i + batch_size]
            tokens = torch.tensor([pairs[donor[r]].counterfactual_token_ids for r in chunk], device=cfg.device)
            _, cache = model.run_with_cache(tokens, names_filter=lambda n: n in names, stop_at_layer=L)
            idx = torch.tensor(chunk, device=cfg.device)
            for l in range(L):
                z[l][idx, : tokens.shape[1]] = cache[get_act_name("z", l)]
                m[l][idx, : tokens.shape[1]] = cache[get_act_name("mlp_out", l)]
    rows = {(p.reference_token_ids, p.counterfactual_token_ids): i for i, p in enumerate(pairs)}
    return ResampledActivations(z, m, rows, donor)


@torch.no_grad()
def resampled_logits(model: Model, pairs: Sequence[PromptPair], values: ResampledActivations,
                      heads: Sequence[Head], mlps: Sequence[int], batch_size: int) -> Tensor:
    """END logits with ``heads``/``mlps`` taking each pair's donor values; rows of one length run together (full
    prompts: a donor's few-shot prefix may differ from the row's, so no prefix is shared)."""
    by_len: dict[int, list[int]] = {}
    for i, p in enumerate(pairs):
        by_len.setdefault(len(p.reference_token_ids), []).append(i)
    by_layer: dict[int, list[int]] = {}
    for l, h in heads:
        by_layer.setdefault(l, []).append(h)
    out = torch.empty(len(pairs), model.cfg.d_vocab_out, dtype=torch.float32)
    for n, members in by_len.items():
        for i in range(0, len(members), batch_size):
            chunk = members[i : i + batch_size]
            rows = torch.tensor([values.row_of(pairs[r]) for r in chunk], device=model.cfg.device)
            hooks = []
            for layer, hs in by_layer.items():
                idx = torch.tensor(sorted(set(hs)), device=model.cfg.device)

                def z_hook(z: Tensor, hook: Any, layer: int = layer, idx: Tensor = idx, rows: Tensor = rows) -> Tensor:
                    z[:, :, idx] = values.z[layer][rows, : z.shape[1]][:, :, idx].to(z.dtype)
                    return z

                hooks.append((get_act_name("z", layer), z_hook))
            for layer in sorted(set(mlps)):
                def m_hook(o: Tensor, hook: Any, layer: int = layer, rows: Tensor = rows) -> Tensor:
                    return values.mlp_out[layer][rows, : o.shape[1]].to(o.dtype).clone()

                hooks.append((get_act_name("mlp_out", layer), m_hook))
            tokens = torch.tensor([pairs[r].reference_token_ids for r in chunk], device=model.cfg.device)
            with model.hooks(fwd_hooks=hooks):
                resid = final_residual(model, tokens)
            out[torch.tensor(chunk)] = unembed_end(model, resid[:, n - 1]).cpu()
    return out
