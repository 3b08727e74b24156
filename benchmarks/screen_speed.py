"""Speed of the attribution screen (every head, MLP and neuron at every position, with AtP*'s QK-fixed query and
key nodes) against plain attribution patching as the TransformerLens demo writes it (full prompts, one forward
with gradients and every position's logits, one backward), in one run, on the same pairs; the estimates of both are
compared at every position. The last line reads ``screen_seconds=<x> speedup_screen=<x> max_abs_diff=<x>``.

The machine these numbers come from matters: on a shared CPU, report the load beside them.

    python benchmarks/screen_speed.py [--pairs 64] [--identify results/identify/addition]
"""

from __future__ import annotations

import argparse

import _bench  # first: passive OpenMP waiting before torch loads

from circuits.data.pairs import as_batch
from circuits.patching.engines.attribution import attribute
from circuits.patching.core.metrics import get_metric
from circuits.patching.engines.plain import attribute_plain
from circuits.models import load_model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pairs", type=_bench.count(1, 100_000), default=64)
    parser.add_argument("--metric", default="fraction")
    parser.add_argument("--identify", default="results/identify/addition", help="take pairs from this identify result "
                                                                               "when it exists")
    parser.add_argument("--plain-chunk", type=_bench.count(1, 100_000), default=16,
                        help="pairs per plain forward/backward (memory)")
    _bench.add_arguments(parser)
    args = parser.parse_args()
    _bench.setup(args)

    model = load_model(args.model)
    model.requires_grad_(False)
    pairs, _ = _bench.identify_pairs(model, args.identify, args.pairs)
    batch = as_batch(pairs, model)
    m = get_metric(args.metric)
    print(f"model {args.model}: {len(pairs)} pairs, up to {batch.reference.shape[1]} tokens; {_bench.describe()}")
    screen = _bench.measure(lambda: attribute(model, batch, m, neurons=True, qk_fix=True, progress=False),
                            warmup=lambda: attribute(model, batch.select(slice(0, 2)), m, progress=False))
    ours, ours_s = screen.value, screen.seconds

    def plain_and_compare() -> float:
        """Plain attribution patching a chunk of pairs at a time (memory), each chunk compared at every position."""
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
        return worst

    plain_run = _bench.measure(plain_and_compare)
    worst = plain_run.value
    plain_s = plain_run.seconds
    print(f"plain attribution patching (heads, MLPs, neurons): {plain_s:7.1f} s; screen (the same + QK-fixed query and "
          f"key nodes): {ours_s:6.1f} s wall, {screen.cpu_seconds:6.1f} s CPU; now {_bench.describe()}")
    _bench.finish(args, screen_seconds=ours_s, speedup_screen=plain_s / ours_s, max_abs_diff=worst)


if __name__ == "__main__":
    main()
