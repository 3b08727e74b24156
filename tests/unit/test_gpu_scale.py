"""benchmarks/gpu_scale.py at its small shape on the CPU: every part runs (sweeps against the plain loop, Precise SFT
in bf16 with fp32 masters, full SFT through FSDP2 with CPU-held state) and the last line has the five numbers. The
7B run needs a GPU (docs/gpu.md)."""

from __future__ import annotations

import math

import torch.distributed as dist


def test_gpu_scale_runs_at_the_tiny_shape(capsys):
    import gpu_scale

    started = dist.is_initialized()
    try:
        results = gpu_scale.main(["--shape", "tiny", "--pairs", "4", "--sample", "3", "--steps", "1",
                                  "--train-tokens", "32"])
    finally:
        if not started and dist.is_initialized():
            dist.destroy_process_group()
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert [kv.split("=")[0] for kv in last.split()] == ["path_s", "activation_s", "precise_sps", "full_sps",
                                                        "precise_peak_gib"]
    tiny = results["tiny"]
    assert tiny["path_s"] > 0 and tiny["precise_sps"] > 0 and tiny["full_sps"] > 0 and not tiny["full_error"]
    assert math.isnan(tiny["precise_peak_gib"])  # GPU memory only
    for mode in ("path", "activation"):
        assert tiny["sweeps"][mode]["max_abs_diff"] < 0.1  # bf16 engine vs the plain bf16 loop on the sample


def test_tuned_heads_are_the_issue_s_32_in_layers_12_to_17():
    import gpu_scale

    heads = gpu_scale.tuned_heads(32, 32)
    assert len(heads) == len(set(heads)) == 32 and {l for l, _ in heads} <= set(range(12, 18))
    assert len({l for l, _ in heads}) == 6
