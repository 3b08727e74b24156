"""What every rank runs in the multi-process tests (``tests/unit/test_distributed.py`` launches it with torchrun,
gloo, on the CPU): Precise SFT (data-parallel), full SFT (FSDP2), both resumed after an interruption, the identify
sweep and job, and a knockout curve. Rank 0 saves what the test compares with a one-process run.

    python -m torch.distributed.run --nproc-per-node 2 tests/dist_worker.py MODEL_DIR OUT_DIR
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parent))

import dist_cases as cases  # noqa: E402

from circuits import distributed as D  # noqa: E402
from circuits.cli import main as cli_main  # noqa: E402
from circuits.models import load_model  # noqa: E402


def main(model_dir: str, out: str) -> None:
    torch.set_num_threads(1)
    D.init_from_env()
    out_dir = Path(out)
    saved: dict = {}
    load = lambda: load_model(model_dir, device="cpu")  # noqa: E731

    # Fine-tuning: the same global batches as one process, split over the ranks; interrupted and resumed.
    for name in ("precise", "full"):
        config = cases.sft_config(name)
        model = load()
        try:
            cases.finetune_interrupted(model, cases.examples(model), config, out_dir / name, at_step=3)
        except KeyboardInterrupt:
            pass
        model = load()
        result = cases.finetune(model, cases.examples(model), config, out_dir / name)
        saved[f"{name}_losses"] = result.losses
        saved[f"{name}_resumed_from"] = result.resumed_from
    # Sharded full SFT with bf16 compute and activation checkpointing: runs, fp32 shards as masters.
    model = load()
    result = cases.finetune(model, cases.examples(model), cases.sft_config("full", dtype="bfloat16",
                                                                           activation_checkpointing=True), None)
    saved["full_bf16_losses"] = result.losses

    # Identify: the sweep engine in both modes, and the job through the command line.
    model = load()
    model.requires_grad_(False)
    pairs = cases.pairs(model)
    for mode in ("path", "activation"):
        saved[f"sweep_{mode}"] = cases.sweep(model, pairs, mode).tensors()
    assert cli_main(cases.identify_argv(model_dir, out_dir / "identify")) == 0
    saved["knockout"] = cases.knockout(model, pairs).to_json()
    if D.is_main():
        torch.save(saved, out_dir / "saved.pt")
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main(*sys.argv[1:3])
