import pytest
import torch

from circuits.attention import ROLE_NAMES, attention_by_role, attention_html, end_attention, role_of_positions
from tiny_validate import smollm2_tokenizer, tiny_model, tiny_pairs


def test_roles_from_template_spans():
    p = tiny_pairs()[0]
    labels = role_of_positions(p)
    tok = smollm2_tokenizer()
    strs = tok.convert_ids_to_tokens(list(p.reference_token_ids))
    a, b = str(p.operands[0]), str(p.operands[1])
    assert [strs[i] for i, r in enumerate(labels) if r == "A"][-1].strip("Ġ") == a
    assert [strs[i] for i, r in enumerate(labels) if r == "B"][-1].strip("Ġ") == b
    assert labels[: p.prefix_length] == ["few_shot"] * p.prefix_length
    assert labels[-1] == "answer_prefix"
    assert "operator" in labels


def test_roles_sum_to_one_per_prompt():
    model, pairs = tiny_model(), tiny_pairs()
    heads = [(0, 0), (1, 3), (3, 2)]
    ra = attention_by_role(model, pairs, heads)
    assert ra.per_prompt.shape == (len(pairs), len(heads), len(ROLE_NAMES))
    torch.testing.assert_close(ra.per_prompt.sum(-1), torch.ones(len(pairs), len(heads)), atol=1e-5, rtol=0)
    assert set(ra.dominant()) == {"0.0", "1.3", "3.2"}


def test_end_attention_matches_cache():
    model, pairs = tiny_model(), tiny_pairs()
    att = end_attention(model, pairs[:2], [(2, 1)])
    p = pairs[1]
    _, cache = model.run_with_cache(torch.tensor([p.reference_token_ids]))
    row = cache["blocks.2.attn.hook_pattern"][0, 1, -1]
    torch.testing.assert_close(att[1, 0, : len(row)], row.float(), atol=1e-6, rtol=0)


def test_attention_html_is_offline(tmp_path):
    model, pairs = tiny_model(), tiny_pairs()
    page = attention_html(model, [pairs[0], "1 + 2 ="], [(0, 1), (2, 3)], tmp_path / "a.html", last_tokens=12)
    assert (tmp_path / "a.html").exists()
    assert "unpkg.com" not in page and "cdn." not in page.lower()
    assert "L2H3" in page


@pytest.mark.slow
def test_smollm2_roles_sum_to_one():
    from circuits.prompts import PairConfig, build_pairs
    from tiny_validate import smollm2

    model = smollm2()
    pairs = build_pairs(model, PairConfig(task="subtraction", n_pairs=4, filter_correct=False)).pairs
    ra = attention_by_role(model, pairs, [(20, 8), (14, 2)])
    torch.testing.assert_close(ra.per_prompt.sum(-1), torch.ones(len(pairs), 2), atol=1e-4, rtol=0)
