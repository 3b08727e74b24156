"""The cross-line fine-tuning check (issue 23): run it in each virtualenv with the same MODEL and OUT, one after the
other. Each run trains 4 fp32 steps of Precise SFT (lr 2e-5, 4 heads, 16 addition examples) into OUT/<backend>; the
second run compares the two delta.pt files (tuned values within 1e-5) and applies the other line's delta.pt onto its
own fresh model (logits within 1e-4 of the other line's tuned model). Exits 1 when a check fails.

    .venv-tl4/bin/python tests/backends/sft_cross_line.py smollm2 /tmp/sft-cross
    .venv/bin/python     tests/backends/sft_cross_line.py smollm2 /tmp/sft-cross

Measured (SmolLM2-135M, 2 shared CPU cores): tuned values 7.75e-06 apart (the largest move from the base, 5.59e-05);
a delta applied across lines gives logits 4.4e-05 / 4.6e-05 from the other line's tuned model.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import torch

from circuits.models import backend, load_model
from circuits.sft import train as ft
from circuits.sft.data import Example, tokenize_examples
from circuits.sft.delta import apply_delta, extract_delta
from circuits.sft.plan import TuningPlan

SMOLLM2_HEADS = ((21, 2), (20, 6), (14, 1), (21, 7))
TINY_HEADS = ((1, 0), (1, 3), (2, 1))
TEXT = "12 + 31 = 43\n15 + 33 = "


def main(model_name: str, out: str) -> int:
    out_dir = Path(out)
    out_dir.mkdir(parents=True, exist_ok=True)
    line = backend.installed().name
    t0 = time.perf_counter()
    model = load_model(model_name, device="cpu")
    print(f"{line}: {type(model).__name__} loaded in {time.perf_counter() - t0:.1f} s")
    pairs = zip(range(11, 27), range(30, 46))
    examples = tokenize_examples(model.tokenizer, [Example(f"{a} + {b} = ", f"{a + b}\n") for a, b in pairs], 32)
    heads = TINY_HEADS if model.cfg.n_layers < 14 else SMOLLM2_HEADS
    config = ft.FinetuneConfig(model=model_name, heads=heads, lr=2e-5, batch_size=4, micro_batch_size=2, epochs=1,
                               max_steps=4, warmup_ratio=0.0, checkpoint_every=10)
    t0 = time.perf_counter()
    result = ft.finetune(model, examples, config, out_dir / line, progress=False)
    print(f"{line}: 4 steps in {time.perf_counter() - t0:.1f} s, losses {result.losses}")
    ids = torch.tensor([model.tokenizer(TEXT, add_special_tokens=False).input_ids])
    with torch.no_grad():
        torch.save(model(ids).detach(), out_dir / f"{line}_tuned_logits.pt")
    other = "bridge" if line == "hooked" else "hooked"
    if not (out_dir / other / "delta.pt").is_file():
        print(f"now run this in the {other} line's virtualenv with the same arguments")
        return 0
    mine = torch.load(out_dir / line / "delta.pt", weights_only=True)
    theirs = torch.load(out_dir / other / "delta.pt", weights_only=True)
    diff = max((mine["tensors"][k] - theirs["tensors"][k]).abs().max().item() for k in mine["tensors"])
    base = extract_delta(load_model(model_name, device="cpu"), TuningPlan.from_json(mine["plan"]))
    moved = max((mine["tensors"][k] - base["tensors"][k]).abs().max().item() for k in mine["tensors"])
    print(f"tuned values, {line} vs {other}: max |diff| {diff:.3g} (largest move from the base {moved:.3g})")
    applied = apply_delta(load_model(model_name, device="cpu"), out_dir / other / "delta.pt")
    with torch.no_grad():
        logit_diff = (applied(ids) - torch.load(out_dir / f"{other}_tuned_logits.pt")).abs().max().item()
    print(f"{other}'s delta.pt applied on {line}: logits max |diff| {logit_diff:.3g} from the tuned {other} model")
    return 0 if diff < 1e-5 and logit_diff < 1e-4 and moved > 1e-5 else 1


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:3]))
