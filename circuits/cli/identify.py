"""``circuits identify``: build prompt pairs, sweep every head and MLP, pick the key components.

Writes, atomically, one folder per task: ``summary.json``, ``pairs.jsonl``, ``sweep.pt``, ``heads.html``
(the paper's Figure 2 for that task), ``config.json`` and ``circuits.json``. ``--task all`` runs the four
operations one by one (each in its own sub-folder, skipped when already finished with the same config,
so an interrupted run resumes) and then, in ``all/``, pairs drawn evenly from the four with the per-pair values
their sweeps computed (pooled, not re-run).

Across GPUs: ``torchrun --nproc-per-node N -m circuits identify ...`` splits the sweep's work across N processes
(rank 0 writes; the result equals a one-process run's exactly), and ``--n-devices K`` spreads a model too big for
one GPU over K of them (docs/scale.md).
"""

from __future__ import annotations

import argparse
import time

from circuits.cli._output import add_output_arguments, writing
from circuits.config import add_arguments, from_arguments
from circuits.identify.config import IdentifyConfig
from circuits.patching.registry import END_SWEEP_ENGINES
from circuits.jobs import job


def register(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = sub.add_parser("identify", help=job("identify").help,
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(p, IdentifyConfig)
    add_output_arguments(p, "output folder (a result per task inside it for --task all)")
    p.add_argument("--engine", choices=tuple(END_SWEEP_ENGINES), default=None,
                   help="the registry's END engine that sweeps every head and MLP (circuits.patching.registry): "
                        "exact-path (the default; --mode path) or exact-activation (--mode activation)")
    p.add_argument("--n-devices", type=int, default=1,
                   help="spread the model's layers over this many GPUs (per process under torchrun; default 1)")
    p.set_defaults(func=_main)
    return p


def config_from(args: argparse.Namespace) -> IdentifyConfig:
    """The config of the flags; ``--engine`` is the registry's name of the END sweep ``--mode`` picks."""
    config = from_arguments(IdentifyConfig, args)
    if getattr(args, "engine", None) is not None:
        mode = END_SWEEP_ENGINES[args.engine]
        if getattr(args, "mode", mode) != mode:
            raise ValueError(f"--engine {args.engine} is --mode {mode}, not --mode {args.mode}; give one of them")
        config = config.replace(mode=mode)
    return config


def _main(args: argparse.Namespace) -> int:
    from circuits import distributed
    from circuits.identify import job

    config = config_from(args)
    start = time.perf_counter()
    with writing(args.out, "identify", args.overwrite, container=config.task == "all"):
        job.run(config, args.out, n_devices=args.n_devices, progress=not args.no_progress)
    if distributed.is_main():
        print(f"Figures ({time.perf_counter() - start:.0f} s in all, the model's loading included):")
        for task, folder in job.task_folders(config, args.out).items():
            print(f"  {task}: {folder / 'heads.html'}")
    return 0
