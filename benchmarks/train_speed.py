"""Train speed of Precise SFT versus full SFT (Table 1's "Train Speed"), samples/s in one run, same batches.

``limit`` is the speed-up the work allows, from measured parts and FLOP ratios:

- full SFT per micro-batch = forward + backward over every layer (about 2x the forward's matmul FLOPs:
  activation and weight gradients) + the AdamW step over all weights (measured, per optimizer step);
- Precise SFT per micro-batch = forward + activation-gradient backward only above the lowest tuned
  layer (about 1x those layers' forward FLOPs; weight gradients of tuned slices and their optimizer
  step are negligible).

``t_fwd`` is measured (no-grad forward + loss on the same micro-batches); the backward share of the
layers above the lowest tuned one comes from per-token matmul FLOPs. The last line printed is
``speedup=<x> limit=<x>``.

    python benchmarks/train_speed.py                      # SmolLM2, the five strongest heads from the notes
    python benchmarks/train_speed.py --heads-from results/identify/addition --top-k 32
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import _bench  # first: passive OpenMP waiting before torch loads

import torch

from circuits import sft as ft
from circuits.identify import load_identify
from circuits.io import write_json
from circuits.models import load_model, pad_token_id
from circuits.sft import plan as hm
from circuits.sft.data import build_training_set, collate, tokenize_examples
from circuits.sft.train import batch_schedule, sft_loss
from circuits.types import parse_heads

# Strongest SmolLM2 heads from path patching (PAPER_NOTES.md), used when no identify result is given.
DEFAULT_HEADS = "21.2,20.6,22.5,24.4,27.7"


def layer_flops_per_token(cfg) -> float:
    """Matmul FLOPs of one block's forward per token (Q, K, V, O and the gated MLP)."""
    n_kv = cfg.n_key_value_heads or cfg.n_heads
    attn = cfg.d_model * cfg.d_head * (2 * cfg.n_heads + 2 * n_kv)
    mlp = cfg.d_model * cfg.d_mlp * (3 if cfg.gated_mlp else 2)
    return 2.0 * (attn + mlp)


def measure_forward(model, examples, config) -> float:
    """Seconds for no-grad forward + loss over one optimizer step's micro-batches, averaged over steps."""
    pad = pad_token_id(model)
    schedule = batch_schedule(len(examples), config)

    def forward_all() -> None:
        with torch.no_grad():
            for micro in schedule:
                for mb in micro:
                    tokens, mask = collate([examples[i] for i in mb], pad)
                    sft_loss(model, tokens, mask)

    return _bench.measure(forward_all).seconds / len(schedule)


def measure_full_optimizer_step(model, config, reps: int = 2) -> float:
    params = [p for p in model.parameters()]
    opt = torch.optim.AdamW(params, lr=config.lr, weight_decay=config.weight_decay)
    saved = [p.detach().clone() for p in params]
    for p in params:
        p.grad = torch.zeros_like(p)
    elapsed = _bench.measure(opt.step, warmup=True, repeat=reps).seconds  # the warm-up step allocates the state
    with torch.no_grad():
        for p, s in zip(params, saved):
            p.copy_(s)
            p.grad = None
    return elapsed


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--heads", default=None, help=f"LAYER.HEAD,... (default {DEFAULT_HEADS})")
    parser.add_argument("--heads-from", help="identify result folder")
    parser.add_argument("--top-k", type=_bench.count(1, 100_000), default=32)
    parser.add_argument("--steps", type=_bench.count(1, 100_000), default=2)
    parser.add_argument("--batch-size", type=_bench.count(1, 100_000), default=16)
    parser.add_argument("--micro-batch-size", type=_bench.count(1, 100_000), default=8)
    parser.add_argument("--max-length", type=_bench.count(2, 1_000_000), default=128)
    parser.add_argument("--data-dir")
    parser.add_argument("--out", help="write the measurements as JSON here")
    _bench.add_arguments(parser, threads=1, json_flag=False)  # one thread: as docs/finetune.md's numbers were taken
    args = parser.parse_args(argv)
    threads = _bench.setup(args)

    model = load_model(args.model)
    heads = load_identify(args.heads_from).top_heads(args.top_k) if args.heads_from else parse_heads(args.heads or DEFAULT_HEADS)
    n_samples = args.steps * args.batch_size
    examples = build_training_set(("gsm8k", "arithmetic"), args.data_dir, n_arithmetic=n_samples // 2,
                                  limit_per_source=n_samples // 2, seed=0)[:n_samples]
    tokenized = tokenize_examples(model.tokenizer, examples, args.max_length)
    common = dict(batch_size=args.batch_size, micro_batch_size=args.micro_batch_size, epochs=1, max_steps=args.steps,
                  max_length=args.max_length, warmup_ratio=0.0)
    precise_cfg = ft.FinetuneConfig(heads=tuple(heads), **common)
    full_cfg = ft.FinetuneConfig(full=True, **common)

    t_fwd = measure_forward(model, tokenized, precise_cfg)
    t_opt = measure_full_optimizer_step(model, full_cfg)
    base_state = {n: p.detach().clone() for n, p in model.named_parameters()}
    full = ft.finetune(model, tokenized, full_cfg, None, progress=False)
    with torch.no_grad():
        for n, p in model.named_parameters():
            p.copy_(base_state[n])
    precise = ft.finetune(model, tokenized, precise_cfg, None, progress=False)

    cfg = model.cfg
    plan = hm.plan_tuning(model, heads)
    lowest = plan.lowest_layer() or 0
    f_layer = layer_flops_per_token(cfg)
    n_tokens = sum(len(e.ids) for e in tokenized)
    n_targets = sum(len(e.ids) - e.n_prompt for e in tokenized)
    f_unembed = 2.0 * cfg.d_model * cfg.d_vocab
    fwd_flops = n_tokens * cfg.n_layers * f_layer + n_targets * f_unembed
    above_flops = n_tokens * (cfg.n_layers - lowest) * f_layer + n_targets * f_unembed
    full_est = 3 * t_fwd + t_opt
    precise_est = t_fwd * (1 + above_flops / fwd_flops)
    limit = full_est / precise_est
    speedup = precise.samples_per_s / full.samples_per_s
    report = {
        "model": args.model, "heads": [list(h) for h in heads], "lowest_tuned_layer": lowest, "n_layers": cfg.n_layers,
        "steps": args.steps, "batch_size": args.batch_size, "micro_batch_size": args.micro_batch_size, "threads": threads,
        "full_samples_per_s": full.samples_per_s, "precise_samples_per_s": precise.samples_per_s,
        "full_tuned_parameters": full.tuned_parameters, "precise_tuned_parameters": precise.tuned_parameters,
        "t_forward_per_step_s": t_fwd, "t_full_optimizer_step_s": t_opt,
        "backward_share_above_lowest_layer": above_flops / fwd_flops,
        "limit": limit, "speedup": speedup, "fraction_of_limit": speedup / limit,
    }
    if args.out:
        write_json(Path(args.out), report)
    print(json.dumps(report, indent=2))
    print(f"full SFT {full.samples_per_s:.3f} samples/s, precise SFT {precise.samples_per_s:.3f} samples/s "
          f"({len(heads)} heads, lowest layer {lowest} of {cfg.n_layers})")
    _bench.finish(args, speedup=speedup, limit=limit)
    return report


if __name__ == "__main__":
    main()
