"""Activation patching at every position: the suffix engine equals TransformerLens's own by-position patching
functions, the END engine at END, and the plain one-forward-per-node loop (heads, MLPs and neurons)."""

import pytest
import torch
from helpers import aligned_pairs, mixed_pairs

from circuits.data.pairs import PairBatch
from circuits.patching import sweep
from circuits.patching.engines.plain import cf_answer_plain, patch_at_plain
from circuits.patching.engines.position_sweep import sweep_positions
from circuits.types import Component, Neuron


def test_equals_transformer_lens_by_position_patching(tiny_llama, tokenizer):
    from transformer_lens import patching

    batch = PairBatch.from_pairs(aligned_pairs(tokenizer, 3), 0)
    end, answer = int(batch.end[0]), batch.answer
    assert (batch.end == end).all()

    def metric(logits):
        return logits[torch.arange(len(answer)), end, answer].mean()

    _, cf_cache = tiny_llama.run_with_cache(batch.counterfactual)
    theirs = patching.get_act_patch_attn_head_out_by_pos(tiny_llama, batch.reference, cf_cache, metric)  # [layer pos head]
    theirs_mlp = patching.get_act_patch_mlp_out(tiny_llama, batch.reference, cf_cache, metric)  # [layer pos]
    ours = sweep_positions(tiny_llama, batch, progress=False)
    # offset k is position end - k: flip the offset axis into positions.
    torch.testing.assert_close(ours.heads.logit.mean(-1).flip(-1).permute(0, 2, 1), theirs.float(), atol=1e-4, rtol=0)
    torch.testing.assert_close(ours.mlps.logit.mean(-1).flip(-1), theirs_mlp.float(), atol=1e-4, rtol=0)
    assert (theirs - theirs[0, 0, 0]).abs().max() > 1e-3  # patches at some positions matter


@pytest.mark.parametrize("chunk", [2, 16])
def test_offset_zero_is_the_end_engine(tiny_llama, tokenizer, chunk):
    batch = PairBatch.from_pairs(mixed_pairs(tokenizer, 5), 0)
    ours = sweep_positions(tiny_llama, batch, offsets=[0, 1], pairs_per_chunk=chunk, progress=False)
    end = sweep(tiny_llama, batch, "activation", progress=False)
    torch.testing.assert_close(ours.heads.logit[:, :, 0], end.head_logit, atol=1e-4, rtol=0)
    torch.testing.assert_close(ours.mlps.prob[:, 0], end.mlp_prob, atol=1e-5, rtol=0)
    assert ours.heads.logit[:, :, 2:].isnan().all()  # offsets not asked for stay NaN


def test_equals_the_plain_loop_for_heads_mlps_and_neurons(tiny_mistral, tokenizer):
    batch = PairBatch.from_pairs(mixed_pairs(tokenizer, 4, seed=2), 0)
    cf_answer = cf_answer_plain(tiny_mistral, batch)
    nodes = [(Component("head", 1, 2), 1), (Component.mlp(0), 2), (Neuron(1, 7), 1), (Component("head", 2, 0), 3),
             (Component.mlp(2), 0)]
    ours = sweep_positions(tiny_mistral, batch, nodes=nodes, progress=False)
    worst = 0.0
    for s, k in nodes:
        plain = patch_at_plain(tiny_mistral, batch, s, k, cf_answer)
        if isinstance(s, Neuron):
            view = ours.neurons.index((ours.neuron_list.index(s), k))
        elif s.kind == "head":
            view = ours.heads.index((s.layer, s.head, k))
        else:
            view = ours.mlps.index((s.layer, k))
        for r in ("logit", "logit_diff", "prob"):
            worst = max(worst, (getattr(view, r) - plain[r]).abs().max().item())
    assert worst < 1e-4


def test_before_the_first_difference_nothing_changes(tiny_llama, tokenizer):
    pairs = mixed_pairs(tokenizer, 3)
    ours = sweep_positions(tiny_llama, pairs, senders=[Component("head", 0, 1)], progress=False)
    for i in range(len(pairs)):
        k_first = int(ours.ends[i] - ours.first_diff[i])  # the first difference's offset
        before = ours.heads.logit[0, 1, k_first + 1 : int(ours.ends[i]) + 1, i]
        assert torch.equal(before, ours.baseline.logit[i].expand_as(before))
        assert ours.heads.logit[0, 1, int(ours.ends[i]) + 1 :, i].isnan().all()  # before the prompt starts


def test_bad_input_is_one_clear_line(tiny_llama, tokenizer):
    pairs = mixed_pairs(tokenizer, 2)
    with pytest.raises(ValueError, match="outside the prompts"):
        sweep_positions(tiny_llama, pairs, offsets=[500], progress=False)
    with pytest.raises(ValueError, match="outside d_mlp"):
        sweep_positions(tiny_llama, pairs, senders=[Neuron(0, 10_000)], offsets=[0], progress=False)
