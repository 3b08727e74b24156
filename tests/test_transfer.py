import pytest

from circuits.ablation import compute_means
from circuits.transfer import letter_ids, mmlu_accuracy, mmlu_items, synthetic_set, transfer_knockout
from circuits.transfer_data import MultipleChoice
from tiny_validate import smollm2_tokenizer, tiny_model, tiny_pairs


@pytest.mark.parametrize("task", ["multi_digit", "decimal", "time_span"])
def test_synthetic_sets_target_first_answer_token(task):
    tok = smollm2_tokenizer()
    items = synthetic_set(tok, task, 5, seed=1)
    assert len(items) == 5
    for it in items:
        assert it.prefix_length > 0 and it.reference == it.counterfactual
        full = tok(it.reference + it.answer).input_ids
        assert full[len(it.reference_token_ids)] == it.answer_token_id


def test_transfer_knockout_no_heads_is_identity():
    model = tiny_model()
    means = compute_means(model, tiny_pairs(), pooled=True)
    sets = {"multi_digit": synthetic_set(model.tokenizer, "multi_digit", 4)}
    res = transfer_knockout(model, sets, means, [])
    assert res["multi_digit"]["accuracy_before"] == res["multi_digit"]["accuracy_after"]


def test_mmlu_scoring():
    model = tiny_model()
    q = MultipleChoice("philosophy", "Who wrote the Republic?", ("Plato", "Kant", "Hume", "Locke"), "A")
    items = mmlu_items(model.tokenizer, [q])
    assert items[0].answer_token_id == letter_ids(model.tokenizer)[0]
    means = compute_means(model, tiny_pairs(), pooled=True)
    assert mmlu_accuracy(model, items, means) in (0.0, 1.0)
