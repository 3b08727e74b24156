"""Templates and prompt pairs: counts, roles from template spans, token checks, batching, prefix sharing."""

import random

import pytest
import torch

from circuits.data.pairs import (
    PairBatch,
    PairConfig,
    PromptError,
    PromptPair,
    as_batch,
    build_pairs,
    encode,
    make_pair,
    pair_logits,
    prefix_length_of,
    render_pair,
)
from circuits.data.templates import EXPONENTIATION, FIGURE8, FIGURE10, OPERATIONS, Template, all_templates, templates_for


def test_template_counts():
    assert sum(len(FIGURE8[op]) for op in OPERATIONS) == 36
    assert len(FIGURE10) == 12 and len(EXPONENTIATION) == 2
    assert len({t.id for t in all_templates()}) == 50
    assert len({t.text for t in templates_for("addition")}) == 9  # no duplicate after the Figure 8 fix


def test_template_without_placeholders_is_rejected():
    with pytest.raises(ValueError, match=r"lacks the placeholder \{B\}"):
        Template("bad", "addition", "equation", "{A} {OP} = ", "+", "symbol")


def test_unknown_task():
    with pytest.raises(ValueError, match="Unknown task 'modulo'.*accepted"):
        PairConfig(task="modulo")


@pytest.mark.parametrize("bad", [(9, 1), (-5, 3), ("a", 3), (1, 2, 3), 5])
def test_operand_range_is_two_ordered_integers(bad):
    with pytest.raises(ValueError, match=r"operand_range must be two integers \(low, high\) with 0 <= low <= high"):
        PairConfig(task="addition", operand_range=bad)


@pytest.mark.parametrize("template", all_templates(), ids=lambda t: t.id)
def test_every_template_renders_a_valid_pair(template, tokenizer):
    a, b = (3, 1) if template.operation in ("division", "subtraction") else (2, 1)
    pair = render_pair(template, a, b, tokenizer, random.Random(0))
    assert len(pair.reference_token_ids) == len(pair.counterfactual_token_ids)
    assert pair.reference != pair.counterfactual
    # The answer is the single next token.
    assert encode(tokenizer, pair.reference + pair.answer) == [*pair.reference_token_ids, pair.answer_token_id]
    # Roles come from the template: operand tokens decode to the operands, the operator to the op word.
    toks = pair.reference_token_ids
    assert tokenizer.decode([toks[i] for i in pair.roles["A"]]).strip() == str(a)
    assert tokenizer.decode([toks[i] for i in pair.roles["B"]]).strip() == str(b)
    assert pair.roles["operator"], "operator role found"
    cf_op = tokenizer.decode([pair.counterfactual_token_ids[i] for i in pair.roles["operator"]]).strip()
    ref_op = tokenizer.decode([toks[i] for i in pair.roles["operator"]]).strip()
    assert cf_op != ref_op
    # Outside the operator (and for accumulation, the asked object/person), the prompts agree.
    diff = [i for i, (x, y) in enumerate(zip(toks, pair.counterfactual_token_ids)) if x != y]
    if template.form != "accumulation":
        assert set(diff) <= set(pair.roles["operator"])


def test_seeded_sampling_is_deterministic(tokenizer):
    t = FIGURE10[9]
    assert render_pair(t, 2, 3, tokenizer, random.Random(7)) == render_pair(t, 2, 3, tokenizer, random.Random(7))


def test_answer_not_a_single_token(tokenizer):
    with pytest.raises(PromptError, match="not a single token"):  # where one token is asked for (the templates)
        make_pair(tokenizer, "3 + 9 = ", "3 @ 9 = ", "12", max_answer_tokens=1)
    assert len(make_pair(tokenizer, "3 + 9 = ", "3 @ 9 = ", "12").answer_ids) == 2  # any answer otherwise (issue 42)
    with pytest.raises(PromptError, match="does not continue the prompt's tokens"):
        make_pair(tokenizer, "3 + 9 = ", "3 @ 9 = ", "x")  # " x" is one token: it swallows the prompt's last space


def test_unequal_lengths(tokenizer):
    with pytest.raises(PromptError, match="different token lengths"):
        make_pair(tokenizer, "3 + 4 = ", "3 nothing at all 4 = ", "7")


def test_prefix_length_only_on_a_clean_token_boundary(tokenizer):
    ids = encode(tokenizer, "1 + 2 = 3\n4 + 1 = ")
    assert prefix_length_of(tokenizer, "1 + 2 = 3\n", ids) == len(encode(tokenizer, "1 + 2 = 3\n"))
    assert prefix_length_of(tokenizer, "", ids) == 0
    assert prefix_length_of(tokenizer, "1 + 2 = 3\nthe", encode(tokenizer, "1 + 2 = 3\nthere")) == 0  # merged


def test_pair_json_roundtrip(tokenizer):
    pair = render_pair(FIGURE8["addition"][0], 3, 4, tokenizer, random.Random(0))
    assert PromptPair.from_json(pair.to_json()) == pair


def test_batch_right_pads(tokenizer, tiny_llama):
    pairs = [render_pair(t, 2, 3, tokenizer, random.Random(0)) for t in FIGURE8["addition"][:3]]
    batch = PairBatch.from_pairs(pairs, pad_token_id=0)
    for i, p in enumerate(pairs):
        assert batch.end[i] == len(p.reference_token_ids) - 1
        assert batch.reference[i, : len(p.reference_token_ids)].tolist() == list(p.reference_token_ids)
    assert torch.equal(as_batch(pairs, tiny_llama).end, batch.end)
    again = as_batch(batch, tiny_llama)  # a batch already made is moved to the model's device, its tensors unchanged
    for name in ("reference", "counterfactual", "end", "answer"):
        assert getattr(again, name).device == torch.device(tiny_llama.cfg.device)
        assert torch.equal(getattr(again, name), getattr(batch, name)), name


def test_random_model_gets_nothing_right_clear_error(tiny_llama):
    with pytest.raises(PromptError, match="answered none"):
        build_pairs(tiny_llama, PairConfig(task="addition", n_pairs=4, max_candidates=24, few_shot="off"))


def test_build_pairs_keywords_and_unfiltered(tiny_llama):
    ps = build_pairs(tiny_llama, "subtraction", n_pairs=5, filter_correct=False, few_shot="on")
    assert len(ps) == 5 and all(p.operation == "subtraction" for p in ps)
    assert build_pairs(tiny_llama, PairConfig(task="subtraction", n_pairs=5, filter_correct=False, few_shot="on")).pairs == ps.pairs


def test_shared_prefix_logits_equal_full_forward(tiny_llama, tokenizer):
    rng = random.Random(0)
    pairs = [render_pair(t, a, 2, tokenizer, rng) for t in FIGURE8["addition"][:3] for a in (1, 3)]
    assert all(p.prefix_length > 0 for p in pairs)
    shared = pair_logits(tiny_llama, pairs)
    for i, p in enumerate(pairs):
        full = tiny_llama(torch.tensor([p.reference_token_ids]))[0, -1]
        torch.testing.assert_close(shared[i], full, atol=1e-4, rtol=0)
    cf = pair_logits(tiny_llama, pairs, "counterfactual")
    full_cf = tiny_llama(torch.tensor([pairs[0].counterfactual_token_ids]))[0, -1]
    torch.testing.assert_close(cf[0], full_cf, atol=1e-4, rtol=0)


@pytest.mark.parametrize("policy", ["keep", "counterfactual"])
def test_candidates_of_a_template_share_one_prefix(tiny_llama, policy):
    ps = build_pairs(tiny_llama, "addition_extra", n_pairs=24, filter_correct=False, few_shot="on", prefix_policy=policy)
    by_template: dict[str, set] = {}
    for p in ps:
        n = p.prefix_length
        assert n > 0
        by_template.setdefault(p.template_id, set()).add((p.reference_token_ids[:n], p.counterfactual_token_ids[:n]))
    assert len(by_template) > 1 and all(len(v) == 1 for v in by_template.values())
    for (ref, cf), in by_template.values():
        assert (ref != cf) == (policy == "counterfactual")  # counterfactual examples, of the same token length


def test_counterfactual_prefixes_have_equal_token_length(tokenizer):
    from circuits.data.pairs import few_shot_prefixes

    rng = random.Random(0)
    for t in [*FIGURE8["addition"], *FIGURE10]:
        ref, cf = few_shot_prefixes(t, tokenizer, rng, "counterfactual")
        assert ref != cf and len(encode(tokenizer, ref)) == len(encode(tokenizer, cf))
        kept = few_shot_prefixes(t, tokenizer, rng, "keep")
        assert kept[0] == kept[1]


@pytest.mark.parametrize("operation", OPERATIONS)
def test_operand_counterfactual_changes_the_answer(tiny_llama, tokenizer, operation):
    """The operand counterfactual: one operand changed, everything else kept, so every pair's counterfactual prompt has an
    answer of its own, another number (the paper's operator counterfactual asks for none)."""
    ps = build_pairs(tiny_llama, operation, n_pairs=12, filter_correct=False, few_shot="on", counterfactual="operand",
                     progress=False)
    assert len(ps) == 12
    for p in ps:
        a, b, c = p.operands
        assert p.counterfactual_answer and p.counterfactual_answer != p.answer
        cf_answer = answer_of(p.counterfactual, p.roles, tokenizer, p, operation)
        assert cf_answer == int(p.counterfactual_answer) != c
        assert encode(tokenizer, p.counterfactual + p.counterfactual_answer)[-1] != p.answer_token_id
        assert len(p.reference_token_ids) == len(p.counterfactual_token_ids)
    paper = build_pairs(tiny_llama, operation, n_pairs=4, filter_correct=False, few_shot="on", progress=False)
    assert all(p.counterfactual_answer == "" for p in paper)  # the paper's stays the default


def answer_of(text, roles, tokenizer, pair, operation):
    """The answer the counterfactual prompt asks for, from its own operand tokens (the reference's role positions)."""
    from circuits.data.templates import compute_answer

    ids = pair.counterfactual_token_ids
    a, b = (int(tokenizer.decode([ids[i] for i in roles[r]]).strip()) for r in ("A", "B"))
    changed = [int(a != pair.operands[0]), int(b != pair.operands[1])]
    assert sum(changed) == 1  # exactly one operand changed
    return compute_answer(operation, a, b)


def test_operand_counterfactual_keeps_the_prefix():
    with pytest.raises(ValueError, match="--prefix-policy keep"):
        PairConfig(task="addition", counterfactual="operand", prefix_policy="counterfactual")
    with pytest.raises(ValueError, match="counterfactual must be one of operator, operand, random"):
        PairConfig(task="addition", counterfactual="word")
