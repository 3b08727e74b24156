"""SmolLM2 tuned by Precise SFT (a few real steps on its key heads) leaves the toolkit: the exported Hugging Face
checkpoint loads in transformers as a LlamaForCausalLM with the tuned HookedTransformer's logits."""

import torch

from circuits.models import load_model
from circuits.sft import train as ft
from circuits.sft.data import Example, tokenize_examples
from circuits.sft.export import export_model


def test_exported_smollm2_equals_the_tuned_model(tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = load_model("smollm2", device="cpu")
    examples = tokenize_examples(model.tokenizer, [Example(f"{a} + {b} = ", f"{a + b}\n") for a, b in
                                                   zip(range(1, 5), range(3, 7))], max_length=24)
    config = ft.FinetuneConfig(model="smollm2", heads=((20, 8), (14, 2), (18, 5)), lr=1e-3, batch_size=2,
                               micro_batch_size=2, epochs=1, max_steps=2, warmup_ratio=0.0, checkpoint_every=10)
    ft.finetune(model, examples, config, tmp_path / "ft", progress=False)
    out = export_model(tmp_path / "ft" / "delta.pt", tmp_path / "smollm2-precise")
    exported = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32).eval()
    assert type(exported).__name__ == "LlamaForCausalLM" and exported.config.tie_word_embeddings
    tokenizer = AutoTokenizer.from_pretrained(out)
    ids = torch.tensor([tokenizer("1 + 2 = 3\n4 + 4 = 8\n3 + 5 = ").input_ids])
    assert ids.tolist() == [model.tokenizer("1 + 2 = 3\n4 + 4 = 8\n3 + 5 = ").input_ids]
    with torch.no_grad():
        theirs, ours = exported(ids).logits, model(ids)
        base = load_model("smollm2", device="cpu")(ids)
    assert (theirs - ours).abs().max().item() < 1e-4
    assert (theirs - base).abs().max().item() > 1e-3  # the tuning shows
