"""``circuits finetune``: Precise SFT (heads from an identify result or listed) or full SFT.

Writes into ``--out``: ``config.json``, ``checkpoint.pt`` (resumable), ``delta.pt`` (the tuned values in
fp32), ``result.json`` (losses, samples/s, tuned parameters, the tuning plan) and ``circuits.json``.

``--dtype bfloat16`` (or ``float16`` on a GPU) runs the forward and backward passes in low precision while the
tuned values keep fp32 masters and fp32 AdamW state. Across GPUs and machines:
``torchrun --nproc-per-node N [--nnodes M ...] -m circuits finetune ...``: Precise SFT is data-parallel, full SFT is
sharded with FSDP2 (``--cpu-offload`` also on one GPU); the global ``--batch-size`` is split over the ranks, so the
run equals a one-process run. See docs/scale.md.
"""

from __future__ import annotations

import argparse
import sys

import torch

from circuits.cli._output import add_output_arguments, writing
from circuits.config import add_arguments, from_arguments
from circuits.sft.train import FinetuneConfig


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("finetune", help="Precise SFT of key heads/MLPs, or full SFT (Section 4.3, 5.3)",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_output_arguments(p, "output folder (a run there with the same config resumes; a finished one is left as is)")
    sel = p.add_argument_group("heads from an identify result")
    sel.add_argument("--heads-from", help="a `circuits identify` task folder")
    sel.add_argument("--top-k", type=int, default=32, help="heads taken from --heads-from: its key heads, then the rest "
                                                            "of its ranking (default 32, the paper's)")
    sel.add_argument("--top-mlps", type=int, default=0, help="MLPs taken from --heads-from")
    add_arguments(p.add_argument_group("the run"), FinetuneConfig)
    p.add_argument("--device", help="default: the model loader's (under torchrun: each rank's own GPU)")
    p.add_argument("--n-devices", type=int, default=1,
                   help="Precise SFT: spread the model's layers over this many GPUs (per process under torchrun)")
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
    from circuits import distributed as D
    from circuits.sft.train import clear_run, run_state

    config = config_from_args(args)
    device, sharded = _device(args, config)
    data = [{"gsm8k": "gsm8k_train", "adapters": "adapters"}[s] for s in config.sources if s != "arithmetic"]
    if data:  # before the model loads: a missing data folder or file is one line
        from circuits.data.benchmarks import check_data_files

        check_data_files(data, config.data_dir)
    with writing(args.out, "finetune", args.overwrite):
        if args.overwrite and D.is_main():
            clear_run(args.out)
        D.barrier()
        if run_state(args.out, config) == "finished":  # before the model loads; nothing is touched
            if D.is_main():
                print(f"already finished with this config: {args.out} holds its result.json and delta.pt; nothing to do "
                      "(use another --out, or --overwrite to train again)")
            return 0
        return _train(args, config, device, sharded)


def _device(args: argparse.Namespace, config: FinetuneConfig) -> tuple[str, bool]:
    """The device this process trains on, and whether full SFT is sharded; bad combinations are one line."""
    from circuits import distributed as D
    from circuits.sft.optim import check_device
    from circuits.sft.parallel import strategy_for

    sharded = strategy_for(config).name == "sharded"  # also checks that the global batch splits over the ranks
    if sharded and args.n_devices > 1:
        raise ValueError("--n-devices is for Precise SFT; full SFT across GPUs is sharded with FSDP (torchrun)")
    if D.is_distributed() or sharded:
        device = D.use_devices(args.n_devices)
    else:
        device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    check_device(config.dtype, device)
    return device, sharded


def _train(args: argparse.Namespace, config: FinetuneConfig, device: str, sharded: bool) -> int:
    from circuits import distributed as D
    from circuits.models.loading import load_model
    from circuits.sft.data import build_training_set, tokenize_examples
    from circuits.sft.train import TrainingDiverged, finetune

    # Sharded full SFT keeps fp32 shards as masters: the model is loaded in fp32 on the CPU and FSDP moves each
    # rank's shards to its GPU; compute runs in --dtype.
    model = load_model(config.model, device="cpu" if sharded else device, dtype="float32" if sharded else config.dtype,
                       n_devices=1 if sharded else args.n_devices)
    examples = build_training_set(config.sources, config.data_dir, config.n_arithmetic, config.limit_per_source, config.seed)
    tokenized = tokenize_examples(model.tokenizer, examples, config.max_length)
    try:
        result = finetune(model, tokenized, config, args.out, progress=not args.no_progress)
    except TrainingDiverged as err:
        if D.is_main():
            print(f"circuits finetune: {err}", file=sys.stderr)
        return 3
    if D.is_main():
        ranks = f" on {result.world_size} processes" if result.world_size > 1 else ""
        print(f"{'full' if config.full else 'precise'} SFT ({config.dtype}{ranks}): {result.steps} steps, "
              f"{result.samples_per_s:.2f} samples/s, {result.tuned_parameters:,} tuned parameters, final loss "
              f"{result.losses[-1]:.4f}; wrote {args.out}")
    return 0
