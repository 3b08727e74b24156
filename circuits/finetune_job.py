"""``circuits finetune``: Precise SFT (heads from an identify result or listed) or full SFT.

Writes into ``--out``: ``config.json``, ``checkpoint.pt`` (resumable), ``delta.pt`` (tuned slices
only), ``result.json`` (losses, samples/s, tuned parameters, the tuning plan).
"""

from __future__ import annotations

import argparse
import sys

from circuits import head_masks as hm


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("finetune", help="Precise SFT of key heads/MLPs, or full SFT (Section 4.3, 5.3)",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="smollm2", help="model name or path (see circuits.models.load_model)")
    p.add_argument("--out", required=True, help="output folder (resumes from its checkpoint.pt)")
    sel = p.add_argument_group("what to tune")
    sel.add_argument("--heads-from", help="identify result folder (summary.json with key_heads)")
    sel.add_argument("--top-k", type=int, default=32, help="heads taken from --heads-from (default 32, the paper's)")
    sel.add_argument("--heads", help="explicit heads LAYER.HEAD,... (e.g. 21.2,20.6)")
    sel.add_argument("--mlps", help="explicit MLP layers, comma-separated")
    sel.add_argument("--top-mlps", type=int, default=0, help="MLPs taken from --heads-from (mlp_effects)")
    sel.add_argument("--full", action="store_true", help="full SFT: tune every parameter")
    sel.add_argument("--kv-policy", choices=hm.KV_POLICIES, default=hm.DEFAULT_KV_POLICY,
                     help="grouped-query attention: tune a shared K/V head when any of its query heads is selected "
                          "('shared', default) or never")
    sel.add_argument("--no-rescale", action="store_true", help="do not rescale head gradients by H/h")
    tr = p.add_argument_group("training")
    tr.add_argument("--lr", type=float, default=2e-5)
    tr.add_argument("--weight-decay", type=float, default=0.1)
    tr.add_argument("--warmup-ratio", type=float, default=0.02)
    tr.add_argument("--batch-size", type=int, default=128, help="effective batch (gradient accumulation)")
    tr.add_argument("--micro-batch-size", type=int, default=8)
    tr.add_argument("--epochs", type=int, default=2)
    tr.add_argument("--steps", type=int, help="cap on optimizer steps")
    tr.add_argument("--max-length", type=int, default=384)
    tr.add_argument("--seed", type=int, default=0)
    tr.add_argument("--checkpoint-every", type=int, default=25)
    da = p.add_argument_group("data")
    da.add_argument("--data", default="gsm8k,adapters,arithmetic",
                    help="training sources: gsm8k (train split), adapters (LLM-Adapters math minus all test questions), arithmetic")
    da.add_argument("--n-arithmetic", type=int, default=2000)
    da.add_argument("--limit-per-source", type=int)
    da.add_argument("--data-dir", help="benchmark data folder (default: $CIRCUITS_DATA_DIR or ../shared/data)")
    p.add_argument("--device", help="default: the model loader's")
    p.add_argument("--no-progress", action="store_true")
    p.set_defaults(func=run)


def config_from_args(args: argparse.Namespace):
    from circuits.finetune import FinetuneConfig

    heads: list = []
    mlps: list = []
    if not args.full:
        if args.heads:
            heads = hm.parse_heads(args.heads)
        elif args.heads_from:
            heads = hm.heads_from_identify(args.heads_from, args.top_k)
        if args.mlps:
            mlps = hm.parse_mlps(args.mlps)
        elif args.top_mlps:
            if not args.heads_from:
                raise ValueError("--top-mlps needs --heads-from")
            mlps = hm.mlps_from_identify(args.heads_from, args.top_mlps)
        if not heads and not mlps:
            raise ValueError("say what to tune: --heads-from DIR [--top-k K], --heads L.H,..., --mlps, or --full")
    return FinetuneConfig(
        model=args.model, heads=tuple(heads), mlps=tuple(mlps), full=args.full, kv_policy=args.kv_policy,
        rescale=not args.no_rescale, lr=args.lr, weight_decay=args.weight_decay, warmup_ratio=args.warmup_ratio,
        batch_size=args.batch_size, micro_batch_size=args.micro_batch_size, epochs=args.epochs, max_steps=args.steps,
        max_length=args.max_length, seed=args.seed, checkpoint_every=args.checkpoint_every,
        sources=tuple(s.strip() for s in args.data.split(",") if s.strip()), n_arithmetic=args.n_arithmetic,
        limit_per_source=args.limit_per_source, data_dir=args.data_dir,
    )


def run(args: argparse.Namespace) -> int:
    from circuits import finetune as ft
    from circuits.models import load_model
    from circuits.sft_data import build_training_set, tokenize_examples

    config = config_from_args(args)
    model = load_model(config.model, device=args.device)
    examples = build_training_set(config.sources, config.data_dir, config.n_arithmetic, config.limit_per_source, config.seed)
    tokenized = tokenize_examples(model.tokenizer, examples, config.max_length)
    try:
        result = ft.finetune(model, tokenized, config, args.out, progress=not args.no_progress)
    except ft.TrainingDiverged as err:
        print(f"circuits finetune: {err}", file=sys.stderr)
        return 3
    print(f"{'full' if config.full else 'precise'} SFT: {result.steps} steps, {result.samples_per_s:.2f} samples/s, "
          f"{result.tuned_parameters:,} tuned parameters, final loss {result.losses[-1]:.4f}; wrote {args.out}")
    return 0
