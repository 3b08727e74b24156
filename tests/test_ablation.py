import pytest
import torch

from circuits.ablation import compute_means, knockout, knockout_curve, knockout_logits, rank_heads, score
from circuits.prompts import PairBatch, end_logits
from tiny_validate import smollm2, tiny_model, tiny_pairs


def clean_logits(model, pairs):
    batch = PairBatch.from_pairs(list(pairs), 0)
    return end_logits(model, batch.reference, batch.end)


def all_heads(model):
    return [(l, h) for l in range(model.cfg.n_layers) for h in range(model.cfg.n_heads)]


def test_no_knockout_changes_nothing():
    model, pairs = tiny_model(), tiny_pairs()
    means = compute_means(model, pairs)
    out = knockout_logits(model, pairs, means, [])
    torch.testing.assert_close(out, clean_logits(model, pairs), atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("share_prefix", [True, False])
def test_means_over_one_prompt_leave_it_unchanged(share_prefix):
    model, pairs = tiny_model(), tiny_pairs()
    for p in pairs[:3]:
        means = compute_means(model, [p], source="reference")
        out = knockout_logits(model, [p], means, all_heads(model), mlps=range(model.cfg.n_layers), share_prefix=share_prefix)
        torch.testing.assert_close(out, clean_logits(model, [p]), atol=1e-4, rtol=1e-4)


def test_shared_prefix_equals_full_prompt_run():
    model, pairs = tiny_model(), tiny_pairs()
    assert any(p.prefix_length for p in pairs)
    means = compute_means(model, pairs)
    heads = [(0, 1), (1, 2), (3, 0)]
    fast = knockout_logits(model, pairs, means, heads, mlps=[2])
    slow = knockout_logits(model, pairs, means, heads, mlps=[2], share_prefix=False)
    torch.testing.assert_close(fast, slow, atol=1e-4, rtol=1e-4)
    assert not torch.allclose(fast, clean_logits(model, pairs), atol=1e-3)


def test_knockout_matches_plain_hook_loop():
    """One pair at a time with a hand-written hook gives the same logits."""
    from transformer_lens.utils import get_act_name

    model, pairs = tiny_model(), tiny_pairs()
    means = compute_means(model, pairs)
    fast = knockout_logits(model, pairs, means, [(2, 3)])
    for i, p in enumerate(pairs[:4]):
        g = means.group_of(p)

        def hook(z, hook):
            z[:, :, 3] = means.z[2][g, : z.shape[1], 3]
            return z

        toks = torch.tensor([p.reference_token_ids])
        logits = model.run_with_hooks(toks, fwd_hooks=[(get_act_name("z", 2), hook)])[0, -1]
        torch.testing.assert_close(fast[i], logits.float(), atol=1e-4, rtol=1e-4)


def test_pooled_means_shape_and_use():
    model, pairs = tiny_model(), tiny_pairs()
    means = compute_means(model, pairs, pooled=True)
    assert means.z[0].shape == (1, 1, model.cfg.n_heads, model.cfg.d_head)
    s = knockout(model, pairs, means, [(0, 0)])
    assert 0 <= s.accuracy <= 1 and 0 <= s.answer_prob <= 1


def test_rank_heads_and_curve():
    model, pairs = tiny_model(), tiny_pairs()
    effects = torch.zeros(model.cfg.n_layers, model.cfg.n_heads)
    effects[1, 2], effects[3, 1] = -0.5, -0.2
    ranking = rank_heads(effects)
    assert ranking[:2] == [(1, 2), (3, 1)] and len(ranking) == effects.numel()
    means = compute_means(model, pairs)
    curve = knockout_curve(model, pairs, means, ranking, ks=[0, 1, 2], seeds=[0, 1])
    base = score(clean_logits(model, pairs), [p.answer_token_id for p in pairs])
    assert curve.effect_accuracy[0] == base.accuracy
    assert curve.random_prob[1][0] == pytest.approx(base.answer_prob, abs=1e-5)
    assert len(curve.random_accuracy) == 2 and len(curve.random_accuracy[0]) == 3


@pytest.mark.slow
def test_smollm2_knockout_invariants():
    from circuits.prompts import PairConfig, build_pairs

    model = smollm2()
    pairs = build_pairs(model, PairConfig(task="addition", n_pairs=8, filter_correct=False)).pairs
    means = compute_means(model, pairs)
    torch.testing.assert_close(knockout_logits(model, pairs, means, []), clean_logits(model, pairs), atol=2e-3, rtol=1e-3)
    one = compute_means(model, pairs[:1], source="reference")
    out = knockout_logits(model, pairs[:1], one, all_heads(model))
    torch.testing.assert_close(out, clean_logits(model, pairs[:1]), atol=2e-3, rtol=1e-3)


def test_pooled_means_with_mixed_lengths_equal_one_by_one():
    from circuits.transfer import synthetic_set

    model = tiny_model()
    means = compute_means(model, tiny_pairs(), pooled=True)
    items = synthetic_set(model.tokenizer, "multi_digit", 6, seed=3) + synthetic_set(model.tokenizer, "time_span", 4)
    assert len({len(p.reference_token_ids) for p in items}) > 1
    both = knockout_logits(model, items, means, [(1, 1), (2, 0)])
    for i, p in enumerate(items):
        one = knockout_logits(model, [p], means, [(1, 1), (2, 0)], share_prefix=False)
        torch.testing.assert_close(both[i], one[0], atol=1e-4, rtol=1e-4)
