"""``circuits evaluate``: score a model (optionally with a fine-tuning delta applied) on the benchmarks.

Writes ``--out`` (a JSON file, atomically): ``{"config": ..., "tasks": {task: metrics}, ...}``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from circuits.evaluation import ALL_TASKS


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("evaluate", help="math and generic benchmarks through lm-evaluation-harness",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="smollm2")
    p.add_argument("--delta", help="delta.pt from `circuits finetune`, applied onto the base model")
    p.add_argument("--tasks", default=",".join(ALL_TASKS), help=f"comma-separated, from {', '.join(ALL_TASKS)}")
    p.add_argument("--limit", type=int, help="documents per task (quick runs)")
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--max-gen-toks", type=int, default=256)
    p.add_argument("--math-shots", type=int, default=0)
    p.add_argument("--mmlu-shots", type=int, default=5)
    p.add_argument("--csqa-shots", type=int, default=5)
    p.add_argument("--arithmetic-per-form", type=int, default=50)
    p.add_argument("--data-dir", help="benchmark data folder (default: $CIRCUITS_DATA_DIR or ../shared/data)")
    p.add_argument("--source", choices=("local", "hub"), default="local")
    p.add_argument("--device")
    p.add_argument("--out", required=True, help="result JSON file")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from circuits.evaluation import EvalConfig, evaluate_model
    from circuits.finetune import apply_delta, write_json_atomic
    from circuits.models import load_model

    config = EvalConfig(
        model=args.model, delta=args.delta, tasks=tuple(t.strip() for t in args.tasks.split(",") if t.strip()),
        limit=args.limit, batch_size=args.batch_size, max_gen_toks=args.max_gen_toks, math_shots=args.math_shots,
        mmlu_shots=args.mmlu_shots, csqa_shots=args.csqa_shots, arithmetic_per_form=args.arithmetic_per_form,
        data_dir=args.data_dir, source=args.source,
    )
    if config.delta and not Path(config.delta).is_file():
        raise FileNotFoundError(f"delta file not found: {config.delta}")
    model = load_model(config.model, device=args.device)
    if config.delta:
        apply_delta(model, config.delta)
    result = {"config": config.to_json(), **evaluate_model(model, config)}
    write_json_atomic(result, Path(args.out))
    for task, metrics in result["tasks"].items():
        shown = ", ".join(f"{k}={v:.4g}" for k, v in metrics.items())
        print(f"{task}: {shown}")
    return 0
