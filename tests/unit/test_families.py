"""Every family the loader accepts offline (Llama 2/3.x, Mistral, Qwen2, Qwen3, Gemma 2/3) loads from a local
folder through TransformerLens's own conversion with transformers' logits, and the END-only engine equals the
plain ``run_with_hooks`` loop on it in both modes. Each tiny model switches on what its family adds
(``helpers.tiny_hf_model``): RoPE scaling, sliding windows, Q/K/V biases, QK norm, norms after attention and
MLP, soft-capping, local/global layers."""

import pytest
import torch

from circuits.data.pairs import PairBatch
from circuits.patching import all_components, sweep
from circuits.patching.engines.end_sweep_plain import sweep_plain
from circuits.models import load_hf_reference, load_model

FAMILY_NAMES = ("llama", "llama3", "mistral", "mistral_window", "qwen2", "qwen3", "gemma2", "gemma3")


def test_family_list_is_the_factory_list():
    from helpers import FAMILIES

    assert FAMILY_NAMES == FAMILIES


@pytest.mark.parametrize("arch", FAMILY_NAMES)
def test_logits_equal_transformers(family_models, tokenizer, arch):
    from helpers import tiny_dir

    model = family_models(arch)
    hf = load_hf_reference(tiny_dir(arch))
    ids = torch.tensor([tokenizer("1 + 2 = 3\n4 + 4 = 8\n3 + 5 = 8\n7 + 1 = 8\n2 + 6 = ").input_ids])
    assert ids.shape[1] > 3 * 6  # longer than the sliding windows, so local layers mask
    with torch.no_grad():
        ours, theirs = model(ids), hf(ids).logits
    assert (ours - theirs).abs().max().item() < 1e-4
    assert theirs.std() > 0.1  # the model is not degenerate


def test_family_features_are_switched_on(family_models):
    """Each tiny model really has what its family adds (else the tests above would prove less)."""
    cfg = {arch: family_models(arch).cfg for arch in FAMILY_NAMES}
    assert cfg["llama3"].use_NTK_by_parts_rope and cfg["llama3"].NTK_by_parts_factor == 8.0
    assert cfg["mistral_window"].window_size == 6 and set(cfg["mistral_window"].attn_types) == {"local"}
    assert family_models("qwen2").blocks[0].attn.b_Q.abs().max() > 0
    assert cfg["qwen3"].use_qk_norm and cfg["gemma3"].use_qk_norm
    assert cfg["gemma2"].attn_scores_soft_cap == 2.0 and cfg["gemma2"].output_logits_soft_cap == 1.5
    assert cfg["gemma2"].attn_scale == pytest.approx(24**0.5)
    for arch in ("gemma2", "gemma3"):
        assert cfg[arch].use_normalization_before_and_after and cfg[arch].attn_types == ["local", "global", "local"]
    attn = family_models("gemma3").blocks
    assert not torch.equal(attn[0].attn.rotary_cos, attn[1].attn.rotary_cos)  # local and global RoPE bases


def test_local_folder_named_after_another_family(tmp_path):
    """TransformerLens picks some families by words in a name; a local folder's name must not matter."""
    from helpers import save_tiny

    folder = save_tiny(tmp_path / "my-llama-finetune", "qwen2")
    model = load_model(folder, device="cpu")
    assert model.cfg.original_architecture == "Qwen2ForCausalLM"


@pytest.mark.parametrize("mode", ["path", "activation"])
@pytest.mark.parametrize("arch", FAMILY_NAMES)
def test_engine_equals_plain_loop(family_models, tokenizer, arch, mode):
    from test_engine import _assert_equal, _pairs

    model = family_models(arch)
    batch = PairBatch.from_pairs(_pairs(tokenizer, 5), pad_token_id=0)
    assert int(batch.end.min()) > 6  # END sees past the sliding window
    result = sweep(model, batch, mode, progress=False)
    base, plain = sweep_plain(model, batch, mode, all_components(model))
    _assert_equal(result, plain, 1e-4)
    for f in ("logit", "logit_diff", "prob", "cf_logit"):
        torch.testing.assert_close(getattr(result.baseline, f), getattr(base, f), atol=1e-4, rtol=0, msg=f)
    assert (result.head_logit - result.baseline.logit[None, None]).abs().max() > 1e-2
