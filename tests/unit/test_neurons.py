"""Single MLP neurons as senders of the END engine equal the plain loop (one run_with_hooks per neuron), and the
neuron knockout equals patching hook_post by hand."""

import pytest
import torch
from helpers import mixed_pairs
from transformer_lens.utils import get_act_name

from circuits.data.pairs import PairBatch
from circuits.patching.engines.neuron_sweep import effect_shares, sweep_neurons, top_neurons
from circuits.patching.engines.plain import cf_answer_plain, patch_at_plain
from circuits.types import Neuron
from circuits.validate.neuron_knockout import knockout_neurons, neuron_means


@pytest.mark.parametrize("mode", ["path", "activation"])
def test_neurons_equal_the_plain_loop(tiny_llama, tokenizer, mode):
    batch = PairBatch.from_pairs(mixed_pairs(tokenizer, 4), 0)
    neurons = [Neuron(0, 3), Neuron(0, 95), Neuron(1, 50), Neuron(2, 0)]
    ours = sweep_neurons(tiny_llama, batch, mode, neurons=neurons, prob=True, memory_mb=0.05, progress=False)
    cf_answer = cf_answer_plain(tiny_llama, batch)
    for j, n in enumerate(ours.neurons):
        plain = patch_at_plain(tiny_llama, batch, n, 0, cf_answer, mode)
        for r in ("logit", "logit_diff", "prob"):
            torch.testing.assert_close(getattr(ours.readouts, r)[j], plain[r], atol=1e-4, rtol=0)
    assert (ours.readouts.logit - ours.baseline.logit).abs().max() > 1e-4


def test_cheap_readout_equals_the_full_one(tiny_llama, tokenizer):
    batch = PairBatch.from_pairs(mixed_pairs(tokenizer, 3), 0)
    cheap = sweep_neurons(tiny_llama, batch, layers=[1], progress=False)
    full = sweep_neurons(tiny_llama, batch, layers=[1], prob=True, progress=False)
    assert len(cheap.neurons) == tiny_llama.cfg.d_mlp and cheap.readouts.prob.isnan().all()
    torch.testing.assert_close(cheap.readouts.logit_diff, full.readouts.logit_diff, atol=1e-4, rtol=0)
    torch.testing.assert_close(cheap.scores("fraction")["neurons"], full.scores("fraction")["neurons"], atol=1e-4, rtol=0)


def test_shares_and_top_neurons():
    effects = torch.tensor([0.5, 0.0, 0.3, -0.2, 0.1, 0.1, 0.0, 0.0, 0.0, 0.0])
    assert top_neurons(effects, 1, 0.2) == [0, 2]
    assert top_neurons(effects, -1, 0.1) == [3]
    s = effect_shares(effects, 1)
    assert s["share_for_50pct"] == pytest.approx(0.1) and s["share_for_80pct"] == pytest.approx(0.2)


def test_neuron_knockout_equals_patching_hook_post(tiny_llama, tokenizer):
    pairs = mixed_pairs(tokenizer, 4)
    means = neuron_means(tiny_llama, pairs, [1])
    chosen = {1: [3, 17, 40]}
    ours = knockout_neurons(tiny_llama, pairs, chosen, means)
    idx = torch.tensor(chosen[1])
    probs = []
    for p in pairs:
        g = means.source_of(p)

        def hook(post, hook, g=g):
            post[:, :, idx] = means.post[1][g, : post.shape[1]][:, idx]
            return post

        logits = tiny_llama.run_with_hooks(torch.tensor([p.reference_token_ids]), fwd_hooks=[(get_act_name("post", 1), hook)])
        probs.append(logits[0, -1].float().softmax(-1)[p.answer_token_id])
    assert ours.answer_prob == pytest.approx(float(torch.stack(probs).mean()), abs=1e-6)


def test_bad_neurons_are_one_clear_line(tiny_llama, tokenizer):
    pairs = mixed_pairs(tokenizer, 2)
    with pytest.raises(ValueError, match="outside d_mlp"):
        sweep_neurons(tiny_llama, pairs, neurons=[Neuron(1, tiny_llama.cfg.d_mlp)], progress=False)
    with pytest.raises(ValueError, match="outside this model"):
        sweep_neurons(tiny_llama, pairs, layers=[7], progress=False)
    with pytest.raises(ValueError, match="outside d_mlp"):
        knockout_neurons(tiny_llama, pairs, {1: [10_000]}, neuron_means(tiny_llama, pairs, [1]))
    with pytest.raises(ValueError, match="MLP<layer>.<index>"):
        Neuron.parse("19-3")
