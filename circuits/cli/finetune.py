"""``circuits finetune``: Precise SFT (heads from an identify result or listed) or full SFT.

Writes into ``--out``: ``config.json``, ``checkpoint.pt`` (resumable), ``delta.pt`` (tuned slices
only), ``result.json`` (losses, samples/s, tuned parameters, the tuning plan) and ``circuits.json``.
"""

from __future__ import annotations

import argparse
import sys

from circuits.config import add_arguments, from_arguments
from circuits.sft.train import FinetuneConfig


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("finetune", help="Precise SFT of key heads/MLPs, or full SFT (Section 4.3, 5.3)",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True, help="output folder (resumes from its checkpoint.pt)")
    sel = p.add_argument_group("heads from an identify result")
    sel.add_argument("--heads-from", help="a `circuits identify` task folder")
    sel.add_argument("--top-k", type=int, default=32, help="heads taken from --heads-from: its key heads, then the rest "
                                                            "of its ranking (default 32, the paper's)")
    sel.add_argument("--top-mlps", type=int, default=0, help="MLPs taken from --heads-from")
    add_arguments(p.add_argument_group("the run"), FinetuneConfig)
    p.add_argument("--device", help="default: the model loader's")
    p.add_argument("--no-progress", action="store_true")
    p.set_defaults(func=run)


def config_from_args(args: argparse.Namespace) -> FinetuneConfig:
    from circuits.identify.result import load_identify

    fixed = {}
    if not getattr(args, "full", False):
        if args.heads_from and not getattr(args, "heads", None):
            fixed["heads"] = tuple(load_identify(args.heads_from).top_heads(args.top_k))
        if args.top_mlps and not getattr(args, "mlps", None):
            if not args.heads_from:
                raise ValueError("--top-mlps needs --heads-from")
            fixed["mlps"] = tuple(load_identify(args.heads_from).top_mlps(args.top_mlps))
        if not (fixed.get("heads") or getattr(args, "heads", None) or fixed.get("mlps") or getattr(args, "mlps", None)):
            raise ValueError("say what to tune: --heads-from DIR [--top-k K], --heads L.H,..., --mlps, or --full")
    return from_arguments(FinetuneConfig, args, **fixed)


def run(args: argparse.Namespace) -> int:
    from circuits.sft.data import build_training_set, tokenize_examples
    from circuits.sft.train import TrainingDiverged, finetune
    from circuits.models.loading import load_model

    config = config_from_args(args)
    model = load_model(config.model, device=args.device)
    examples = build_training_set(config.sources, config.data_dir, config.n_arithmetic, config.limit_per_source, config.seed)
    tokenized = tokenize_examples(model.tokenizer, examples, config.max_length)
    try:
        result = finetune(model, tokenized, config, args.out, progress=not args.no_progress)
    except TrainingDiverged as err:
        print(f"circuits finetune: {err}", file=sys.stderr)
        return 3
    print(f"{'full' if config.full else 'precise'} SFT: {result.steps} steps, {result.samples_per_s:.2f} samples/s, "
          f"{result.tuned_parameters:,} tuned parameters, final loss {result.losses[-1]:.4f}; wrote {args.out}")
    return 0
