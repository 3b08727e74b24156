"""Speed of the attribution screen (every head, MLP and neuron at every position, with AtP*'s QK-fixed query and
key nodes) against plain attribution patching as the TransformerLens demo writes it (full prompts, one forward
with gradients and every position's logits, one backward), in one run, on the same pairs; the estimates of both are
compared at every position. The last line reads ``screen_seconds=<x> speedup_screen=<x> max_abs_diff=<x>``.

The machine these numbers come from matters: on a shared CPU, report the load beside them.

    python benchmarks/screen_speed.py [--pairs 64] [--identify results/identify/addition]
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import torch

from circuits.data.pairs import as_batch, build_pairs
from circuits.patching.attribution import attribute
from circuits.patching.metrics import get_metric
from circuits.patching.plain import attribute_plain
from circuits.models import load_model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2")
    parser.add_argument("--pairs", type=int, default=64)
    parser.add_argument("--metric", default="fraction")
    parser.add_argument("--identify", default="results/identify/addition", help="take pairs from this identify result "
                                                                               "when it exists")
    parser.add_argument("--plain-chunk", type=int, default=16, help="pairs per plain forward/backward (memory)")
    args = parser.parse_args()

    model = load_model(args.model)
    model.requires_grad_(False)
    if Path(args.identify, "pairs.jsonl").is_file():
        from circuits.identify import IdentifyResult

        pairs = IdentifyResult.load(args.identify).pairs[: args.pairs]
    else:
        pairs = build_pairs(model, "addition", n_pairs=args.pairs).pairs
    batch = as_batch(pairs, model)
    m = get_metric(args.metric)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"model {args.model}: {len(pairs)} pairs, up to {batch.reference.shape[1]} tokens, {torch.get_num_threads()} "
          f"threads, load average {load:.1f} on {os.cpu_count()} cores")
    attribute(model, batch.select(slice(0, 2)), m, progress=False)  # warm-up
    t0, c0 = time.perf_counter(), time.process_time()
    ours = attribute(model, batch, m, neurons=True, qk_fix=True, progress=False)
    ours_s, ours_cpu = time.perf_counter() - t0, time.process_time() - c0

    t0 = time.perf_counter()
    worst = 0.0
    for c0 in range(0, len(pairs), args.plain_chunk):
        sub = batch.select(slice(c0, c0 + args.plain_chunk))
        plain = attribute_plain(model, sub, m, ours.readout)
        for r in range(len(sub)):
            i, e = c0 + r, int(sub.end[r])
            for k in range(e + 1):
                worst = max(worst, (ours.head[:, :, k, i] - plain["head"][:, r, e - k]).abs().max().item(),
                            (ours.mlp[:, k, i] - plain["mlp"][:, r, e - k]).abs().max().item())
                if k < ours.neuron.shape[2]:
                    worst = max(worst, (ours.neuron[:, :, k, i] - plain["neuron"][:, r, e - k]).abs().max().item())
    plain_s = time.perf_counter() - t0
    load_after = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"plain attribution patching (heads, MLPs, neurons): {plain_s:7.1f} s; screen (the same + QK-fixed query and "
          f"key nodes): {ours_s:6.1f} s wall, {ours_cpu:6.1f} s CPU over {torch.get_num_threads()} threads; load average "
          f"now {load_after:.1f}")
    print(f"screen_seconds={ours_s:.1f} speedup_screen={plain_s / ours_s:.2f} max_abs_diff={worst:.2e}")


if __name__ == "__main__":
    main()
