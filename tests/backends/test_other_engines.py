"""Neurons, positions, edges, attribution (screen) and ``cc.patch`` on whichever backend this environment has, each
against its plain ``run_with_hooks`` reference (:mod:`circuits.patching.engines.plain`) or TransformerLens's own
``patching`` functions, on tiny random models (``tests/backends`` runs on both TransformerLens lines)."""

from __future__ import annotations

import pytest
import torch
from helpers import aligned_pairs, mixed_pairs

from circuits.data.pairs import PairBatch
from circuits.patching.engines.plain import cf_answer_plain, patch_at_plain
from circuits.types import Component, Neuron


@pytest.mark.parametrize("mode", ["path", "activation"])
@pytest.mark.parametrize("arch", ["llama", "gemma2"])
def test_neurons_equal_the_plain_loop(family_models, tokenizer, arch, mode):
    from circuits.patching.engines.neuron_sweep import sweep_neurons

    model = family_models(arch)
    batch = PairBatch.from_pairs(mixed_pairs(tokenizer, 4), 0)
    neurons = [Neuron(0, 3), Neuron(0, 95), Neuron(1, 50), Neuron(2, 0)]
    ours = sweep_neurons(model, batch, mode, neurons=neurons, prob=True, memory_mb=0.05, progress=False)
    cf_answer = cf_answer_plain(model, batch)
    for j, n in enumerate(ours.neurons):
        plain = patch_at_plain(model, batch, n, 0, cf_answer, mode)
        for r in ("logit", "logit_diff", "prob"):
            torch.testing.assert_close(getattr(ours.readouts, r)[j], plain[r], atol=1e-4, rtol=0)
    assert (ours.readouts.logit - ours.baseline.logit).abs().max() > 1e-4


def test_positions_equal_transformer_lens_by_position_patching(family_models, tokenizer):
    from transformer_lens import patching

    from circuits.patching.engines.position_sweep import sweep_positions

    model = family_models("llama")
    batch = PairBatch.from_pairs(aligned_pairs(tokenizer, 3), 0)
    end, answer = int(batch.end[0]), batch.answer
    assert (batch.end == end).all()

    def metric(logits):
        return logits[torch.arange(len(answer)), end, answer].mean()

    names = lambda n: n.endswith("hook_z") or n.endswith("hook_mlp_out")  # noqa: E731
    _, cf_cache = model.run_with_cache(batch.counterfactual, names_filter=names)
    theirs_mlp = patching.get_act_patch_mlp_out(model, batch.reference, cf_cache, metric)  # [layer pos]
    ours = sweep_positions(model, batch, progress=False)
    torch.testing.assert_close(ours.mlps.logit.mean(-1).flip(-1), theirs_mlp.float(), atol=1e-4, rtol=0)
    assert (theirs_mlp - theirs_mlp[0, 0]).abs().max() > 1e-3  # patches at some positions matter


@pytest.mark.parametrize("arch", ["mistral_window", "qwen3", "gemma3"])
def test_positions_equal_the_plain_loop(family_models, tokenizer, arch):
    from circuits.patching.engines.position_sweep import sweep_positions

    model = family_models(arch)
    batch = PairBatch.from_pairs(mixed_pairs(tokenizer, 4, seed=2), 0)
    cf_answer = cf_answer_plain(model, batch)
    nodes = [(Component("head", 1, 2), 1), (Component.mlp(0), 2), (Neuron(1, 7), 1), (Component("head", 2, 0), 3),
             (Component.mlp(2), 0)]
    ours = sweep_positions(model, batch, nodes=nodes, progress=False)
    worst = 0.0
    for s, k in nodes:
        plain = patch_at_plain(model, batch, s, k, cf_answer)
        if isinstance(s, Neuron):
            view = ours.neurons.index((ours.neuron_list.index(s), k))
        elif s.kind == "head":
            view = ours.heads.index((s.layer, s.head, k))
        else:
            view = ours.mlps.index((s.layer, k))
        for r in ("logit", "logit_diff", "prob"):
            worst = max(worst, (getattr(view, r) - plain[r]).abs().max().item())
    assert worst < 1e-4


@pytest.mark.parametrize("arch", ["llama", "gemma2"])
def test_edges_equal_the_plain_loop(family_models, tokenizer, arch):
    from circuits.patching.engines.edge_sweep import sweep_edges
    from circuits.patching.engines.plain import edge_caches, edge_plain

    model = family_models(arch)
    batch = PairBatch.from_pairs(mixed_pairs(tokenizer, 4), 0)
    senders = ["0.1", "MLP0", "1.2", "1.0"]
    ours = sweep_edges(model, batch, "2.1,1.3.k,MLP1", senders=senders, memory_mb=0.05, progress=False)
    cf_answer, caches = cf_answer_plain(model, batch), edge_caches(model, batch)
    checked = 0
    for i, s in enumerate(ours.senders):
        for j, r in enumerate(ours.receivers):
            if ours.readouts.logit[i, j].isnan().all():
                continue
            plain = edge_plain(model, batch, s, r, cf_answer, caches)
            for k in ("logit", "logit_diff"):
                torch.testing.assert_close(getattr(ours.readouts, k)[i, j], plain[k], atol=1e-4, rtol=0)
            checked += 1
    assert checked == 3 * 4 + 2 + 4
    assert (ours.readouts.logit - ours.baseline.logit).nan_to_num().abs().max() > 1e-3


@pytest.mark.parametrize("mode", ["activation", "path"])
@pytest.mark.parametrize("arch", ["llama", "gemma2"])
def test_attribution_equals_plain_attribution_patching(family_models, tokenizer, arch, mode):
    from circuits.patching.engines.attribution import attribute
    from circuits.patching.core.metrics import get_metric
    from circuits.patching.engines.plain import attribute_plain

    model = family_models(arch)
    batch = PairBatch.from_pairs(mixed_pairs(tokenizer, 5), 0)
    m = get_metric("logit_diff")
    a = attribute(model, batch, m, mode=mode, pairs_per_batch=3, progress=False)
    plain = attribute_plain(model, batch, m, a.readout, mode)
    for i in range(len(batch)):
        e = int(batch.end[i])
        for k in range(e + 1):
            torch.testing.assert_close(a.head[:, :, k, i], plain["head"][:, i, e - k], atol=1e-5, rtol=0)
            torch.testing.assert_close(a.mlp[:, k, i], plain["mlp"][:, i, e - k], atol=1e-5, rtol=0)
    assert a.head.nan_to_num().abs().max() > 1e-4


def test_attribution_qk_fix_equals_the_recomputed_pattern(family_models, tokenizer):
    from circuits.patching.engines.attribution import attribute

    model = family_models("mistral_window")
    batch = PairBatch.from_pairs(mixed_pairs(tokenizer, 2, seed=3), 0)
    a = attribute(model, batch, "logit_diff", progress=False)
    assert a.head_q is not None and a.head_q.nan_to_num().abs().max() > 1e-5


@pytest.mark.parametrize("arch", ["llama", "qwen3"])
def test_patch_equals_transformer_lens_patching(family_models, tokenizer, arch):
    """``cc.patch`` (denoising) equals ``transformer_lens.patching.get_act_patch_mlp_out`` read at the last position."""
    from transformer_lens import patching

    from circuits.patching.interchange.tl_patch import patch

    model = family_models(arch)
    batch = PairBatch.from_pairs(aligned_pairs(tokenizer, 3), 0)
    clean, corrupted = batch.reference, batch.counterfactual
    answer = batch.answer

    def end_metric(logits):  # [batch, vocab] at the last position
        return logits[torch.arange(len(answer)), answer].mean()

    ours = patch(model, clean, corrupted, end_metric, direction="denoising", progress=False)
    _, clean_cache = model.run_with_cache(clean, names_filter=lambda n: n.endswith("hook_mlp_out"))
    end = int(batch.end[0])
    mlps = __import__("pandas").DataFrame([(l, end) for l in range(model.cfg.n_layers)], columns=["layer", "pos"])
    theirs = patching.generic_activation_patch(model, corrupted, clean_cache, lambda lg: end_metric(lg[:, -1]),
                                               patching.layer_pos_patch_setter, "mlp_out", index_df=mlps)
    torch.testing.assert_close(ours.mlps.float(), theirs.float(), atol=1e-4, rtol=0)
    assert (ours.mlps - ours.corrupted).abs().max() > 1e-4
