"""Resample ablation equals patching each prompt with its donor's counterfactual run by hand; donors come from the
same template and length; Figure 3 is drawn under every ablation kind."""

import torch
from helpers import mixed_pairs
from transformer_lens.utils import get_act_name

from circuits.types import Ablation, Head
from circuits.validate.ablation_kinds import AblationComparison, AblationKindsConfig, compare_ablations
from circuits.validate.knockout import group_key, knockout_logits, replacement_values


def test_resample_equals_the_donor_patch(tiny_llama, tokenizer):
    pairs = mixed_pairs(tokenizer, 8) + mixed_pairs(tokenizer, 8, seed=5)
    values = replacement_values(tiny_llama, pairs, Ablation.RESAMPLE, seed=1)
    for i, d in enumerate(values.donor):
        assert group_key(pairs[d]) == group_key(pairs[i])
        same_group = sum(group_key(p) == group_key(pairs[i]) for p in pairs)
        assert (d != i) == (same_group > 1)  # a derangement where the group allows one
    heads, mlps = [Head(1, 2), Head(2, 0)], [1]
    ours = knockout_logits(tiny_llama, pairs, values, heads, mlps)
    for i, p in enumerate(pairs):
        _, donor = tiny_llama.run_with_cache(torch.tensor([pairs[values.donor[i]].counterfactual_token_ids]))

        def z_hook(z, hook):
            layer = int(hook.name.split(".")[1])
            for hl, hh in heads:
                if hl == layer:
                    z[:, :, hh] = donor[hook.name][:, :, hh]
            return z

        hooks = [(get_act_name("z", 1), z_hook), (get_act_name("z", 2), z_hook),
                 (get_act_name("mlp_out", 1), lambda o, hook: donor[hook.name].clone())]
        logits = tiny_llama.run_with_hooks(torch.tensor([p.reference_token_ids]), fwd_hooks=hooks)
        torch.testing.assert_close(ours[i], logits[0, -1].float(), atol=1e-4, rtol=0)


def test_figure3_under_each_kind(tiny_llama, tokenizer, tmp_path):
    pairs = mixed_pairs(tokenizer, 4)
    ranking = [Head(l, h) for l in range(3) for h in range(4)]
    curves = compare_ablations(tiny_llama, pairs, ranking, [0, 2], seeds=(0,))
    assert list(curves) == ["mean", "zero", "resample"]
    assert all(c.ks == [0, 2] for c in curves.values())
    result = AblationComparison(AblationKindsConfig(model="tiny", ks=(0, 2), seeds=(0,)), {"addition": curves}, {"addition": 4})
    result.save(tmp_path / "ab")
    back = AblationComparison.load(tmp_path / "ab")
    assert back == result and back.summary() == result.summary() and (tmp_path / "ab" / "figure-addition.html").is_file()
