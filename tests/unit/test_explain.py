"""Attention by token role and the MLP logit lens, against direct computations from a plain cache."""

import functools

import pytest
import torch
import torch.nn.functional as F

from circuits.data.pairs import build_pairs
from circuits.explain import AttentionRoles, LogitLens, attention_html, attention_roles, logit_lens, role_attention
from circuits.explain.attention import ROLE_NAMES, end_attention, role_of_positions
from circuits.explain.logit_lens import mlp_lens, number_tokens, operand_tokens, top_number_tokens, writing_start


@functools.lru_cache(maxsize=1)
def _pairs():
    from helpers import tiny_model

    model = tiny_model()
    return (build_pairs(model, "addition", n_pairs=8, filter_correct=False, few_shot="on").pairs
            + build_pairs(model, "division", n_pairs=4, filter_correct=False, few_shot="on").pairs)


@pytest.fixture(scope="module")
def pairs(tiny_llama):
    return _pairs()


def test_roles_from_template_spans(pairs, tokenizer):
    p = pairs[0]
    labels = role_of_positions(p)
    strs = tokenizer.convert_ids_to_tokens(list(p.reference_token_ids))
    a, b = str(p.operands[0]), str(p.operands[1])
    assert [strs[i] for i, r in enumerate(labels) if r == "A"][-1].strip("Ġ") == a
    assert [strs[i] for i, r in enumerate(labels) if r == "B"][-1].strip("Ġ") == b
    assert labels[: p.prefix_length] == ["few_shot"] * p.prefix_length
    assert labels[-1] == "answer_prefix" and "operator" in labels


def test_roles_sum_to_one_and_group_by_operation(tiny_llama, pairs, tmp_path):
    heads = [(0, 0), (1, 3), (2, 2)]
    ra = role_attention(tiny_llama, pairs, heads)
    assert ra.per_prompt.shape == (len(pairs), len(heads), len(ROLE_NAMES))
    torch.testing.assert_close(ra.per_prompt.sum(-1), torch.ones(len(pairs), len(heads)), atol=1e-5, rtol=0)
    assert set(ra.dominant()) == {"0.0", "1.3", "2.2"}
    roles = attention_roles(tiny_llama, pairs, heads)
    assert list(roles.by_operation) == ["addition", "division"]
    torch.testing.assert_close(torch.tensor(roles.by_operation["division"]["mean"]), ra.per_prompt[8:].mean(0))
    back = AttentionRoles.load(roles.save(tmp_path / "roles"))
    assert back.by_operation == roles.by_operation and back.heads == roles.heads


def test_end_attention_matches_cache(tiny_llama, pairs):
    att = end_attention(tiny_llama, pairs[:2], [(2, 1)])
    p = pairs[1]
    _, cache = tiny_llama.run_with_cache(torch.tensor([p.reference_token_ids]))
    row = cache["blocks.2.attn.hook_pattern"][0, 1, -1]
    torch.testing.assert_close(att[1, 0, : len(row)], row.float(), atol=1e-6, rtol=0)


def test_attention_html_is_offline(tiny_llama, pairs, tmp_path):
    page = attention_html(tiny_llama, [pairs[0], "1 + 2 ="], [(0, 1), (2, 3)], tmp_path / "a.html", last_tokens=12)
    assert (tmp_path / "a.html").exists()
    assert "unpkg.com" not in page and "cdn." not in page.lower() and "L2H3" in page


def test_attention_page_keeps_positions_and_shows_spaces(tiny_llama, pairs, tmp_path):
    from circuits.explain.attention import AttentionPage
    from circuits.viz.page import ASSETS, parse_views


    p = pairs[0]
    n = len(p.reference_token_ids)
    page = attention_html(tiny_llama, [p, p], [(0, 1), (2, 3)], last_tokens=6)
    assert isinstance(page, AttentionPage) and page.count("var CircuitsVis=") <= 1
    assert len(repr(page)) < 100 and "2 circuitsvis views" in repr(page) and page._repr_html_().startswith("<iframe")
    views = parse_views(page)
    assert len(views) == 2 and views[0][0] == p.reference[-300:]  # the header keeps the prompt's newlines
    tokens = views[0][2]["tokens"]
    assert [int(t.split(":", 1)[0]) for t in tokens] == list(range(n - 6, n))  # positions of the prompt, not 0..5
    shown = [t.split(":", 1)[1] for t in tokens]
    assert all(t.strip() for t in shown) and not any(" " in t for t in shown)
    strs = tiny_llama.to_str_tokens(torch.tensor(p.reference_token_ids))[-6:]
    assert [t.replace("␣", " ").replace("↵", "\n") for t in shown] == list(strs)
    written = attention_html(tiny_llama, [p], [(0, 1)], tmp_path / "views" / "a.html")
    assert "var CircuitsVis=" not in written and (tmp_path / "views" / ASSETS).is_dir()


def _direct(model, pair, layer):
    _, cache = model.run_with_cache(torch.tensor([pair.reference_token_ids]))
    mid = cache[f"blocks.{layer}.hook_resid_mid"][0, -1]
    post = cache[f"blocks.{layer}.hook_resid_post"][0, -1]
    a, b = operand_tokens(pair)
    W = model.W_U
    cos = lambda x, t: F.cosine_similarity(x, W[:, t], dim=0)  # noqa: E731
    return cos(mid, a), cos(mid, b), cos(post - mid, pair.answer_token_id)


@torch.no_grad()
def test_cosines_equal_direct_computation(tiny_llama, pairs):
    lens = mlp_lens(tiny_llama, pairs)
    assert lens.in_A.shape == (len(pairs), tiny_llama.cfg.n_layers)
    for i in (0, 5):
        for layer in range(tiny_llama.cfg.n_layers):
            a, b, c = _direct(tiny_llama, pairs[i], layer)
            assert lens.in_A[i, layer] == pytest.approx(float(a), abs=1e-5)
            assert lens.in_B[i, layer] == pytest.approx(float(b), abs=1e-5)
            assert lens.delta_C[i, layer] == pytest.approx(float(c), abs=1e-5)


@torch.no_grad()
def test_other_numbers_mean(tiny_llama, pairs):
    lens = mlp_lens(tiny_llama, pairs[:1])
    p = pairs[0]
    _, cache = tiny_llama.run_with_cache(torch.tensor([p.reference_token_ids]))
    delta = cache["blocks.2.hook_mlp_out"][0, -1]
    ids = [t for t in number_tokens(tiny_llama.tokenizer, 99) if t != p.answer_token_id]
    expect = F.cosine_similarity(delta[None], tiny_llama.W_U[:, ids].T, dim=-1).mean()
    assert lens.delta_other[0, 2] == pytest.approx(float(expect), abs=1e-5)


def test_lens_result_and_top_tokens(tiny_llama, pairs, tmp_path):
    nums = number_tokens(tiny_llama.tokenizer, 20)
    assert {"0", "7"} <= set(nums.values())
    top = top_number_tokens(tiny_llama, pairs[0], k=3)
    assert len(top) == tiny_llama.cfg.n_layers and len(top[0]) == 3 and top[0][0][1] >= top[0][1][1]
    lens = logit_lens(tiny_llama, pairs[:8], pairs[0], k=3)
    assert lens.top_tokens == top and lens.means == mlp_lens(tiny_llama, pairs[:8]).means()
    back = LogitLens.load(lens.save(tmp_path / "lens"))
    assert back.means == lens.means and back.writing_start == lens.writing_start
    assert [[t for t, _ in row] for row in back.top_tokens] == [[t for t, _ in row] for row in top]
    L = tiny_llama.cfg.n_layers  # both panels' layer axes end half a layer out: no tick at -1 or L
    fig = lens.figure()
    assert [tuple(fig.layout[a].range) for a in ("xaxis", "xaxis2")] == [(-0.5, L - 0.5)] * 2


def test_writing_start():
    assert writing_start([0, 0, 0.1, 0.2, 0.3], [0, 0, 0, 0, 0]) == 2
    assert writing_start([0, 0, 0], [0, 0, 0]) is None
