"""What every rank runs in ``tests/backends/test_sft_ranks.py`` (torchrun, 2 processes, gloo, CPU) on a
TransformerBridge: Precise SFT (data-parallel) and full SFT (FSDP2), each interrupted before step 3 and resumed,
and sharded full SFT with bf16 compute and activation checkpointing. Rank 0 saves the losses.

    python -m torch.distributed.run --nproc-per-node 2 tests/backends/sft_dist_worker.py MODEL_DIR OUT_DIR
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
import torch.distributed as dist

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]

import dist_cases as cases  # noqa: E402
from test_sft_backends import bridge  # noqa: E402

from circuits import distributed as D  # noqa: E402


def main(model_dir: str, out: str) -> None:
    torch.set_num_threads(1)
    D.init_from_env()
    out_dir = Path(out)
    saved: dict = {}
    for name in ("precise", "full"):
        config = cases.sft_config(name)
        model = bridge(folder=model_dir)
        try:
            cases.finetune_interrupted(model, cases.examples(model), config, out_dir / name, at_step=3)
        except KeyboardInterrupt:
            pass
        model = bridge(folder=model_dir)
        result = cases.finetune(model, cases.examples(model), config, out_dir / name)
        saved[f"{name}_losses"] = result.losses
        saved[f"{name}_resumed_from"] = result.resumed_from
    model = bridge(folder=model_dir)
    result = cases.finetune(model, cases.examples(model), cases.sft_config("full", dtype="bfloat16",
                                                                           activation_checkpointing=True), None)
    saved["full_bf16_losses"] = result.losses
    if D.is_main():
        torch.save(saved, out_dir / "saved.pt")
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main(*sys.argv[1:3])
