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


def register(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = subparsers.add_parser("evaluate", help="math and generic benchmarks through lm-evaluation-harness",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(p, EvalConfig)
    p.add_argument("--device")
    p.add_argument("--n-devices", type=int, default=1, help="spread the model's layers over this many GPUs")
    add_output_arguments(p, "result folder, or a .json file")
    p.set_defaults(func=run)
    return p


def run(args: argparse.Namespace) -> int:
    import torch

    from circuits.evaluation.tasks import evaluate
    from circuits.sft.delta import apply_delta, read_delta
    from circuits.models.loading import load_model

    from circuits import distributed
    from circuits.evaluation.result import check_json_output
    from circuits.evaluation.tasks import check_data
    from circuits.sft.optim import check_device

    config = from_arguments(EvalConfig, args)
    if distributed.is_distributed():
        raise ValueError("evaluate runs in one process; launch it without torchrun (--n-devices spreads a big model "
                         "over a node's GPUs)")
    delta = read_delta(config.delta, config.model) if config.delta else None  # checked before the model loads
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    check_device(config.dtype, device)
    check_data(config)  # before the model loads: a missing data folder or file is one line
    file_check = check_json_output if str(args.out).endswith(".json") else None
    with writing(args.out, "evaluation", args.overwrite, check=file_check):
        model = load_model(config.model, device=device, dtype=config.dtype, n_devices=args.n_devices)
        if delta is not None:
            apply_delta(model, delta)
        result = evaluate(model, config)
        result.save(args.out, overwrite=args.overwrite)
    for task, metrics in result.tasks.items():
        shown = ", ".join(f"{k}={v:.4g}" for k, v in metrics.items())
        print(f"{task}: {shown}")
    return 0
