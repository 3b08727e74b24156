import pytest
import torch
import torch.nn.functional as F

from circuits.logit_lens import mlp_lens, number_tokens, operand_tokens, top_number_tokens, writing_start
from tiny_validate import tiny_model, tiny_pairs


def direct(model, pair, layer):
    _, cache = model.run_with_cache(torch.tensor([pair.reference_token_ids]))
    mid = cache[f"blocks.{layer}.hook_resid_mid"][0, -1]
    post = cache[f"blocks.{layer}.hook_resid_post"][0, -1]
    a, b = operand_tokens(pair)
    W = model.W_U
    cos = lambda x, t: F.cosine_similarity(x, W[:, t], dim=0)  # noqa: E731
    return cos(mid, a), cos(mid, b), cos(post - mid, pair.answer_token_id)


@torch.no_grad()
def test_cosines_equal_direct_computation():
    model, pairs = tiny_model(), tiny_pairs()
    lens = mlp_lens(model, pairs)
    assert lens.in_A.shape == (len(pairs), model.cfg.n_layers)
    for i in (0, 5):
        for layer in range(model.cfg.n_layers):
            a, b, c = direct(model, pairs[i], layer)
            assert lens.in_A[i, layer] == pytest.approx(float(a), abs=1e-5)
            assert lens.in_B[i, layer] == pytest.approx(float(b), abs=1e-5)
            assert lens.delta_C[i, layer] == pytest.approx(float(c), abs=1e-5)


def test_other_numbers_mean():
    model, pairs = tiny_model(), tiny_pairs()
    lens = mlp_lens(model, pairs[:1])
    p = pairs[0]
    _, cache = model.run_with_cache(torch.tensor([p.reference_token_ids]))
    layer = 2
    delta = cache[f"blocks.{layer}.hook_mlp_out"][0, -1]
    ids = [t for t in number_tokens(model.tokenizer, 99) if t != p.answer_token_id]
    expect = F.cosine_similarity(delta[None], model.W_U[:, ids].T, dim=-1).mean()
    assert lens.delta_other[0, layer] == pytest.approx(float(expect), abs=1e-5)


def test_number_tokens_and_top():
    model, pairs = tiny_model(), tiny_pairs()
    nums = number_tokens(model.tokenizer, 20)
    assert {"0", "7"} <= set(nums.values())
    top = top_number_tokens(model, pairs[0], k=3)
    assert len(top) == model.cfg.n_layers and len(top[0]) == 3
    assert top[0][0][1] >= top[0][1][1]


def test_writing_start():
    assert writing_start([0, 0, 0.1, 0.2, 0.3], [0, 0, 0, 0, 0]) == 2
    assert writing_start([0, 0, 0], [0, 0, 0]) is None
