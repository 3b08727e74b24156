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

from circuits.cli._output import add_output_arguments, writing
from circuits.config import add_arguments, from_arguments
from circuits.sft.config import FinetuneConfig
from circuits.jobs import job


def register(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = subparsers.add_parser("finetune", help=job("finetune").help,
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
    p.set_defaults(func=run)
    return p


def config_from_args(args: argparse.Namespace) -> FinetuneConfig:
    from circuits.sft.job import select

    return from_arguments(FinetuneConfig, args, factory=lambda **fields: select(
        args.top_k, args.top_mlps, args.heads_from, **fields))


def run(args: argparse.Namespace) -> int:
    from circuits import distributed as D
    from circuits.sft import job
    from circuits.sft.train import TrainingDiverged, clear_run, run_state

    config = config_from_args(args)
    job.device_for(config, args.device, args.n_devices)  # bad combinations: one line, before anything is written
    with writing(args.out, "finetune", args.overwrite):
        if args.overwrite and D.is_main():
            clear_run(args.out)
        D.barrier()
        finished = run_state(args.out, config) == "finished"  # the job says so and returns the saved result
        try:
            result = job.run(config, args.out, progress=not args.no_progress, device=args.device,
                             n_devices=args.n_devices)
        except TrainingDiverged as err:
            if D.is_main():
                print(f"circuits finetune: {err}", file=sys.stderr)
            return 3
    if D.is_main() and not finished:
        ranks = f" on {result.world_size} processes" if result.world_size > 1 else ""
        print(f"{'full' if config.full else 'precise'} SFT ({config.dtype}{ranks}): {result.steps} steps, "
              f"{result.samples_per_s:.2f} samples/s, {result.tuned_parameters:,} tuned parameters, final loss "
              f"{result.losses[-1]:.4f}; wrote {args.out}")
    return 0
