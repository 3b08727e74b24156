"""``circuits evaluate``: score a model (optionally with a fine-tuning delta applied) on the benchmarks.

Writes ``--out``, atomically: a folder, or one JSON file when it ends in ``.json``
(``{"kind": "evaluation", "config": ..., "tasks": {task: metrics}, ...}``).

``--dtype bfloat16`` loads the model in bf16 (a delta's fp32 values are cast onto it, as training cast them);
``--n-devices K`` spreads a model too big for one GPU over K of them. Evaluation runs in one process.
"""

from __future__ import annotations

import argparse

from circuits.cli._output import add_output_arguments, writing
from circuits.config import add_arguments, from_arguments
from circuits.evaluation.config import EvalConfig
from circuits.jobs import job


def register(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = subparsers.add_parser("evaluate", help=job("evaluate").help,
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(p, EvalConfig)
    p.add_argument("--device")
    p.add_argument("--n-devices", type=int, default=1, help="spread the model's layers over this many GPUs")
    add_output_arguments(p, "result folder, or a .json file")
    p.set_defaults(func=run)
    return p


def run(args: argparse.Namespace) -> int:
    from circuits.evaluation import job
    from circuits.evaluation.result import check_json_output

    config = from_arguments(EvalConfig, args)
    job.check(config, args.device)  # bad input is one line before anything is written
    file_check = check_json_output if str(args.out).endswith(".json") else None
    with writing(args.out, "evaluation", args.overwrite, check=file_check):
        result = job.run(config, args.out, device=args.device, n_devices=args.n_devices, overwrite=args.overwrite)
    for task, metrics in result.tasks.items():
        shown = ", ".join(f"{k}={v:.4g}" for k, v in metrics.items())
        print(f"{task}: {shown}")
    return 0
