"""The one ablation executor (circuits.patching.ablation.executor) against the plain loop (patching.engines.plain.ablate_plain: one
run_with_hooks per set, one unit at a time) for every kind of replacement values, at every position and at END,
with and without a shared prefix; and the values against their plain definitions."""

import pytest
import torch
from helpers import aligned_pairs, mixed_pairs

from circuits.data.pairs import PairBatch
from circuits.models.backend import act_name
from circuits.patching.ablation.executor import AblationMasks, ablated_residuals
from circuits.patching.ablation.values import (AblationValues, compute_means, per_pair_values, record,
                                               resample_values, site_names, zero_values)
from circuits.patching.core.end_layers import end_logits
from circuits.patching.engines.plain import ablate_plain, ablation_values_plain
from circuits.patching.core.readouts import first_difference

SETS = [([(1, 3), (2, 0)], [1], {}), ([(0, 1)], [], {2: [5, 17]}), ([], [0, 2], {}), ([], [], {})]
KINDS = ["mean", "pooled", "zero", "resample", "counterfactual", "end_mean"]


def values_of(model, pairs, batch, kind) -> AblationValues:
    if kind in ("mean", "pooled"):
        return compute_means(model, pairs, pooled=kind == "pooled", progress=False, neuron_layers=[2])
    if kind == "zero":
        return zero_values(model, [2])
    if kind == "resample":
        return resample_values(model, pairs, seed=3)
    cf = record(model, batch.counterfactual, site_names(model, [2]))[0] if kind == "counterfactual" else None
    return per_pair_values(model, kind, batch.reference, batch.end, [2], counterfactual=cf)


def plain_tables(model, pairs, values, width) -> dict:
    """Each pair's values ``[pair, pos, ...]`` by hook name, read from the tables by hand."""
    out = {}
    for site, layers in (("z", range(model.cfg.n_layers)), ("mlp_out", range(model.cfg.n_layers)),
                         ("post", values.post)):
        for l in layers:
            table = values.table(site, l)
            rows = [table[0, 0].expand(width, *table.shape[2:]) if values.pooled else table[values.source_of(p, i)]
                    for i, p in enumerate(pairs)]
            padded = torch.zeros(len(rows), width, *table.shape[2:], dtype=table.dtype)
            for i, r in enumerate(rows):
                padded[i, : min(width, r.shape[0])] = r[:width]
            out[act_name(site, l)] = padded
    return out


@pytest.mark.parametrize("positions", ["all", "end"])
@pytest.mark.parametrize("kind", KINDS)
def test_the_executor_equals_the_plain_loop(tiny_llama, tokenizer, kind, positions):
    pairs = aligned_pairs(tokenizer, 3, few_shot=True) + aligned_pairs(tokenizer, 2, few_shot=True, seed=4) \
        + mixed_pairs(tokenizer, 3)
    batch = PairBatch.from_pairs(pairs, 0)
    values = values_of(tiny_llama, pairs, batch, kind)
    sets = [s for s in SETS if not (s[2] and kind == "resample")]  # resample takes no neuron values
    masks = AblationMasks.of_sets(tiny_llama, [(h, m) for h, m, _ in sets], [n for _, _, n in sets])
    tokens = [p.reference_token_ids for p in pairs]
    sources = [values.source_of(p, i) for i, p in enumerate(pairs)]
    # the shared prefix each kind allows: the few-shot prefix where the values there are the same for a group
    # (means, zero), the start before the prompts differ for counterfactual values, none for per-pair others
    prefix = {"mean": [p.prefix_length for p in pairs], "pooled": [p.prefix_length for p in pairs],
              "zero": [p.prefix_length for p in pairs],
              "counterfactual": torch.minimum(first_difference(batch), batch.end).tolist()}.get(kind)
    if positions == "end":
        prefix = [len(t) - 1 for t in tokens]  # everything before END is the clean run's
    assert prefix is None or any(prefix)
    plain = plain_tables(tiny_llama, pairs, values, batch.reference.shape[1])
    for share in (None, prefix):
        resid = ablated_residuals(tiny_llama, tokens, masks, values, sources, prefix_lengths=share,
                                  ablate_prefix=kind in ("mean", "pooled", "zero"), at_end=positions == "end",
                                  rows_per_batch=5)
        for s, (heads, mlps, neurons) in enumerate(sets):
            expected = ablate_plain(tiny_llama, batch, heads, mlps, neurons, plain, positions)
            torch.testing.assert_close(end_logits(tiny_llama, resid[s]), expected, atol=2e-5, rtol=0)
    clean = ablate_plain(tiny_llama, batch, [], [], {}, None, positions)
    assert not torch.allclose(end_logits(tiny_llama, resid[0]), clean, atol=1e-3)  # the ablation changes something


def test_per_pair_values_equal_their_plain_definitions(tiny_llama, tokenizer):
    batch = PairBatch.from_pairs(mixed_pairs(tokenizer, 4), 0)
    for kind, plain_kind in (("counterfactual", "counterfactual"), ("end_mean", "mean")):
        values = values_of(tiny_llama, None, batch, kind)
        plain = ablation_values_plain(tiny_llama, batch, plain_kind)
        for site, l in (("z", 1), ("mlp_out", 0), ("post", 2)):
            ours, theirs = values.table(site, l), plain[act_name(site, l)]
            for p, e in enumerate(batch.end.tolist()):  # positions after END are padding
                torch.testing.assert_close(ours[p, : e + 1], theirs[p, : e + 1], atol=1e-6, rtol=0)


def test_masks_of_sets_and_values_without_a_layer(tiny_llama):
    masks = AblationMasks.of_sets(tiny_llama, [([(1, 2)], [0]), ((), ())], [{2: [3]}, {}])
    assert len(masks) == 2 and masks.heads[0, 1, 2] and masks.heads.sum() == 1 and masks.mlps.sum() == 1
    assert masks.neurons[2][0, 3] and masks.neurons[2].sum() == 1
    with pytest.raises(ValueError, match="No replacement values for MLP layer 1"):
        zero_values(tiny_llama, [2]).table("post", 1)


def test_ablating_a_site_the_values_do_not_cover_is_an_error(tiny_llama, tokenizer):
    pairs = aligned_pairs(tokenizer, 2, few_shot=True)
    neurons_only = compute_means(tiny_llama, pairs, progress=False, heads_and_mlps=False, neuron_layers=[1])
    masks = AblationMasks.of_sets(tiny_llama, [([(0, 1)], [])])
    with pytest.raises(ValueError, match=r"No replacement values for layer 0's hook_z; these values cover the "
                                         r"neurons of MLP layers \[1\]"):
        ablated_residuals(tiny_llama, [p.reference_token_ids for p in pairs], masks, neurons_only, [0, 0])
