"""A model tuned by Precise SFT leaves the toolkit as a Hugging Face checkpoint that transformers loads with the tuned
HookedTransformer's logits; bad input is one clear line."""

import pytest
import torch

from circuits.cli import main as cli
from circuits.io import save_torch
from circuits.sft import plan as hm
from circuits.sft import train as ft
from circuits.sft.data import Example, tokenize_examples
from circuits.sft.delta import extract_delta
from circuits.sft.export import export_model

TEXT = "1 + 2 = 3\n4 + 4 = 8\n3 + 5 = 8\n7 + 1 = "


def _tune(arch, tmp_path, heads=((1, 0), (1, 3), (2, 1)), mlps=()):
    """A real (short) Precise SFT run on a tiny model of ``arch``; returns the tuned model and its delta.pt."""
    from helpers import tiny_dir, tiny_model

    model = tiny_model(arch)
    examples = tokenize_examples(model.tokenizer, [Example(f"{a} + {b} = ", f"{a + b}\n") for a, b in
                                                   zip(range(1, 9), range(3, 11))], max_length=32)
    config = ft.FinetuneConfig(model=str(tiny_dir(arch)), heads=heads, mlps=mlps, lr=1e-2, batch_size=4,
                               micro_batch_size=2, epochs=1, max_steps=3, warmup_ratio=0.0, checkpoint_every=10)
    ft.finetune(model, examples, config, tmp_path / "ft", progress=False)
    return model, tmp_path / "ft" / "delta.pt"


def _logits(model, ids):
    with torch.no_grad():
        return model(ids) if not hasattr(model, "config") else model(ids).logits


@pytest.mark.parametrize("arch,mlps", [("llama", (0,)), ("qwen2", ())])
def test_exported_model_equals_tuned_model_in_transformers(tmp_path, arch, mlps):
    from transformers import AutoModelForCausalLM

    from helpers import tiny_dir

    tuned, delta = _tune(arch, tmp_path, mlps=mlps)
    out = export_model(delta, tmp_path / "my-model")
    assert {"model.safetensors", "config.json", "tokenizer.json", "circuits_export.json"} <= {p.name for p in out.iterdir()}
    exported = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32).eval()
    base = AutoModelForCausalLM.from_pretrained(tiny_dir(arch), dtype=torch.float32).eval()
    assert type(exported) is type(base)  # the original architecture and parameter names
    assert set(exported.state_dict()) == set(base.state_dict())
    ids = torch.tensor([tuned.tokenizer(TEXT).input_ids])
    theirs, ours = _logits(exported, ids), _logits(tuned, ids)
    assert (theirs - ours).abs().max().item() < 1e-4
    assert (theirs - _logits(base, ids)).abs().max().item() > 1e-2  # the tuning shows, so equality bites
    # Untuned parameters are the base model's, bit for bit.
    changed = {k for k, v in exported.state_dict().items() if not torch.equal(v, base.state_dict()[k])}
    assert changed and all(".self_attn." in k or ".mlp." in k for k in changed)
    assert all(k.split(".")[2] in {"1", "2"} or ".mlp." in k for k in changed)


def test_placeholder_biases_are_not_tuned(tmp_path):
    """TransformerLens's zero biases for an architecture without them (Llama) stay out of the plan; real ones (Qwen2's
    Q/K/V biases) are tuned."""
    from helpers import tiny_model

    llama = hm.plan_tuning(tiny_model("llama"), [(1, 0)], [0])
    assert not any(n.split(".")[-1].startswith(("b_", "_b_")) for n in llama.names)
    assert not any(n.endswith(("b_U", "b_in", "b_O")) for n in hm.full_plan(tiny_model("llama")).names)
    qwen = hm.plan_tuning(tiny_model("qwen2"), [(1, 0)])
    assert {"blocks.1.attn.b_Q", "blocks.1.attn._b_K", "blocks.1.attn._b_V"} <= set(qwen.names)


def test_old_delta_with_tuned_placeholder_biases(tmp_path):
    """A delta from before placeholders were left alone: Llama's own attention_bias option carries its biases."""
    from transformers import AutoModelForCausalLM

    from helpers import tiny_dir, tiny_model

    model = tiny_model("llama")
    plan = hm.TuningPlan((hm.TunedTensor("blocks.1.attn.W_Q", (2,)), hm.TunedTensor("blocks.1.attn.b_Q", (2,))))
    with torch.no_grad():
        model.blocks[1].attn.b_Q[2] += 0.3
        model.blocks[1].attn.W_Q[2] *= 1.1
    save_torch(extract_delta(model, plan, {"model": str(tiny_dir("llama"))}), tmp_path / "delta.pt")
    exported = AutoModelForCausalLM.from_pretrained(export_model(tmp_path / "delta.pt", tmp_path / "out")).eval()
    assert exported.config.attention_bias
    ids = torch.tensor([model.tokenizer(TEXT).input_ids])
    assert (_logits(exported, ids) - _logits(model, ids)).abs().max().item() < 1e-4
    mlp_plan = hm.TuningPlan((hm.TunedTensor("blocks.0.mlp.b_in", None),))
    with torch.no_grad():
        model.blocks[0].mlp.b_in += 0.1
    save_torch(extract_delta(model, mlp_plan, {"model": str(tiny_dir("llama"))}), tmp_path / "mlp.pt")
    with pytest.raises(ValueError, match="blocks.0.mlp.b_in is not zero.*fine-tune again to export"):
        export_model(tmp_path / "mlp.pt", tmp_path / "out2")


def test_bad_input_is_one_clear_line(tmp_path, capsys):
    from helpers import tiny_dir, tiny_model

    model = tiny_model("llama")
    plan = hm.plan_tuning(model, [(1, 0)])
    save_torch(extract_delta(model, plan, {"model": str(tiny_dir("llama"))}), tmp_path / "delta.pt")
    (tmp_path / "corrupt.pt").write_bytes(b"not a torch file" * 10)
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "x").write_text("keep me")
    cases = {
        # Another model: a different size, and one of the same shapes whose weights are unrelated.
        "fewer-layers": (["--delta", str(tmp_path / "delta.pt"), "--model", str(tiny_dir("llama", n_layers=1))],
                   "does not have: it was made for another model"),
        "same-shape": (["--delta", str(tmp_path / "delta.pt"), "--model", str(tiny_dir("llama", seed=1))],
                       "far more than fine-tuning moves it: the delta was made for another model"),
        "corrupt": (["--delta", str(tmp_path / "corrupt.pt")], "cannot be read as a delta file"),
        "missing": (["--delta", str(tmp_path / "nope.pt")], "delta file not found"),
    }
    for name, (args, message) in cases.items():
        assert cli(["export", *args, "--out", str(tmp_path / f"out-{name}")]) == 2
        err = capsys.readouterr().err
        lines = [line for line in err.replace("\r", "\n").splitlines() if "error" in line.lower()]
        assert len(lines) == 1 and lines[0].startswith("circuits export: error:") and message in lines[0], (name, err)
        assert "Traceback" not in err
        assert not (tmp_path / f"out-{name}").exists()  # nothing half-written
    assert cli(["export", "--delta", str(tmp_path / "delta.pt"), "--out", str(tmp_path / "busy")]) == 2
    assert "already exists and is not an empty folder" in capsys.readouterr().err
    assert (tmp_path / "busy" / "x").read_text() == "keep me"
    assert cli(["export", "--delta", str(tmp_path / "delta.pt"), "--out", str(tmp_path / "fine")]) == 0
    assert (tmp_path / "fine" / "model.safetensors").is_file()
