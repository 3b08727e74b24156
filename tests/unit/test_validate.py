"""Knockout and transfer: the fast shared-prefix paths equal plain hook loops; scores equal direct computation."""

import functools

import pytest
import torch
from transformer_lens.utils import get_act_name

from circuits.data.benchmarks import ChoiceItem
from circuits.data.pairs import build_pairs, pair_logits
from circuits.patching.core.ranking import rank
from circuits.validate import KnockoutResult, compute_means, knockout, knockout_curve, knockout_logits, replacement_values
from circuits.models.forward import unembed_end
from circuits.validate.knockout import KnockoutConfig, knockout_many, knockout_residuals, score
from circuits.validate.transfer import letter_ids, mmlu_accuracy, mmlu_items, synthetic_set, transfer_knockout
from circuits.types import Head


@functools.lru_cache(maxsize=1)
def _pairs():
    from helpers import tiny_model

    return build_pairs(tiny_model(), "addition", n_pairs=18, filter_correct=False, few_shot="on").pairs


@pytest.fixture(scope="module")
def pairs(tiny_llama):
    return _pairs()


def all_heads(model):
    return [(l, h) for l in range(model.cfg.n_layers) for h in range(model.cfg.n_heads)]


def test_no_knockout_changes_nothing(tiny_llama, pairs):
    means = compute_means(tiny_llama, pairs)
    torch.testing.assert_close(knockout_logits(tiny_llama, pairs, means, []), pair_logits(tiny_llama, pairs), atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("share_prefix", [True, False])
def test_means_over_one_prompt_leave_it_unchanged(tiny_llama, pairs, share_prefix):
    for p in pairs[:3]:
        means = compute_means(tiny_llama, [p], source="reference")
        out = knockout_logits(tiny_llama, [p], means, all_heads(tiny_llama), mlps=range(tiny_llama.cfg.n_layers),
                              share_prefix=share_prefix)
        torch.testing.assert_close(out, pair_logits(tiny_llama, [p]), atol=1e-4, rtol=1e-4)


def test_shared_prefix_equals_full_prompt_run(tiny_llama, pairs):
    assert any(p.prefix_length for p in pairs)
    means = compute_means(tiny_llama, pairs)
    heads = [(0, 1), (1, 2), (2, 0)]
    fast = knockout_logits(tiny_llama, pairs, means, heads, mlps=[2])
    slow = knockout_logits(tiny_llama, pairs, means, heads, mlps=[2], share_prefix=False)
    torch.testing.assert_close(fast, slow, atol=1e-4, rtol=1e-4)
    assert not torch.allclose(fast, pair_logits(tiny_llama, pairs), atol=1e-3)


def _hooked_end_logits(model, pair, hooks):
    return model.run_with_hooks(torch.tensor([pair.reference_token_ids]), fwd_hooks=hooks)[0, -1].float()


def test_knockout_matches_plain_hook_loop(tiny_llama, pairs):
    """One pair at a time with a hand-written hook gives the same logits."""
    means = compute_means(tiny_llama, pairs)
    fast = knockout_logits(tiny_llama, pairs, means, [(2, 3)])
    for i, p in enumerate(pairs[:4]):
        g = means.source_of(p)

        def hook(z, hook):
            z[:, :, 3] = means.z[2][g, : z.shape[1], 3]
            return z

        torch.testing.assert_close(fast[i], _hooked_end_logits(tiny_llama, p, [(get_act_name("z", 2), hook)]), atol=1e-4, rtol=1e-4)


def test_pooled_means_equal_the_mean_over_every_position(tiny_llama, pairs):
    means = compute_means(tiny_llama, pairs, pooled=True)
    zs = []
    for p in pairs:
        _, c = tiny_llama.run_with_cache(torch.tensor([p.counterfactual_token_ids]))
        zs.append(c[get_act_name("z", 1)][0])
    expected = torch.cat(zs).mean(0)  # over every position of every counterfactual prompt
    torch.testing.assert_close(means.z[1][0, 0], expected, atol=1e-5, rtol=1e-5)
    fast = knockout_logits(tiny_llama, pairs[:3], means, [(1, 0)])
    for i, p in enumerate(pairs[:3]):
        def hook(z, hook):
            z[:, :, 0] = expected[0]
            return z

        torch.testing.assert_close(fast[i], _hooked_end_logits(tiny_llama, p, [(get_act_name("z", 1), hook)]), atol=1e-4, rtol=1e-4)


def test_zero_ablation_zeroes_the_head(tiny_llama, pairs):
    zero = replacement_values(tiny_llama, pairs, "zero")
    fast = knockout_logits(tiny_llama, pairs[:2], zero, [(0, 2)], mlps=[1])

    def zero_head(z, hook):
        z[:, :, 2] = 0
        return z

    for i, p in enumerate(pairs[:2]):
        plain = _hooked_end_logits(tiny_llama, p, [(get_act_name("z", 0), zero_head),
                                                   (get_act_name("mlp_out", 1), lambda x, hook: torch.zeros_like(x))])
        torch.testing.assert_close(fast[i], plain, atol=1e-4, rtol=1e-4)
    full = knockout_logits(tiny_llama, pairs, zero, [(0, 2)])
    expected = score(full, [p.answer_token_id for p in pairs])
    assert knockout(tiny_llama, pairs, [(0, 2)], ablation="zero").accuracy == expected.accuracy


@pytest.mark.parametrize("ablation", ["mean", "pooled", "zero", "resample"])
@pytest.mark.parametrize("rows_per_batch", [256, 5])
def test_sets_batched_together_equal_one_run_per_set(tiny_llama, pairs, ablation, rows_per_batch):
    """Many ablation sets in one forward pass (a per-row mask) give each set's own full-prompt knockout, for every
    ablation kind, whether a batch holds many sets or splits a prefix group."""
    if ablation == "pooled":
        values = compute_means(tiny_llama, pairs, pooled=True)
    else:
        values = replacement_values(tiny_llama, pairs, ablation)
    sets = [([], []), ([(0, 1)], []), ([(1, 2), (2, 0), (0, 3)], [2]), ([], [0, 1]), (all_heads(tiny_llama), [])]
    resid = knockout_residuals(tiny_llama, pairs, sets, values, rows_per_batch=rows_per_batch)
    assert resid.shape == (len(sets), len(pairs), tiny_llama.cfg.d_model)
    scores = knockout_many(tiny_llama, pairs, sets, means=values, rows_per_batch=rows_per_batch)
    for (heads, mlps), s, got in zip(sets, scores, resid):
        want = knockout_logits(tiny_llama, pairs, values, heads, mlps, share_prefix=False)
        torch.testing.assert_close(unembed_end(tiny_llama, got), want, atol=1e-4, rtol=1e-4)
        assert s.accuracy == score(want, [p.answer_token_id for p in pairs]).accuracy
    assert not torch.allclose(resid[0], resid[2], atol=1e-3)  # the sets really differ


def test_knockout_scores_are_argmax_accuracy(tiny_llama, pairs):
    logits = pair_logits(tiny_llama, pairs)
    expected = (logits.argmax(-1) == torch.tensor([p.answer_token_id for p in pairs])).float().mean()
    assert knockout(tiny_llama, pairs, []).accuracy == pytest.approx(float(expected))


def test_curve_starts_at_the_clean_score_and_saves(tiny_llama, pairs, tmp_path):
    effects = torch.zeros(tiny_llama.cfg.n_layers, tiny_llama.cfg.n_heads)
    effects[1, 2], effects[2, 1] = -0.5, -0.2
    ranking = [h for h, _ in rank(effects, -1)]
    assert ranking[:2] == [Head(1, 2), Head(2, 1)] and len(ranking) == effects.numel()
    curve = knockout_curve(tiny_llama, pairs, ranking, ks=[0, 1, 2], seeds=[0, 1])
    base = score(pair_logits(tiny_llama, pairs), [p.answer_token_id for p in pairs])
    assert curve.effect_accuracy[0] == base.accuracy
    assert curve.random_prob[1][0] == pytest.approx(base.answer_prob, abs=1e-5)
    assert curve.effect_prob[1] == pytest.approx(knockout(tiny_llama, pairs, ranking[:1]).answer_prob, abs=1e-6)
    made = KnockoutResult(KnockoutConfig(task="addition", ks=(0, 1, 2), seeds=(0, 1)), curve, "addition", len(pairs))
    back = KnockoutResult.load(made.save(tmp_path / "ko"))
    assert back == made and back.curve.ranking == ranking[:2]  # the curve keeps the heads any k knocks out
    with pytest.raises(ValueError, match="k must lie"):
        knockout_curve(tiny_llama, pairs, ranking, ks=[99])


def test_pooled_means_with_mixed_lengths_equal_one_by_one(tiny_llama, pairs):
    means = compute_means(tiny_llama, pairs, pooled=True)
    items = synthetic_set(tiny_llama.tokenizer, "multi_digit", 6, seed=3) + synthetic_set(tiny_llama.tokenizer, "time_span", 4)
    assert len({len(p.reference_token_ids) for p in items}) > 1
    both = knockout_logits(tiny_llama, items, means, [(1, 1), (2, 0)])
    for i, p in enumerate(items):
        one = knockout_logits(tiny_llama, [p], means, [(1, 1), (2, 0)], share_prefix=False)
        torch.testing.assert_close(both[i], one[0], atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("task", ["multi_digit", "decimal", "time_span"])
def test_synthetic_sets_target_first_answer_token(task, tokenizer):
    items = synthetic_set(tokenizer, task, 5, seed=1)
    assert len(items) == 5
    for it in items:
        assert it.prefix_length > 0 and it.reference == it.counterfactual
        full = tokenizer(it.reference + it.answer).input_ids
        assert full[len(it.reference_token_ids)] == it.answer_token_id


def test_transfer_scores_equal_plain_forwards(tiny_llama, pairs):
    means = compute_means(tiny_llama, pairs, pooled=True)
    items = synthetic_set(tiny_llama.tokenizer, "multi_digit", 5)
    res = transfer_knockout(tiny_llama, {"multi_digit": items}, means, [(1, 1)])["multi_digit"]
    plain = torch.stack([tiny_llama(torch.tensor([p.reference_token_ids]))[0, -1] for p in items])
    answers = torch.tensor([p.answer_token_id for p in items])
    assert res["accuracy_before"] == pytest.approx(float((plain.argmax(-1) == answers).float().mean()))
    assert res["prob_before"] == pytest.approx(float(plain.softmax(-1)[torch.arange(5), answers].mean()), abs=1e-5)
    after = knockout_logits(tiny_llama, items, means, [(1, 1)])
    assert res["accuracy_after"] == pytest.approx(float((after.argmax(-1) == answers).float().mean()))


def test_mmlu_accuracy_is_the_best_letter(tiny_llama, pairs):
    qs = [ChoiceItem("Who wrote the Republic?", ("Plato", "Kant", "Hume", "Locke"), 0, subject="philosophy"),
          ChoiceItem("2 + 2?", ("3", "4", "5", "6"), 1, subject="elementary_mathematics")]
    items = mmlu_items(tiny_llama.tokenizer, qs)
    ids = letter_ids(tiny_llama.tokenizer)
    assert items[0].answer_token_id == ids[0] and items[1].answer_token_id == ids[1]
    means = compute_means(tiny_llama, pairs, pooled=True)
    direct = [int(tiny_llama(torch.tensor([p.reference_token_ids]))[0, -1, ids].argmax()) for p in items]
    assert mmlu_accuracy(tiny_llama, items, means) == pytest.approx(sum(d == q.answer for d, q in zip(direct, qs)) / 2)


@pytest.mark.parametrize("heads, mlps, match", [([(99, 0)], [], "Head 99.0 is outside"), ([(0, 7)], [], "Head 0.7"),
                                                ([], [42], "MLP 42 is outside"), (["x"], [], "Bad head 'x'")])
def test_an_ablation_set_outside_the_model_is_one_clear_line(tiny_llama, pairs, heads, mlps, match):
    means = compute_means(tiny_llama, pairs[:2])
    with pytest.raises(ValueError, match=match):
        knockout_many(tiny_llama, pairs[:2], [([], []), (heads, mlps)], means=means)
    with pytest.raises(ValueError, match=match):
        knockout(tiny_llama, pairs[:2], heads, mlps, means=means)


def test_a_pair_outside_the_mean_groups_is_one_clear_error(tiny_llama, pairs):
    import re

    from circuits.patching.ablation.values import AblationValues, group_key

    means = compute_means(tiny_llama, pairs[:1])
    other = next(p for p in pairs if group_key(p) != group_key(pairs[0]))
    assert means.source_of(pairs[0]) == 0 and compute_means(tiny_llama, pairs[:1], pooled=True).source_of(other) == 0
    with pytest.raises(KeyError, match=re.escape(f"No mean for template {other.template_id!r} at length "
                                                 f"{len(other.reference_token_ids)}: means were taken over")
                       + ".*or use pooled=True"):
        means.source_of(other)
    neurons = AblationValues([], [], index={group_key(pairs[0]): 0}, rule="group", what="neuron mean")
    assert neurons.source_of(pairs[0]) == 0 and AblationValues([], [], rule="pooled").source_of(other) == 0
    with pytest.raises(KeyError, match=re.escape(f"No neuron mean for template {other.template_id!r}")):
        neurons.source_of(other)


def _plain_knockout_resid(model, pair, means, heads, mlps):
    """The plain reference: the whole reference prompt with one hook per site writing the group's mean at every
    position, prefix included (TransformerLens's own forward)."""
    g, T = means.source_of(pair), len(pair.reference_token_ids)
    hooks = []
    for l, h in heads:
        def z_hook(z, hook, l=l, h=h):
            z[:, :, h] = means.z[l][g, :T, h]
            return z
        hooks.append((get_act_name("z", l), z_hook))
    for l in mlps:
        hooks.append((get_act_name("mlp_out", l), lambda x, hook, l=l: means.mlp_out[l][g, :T][None].clone()))
    return model.run_with_hooks(torch.tensor([pair.reference_token_ids]), fwd_hooks=hooks,
                                stop_at_layer=model.cfg.n_layers)[0, -1]


def test_template_means_leave_the_prefix_clean_and_the_fast_path_equals_the_plain_loop(tiny_llama, pairs):
    """Template means over prompts that share the pair's few-shot prefix are the clean run's activations there, so the
    executor runs each prefix once, unhooked, for every set (issue 44): equal, within 1e-5, to the prefix ablated once
    per set (the path before) and to TransformerLens's forward with one hook per site over the whole prompt."""
    from circuits.patching.ablation.executor import AblationMasks, ablated_residuals

    means = compute_means(tiny_llama, pairs)
    assert sum(p.prefix_length > 0 for p in pairs) >= len(pairs) // 2
    assert all(means.clean_start(p) >= p.prefix_length for p in pairs)  # the counterfactuals keep the prefix
    sets = [([], []), ([(0, 1)], []), ([(1, 2), (2, 0), (0, 3)], [2]), ([], [0, 1]), (all_heads(tiny_llama), [0])]
    fast = knockout_residuals(tiny_llama, pairs, sets, means)
    tokens = [p.reference_token_ids for p in pairs]
    before = ablated_residuals(tiny_llama, tokens, AblationMasks.of_sets(tiny_llama, sets), means,
                               [means.source_of(p) for p in pairs], prefix_lengths=[p.prefix_length for p in pairs],
                               ablate_prefix=True)
    assert (fast - before).abs().max() < 1e-5
    for s, (heads, mlps) in enumerate(sets):
        for i, p in enumerate(pairs[:6]):
            plain = _plain_knockout_resid(tiny_llama, p, means, heads, mlps)
            assert (fast[s, i] - plain).abs().max() < 1e-5, (s, i)
    assert (fast[4] - fast[0]).abs().max() > 1e-2  # the sets really differ


def test_means_of_prompts_with_another_prefix_ablate_the_prefix(tiny_llama, pairs):
    """Where the counterfactual prompts' prefix differs from the reference's (``--prefix-policy counterfactual``),
    the means there are not the clean run's: the prefix is ablated once per set, as the plain loop does."""
    import dataclasses

    other = [dataclasses.replace(p, counterfactual_token_ids=(p.counterfactual_token_ids[0] + 1,)
                                 + p.counterfactual_token_ids[1:]) if p.prefix_length else p for p in pairs]
    means = compute_means(tiny_llama, other)
    assert all(means.clean_start(p) == 0 for p in other if p.prefix_length)
    sets = [([(0, 1), (1, 0)], [1]), (all_heads(tiny_llama), [])]
    got = knockout_residuals(tiny_llama, other, sets, means)
    clean_prefix = knockout_residuals(tiny_llama, pairs, sets, compute_means(tiny_llama, pairs))
    for s, (heads, mlps) in enumerate(sets):
        for i, p in enumerate(other[:6]):
            assert (got[s, i] - _plain_knockout_resid(tiny_llama, p, means, heads, mlps)).abs().max() < 1e-5, (s, i)
    assert (got - clean_prefix).abs().max() > 1e-3
    assert replacement_values(tiny_llama, pairs, "zero").clean_start(pairs[0]) == 0  # zeros are never the clean run


@pytest.mark.parametrize("batch_size", [32, 5])
def test_means_of_groups_run_together_equal_each_group_alone(tiny_llama, pairs, batch_size):
    """compute_means runs every group's prompts in one padded batch (issue 44): each group's mean per position equals
    the mean of its own prompts' activations, each prompt run alone, within 1e-5."""
    from circuits.patching.ablation.values import group_key

    means = compute_means(tiny_llama, pairs, batch_size=batch_size)
    assert len(means.index) > 2  # several groups of several lengths in one batch
    for key, g in means.index.items():
        group = [p for p in pairs if group_key(p) == key]
        zs, ms = [], []
        for p in group:
            _, c = tiny_llama.run_with_cache(torch.tensor([p.counterfactual_token_ids]))
            zs.append(c[get_act_name("z", 1)][0])
            ms.append(c[get_act_name("mlp_out", 2)][0])
        assert (means.z[1][g, : key[1]] - torch.stack(zs).mean(0)).abs().max() < 1e-5
        assert (means.mlp_out[2][g, : key[1]] - torch.stack(ms).mean(0)).abs().max() < 1e-5
        assert means.shared_tokens[g] == tuple(group[0].counterfactual_token_ids[: len(means.shared_tokens[g])])
