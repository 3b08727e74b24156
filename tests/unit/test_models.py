"""Loading: local Hugging Face folders equal transformers' logits; bad sources are one clear error."""

import pytest
import torch

from circuits.models import ModelLoadError, load_hf_reference, load_model


def _max_logit_diff(model, hf, tokenizer, text="1 + 2 = 3\n4 + 4 = 8\n3 + 5 = "):
    ids = torch.tensor([tokenizer(text).input_ids])
    with torch.no_grad():
        return (model(ids) - hf(ids).logits).abs().max().item()


@pytest.mark.parametrize("arch", ["llama", "mistral"])
def test_local_hf_dir_matches_transformers(tokenizer, arch):
    from helpers import tiny_dir

    model = load_model(tiny_dir(arch))
    assert model.cfg.n_key_value_heads == 2 and model.cfg.n_heads == 4 and not model.training
    assert _max_logit_diff(model, load_hf_reference(tiny_dir(arch)), tokenizer) < 1e-4


def test_bf16_and_no_fold():
    from helpers import tiny_dir

    model = load_model(tiny_dir("llama"), dtype="bf16", fold_ln=False)
    assert model.cfg.dtype == torch.bfloat16 and next(model.parameters()).dtype == torch.bfloat16


def test_unknown_name_is_one_clear_error():
    with pytest.raises(ModelLoadError, match="not-a-model.*Accepted: 'smollm2'"):
        load_model("not-a-model")


def test_missing_gguf_file(tmp_path):
    with pytest.raises(ModelLoadError, match="GGUF file not found"):
        load_model(tmp_path / "missing.gguf")


def test_dir_without_config(tmp_path):
    with pytest.raises(ModelLoadError, match="no config.json"):
        load_model(tmp_path)


def test_unsupported_architecture(tmp_path, tokenizer):
    from transformers import GPT2Config, GPT2LMHeadModel

    GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=len(tokenizer))).save_pretrained(tmp_path)
    with pytest.raises(ModelLoadError, match="GPT2LMHeadModel.*LlamaForCausalLM"):
        load_model(tmp_path)
