"""``circuits positions``: activation patching of every head and MLP at every position (Stolfo et al. 2023),
exact, from a cached prefix: only positions p..END are recomputed for a patch at p.

Writes, atomically, into ``--out``: ``summary.json`` (effects by layer, head and offset from END in every metric),
``positions.pt`` (per-pair patched values), ``pairs.jsonl``, ``flow.html`` (the information-flow figure, operand
and operator positions marked), ``config.json`` and ``circuits.json``. ``--template`` keeps the pairs of one
template so positions align token for token.
"""

from __future__ import annotations

import argparse
import time

from circuits.cli._output import add_output_arguments, writing
from circuits.config import add_arguments, from_arguments
from circuits.beyond.positions.config import PositionConfig


PROGRESS = True


def register(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = sub.add_parser("positions", help="activation patching at every position, exact (information flow)",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(p, PositionConfig)
    add_output_arguments(p, "output folder")
    p.set_defaults(func=_main)
    return p


def _main(args: argparse.Namespace) -> int:
    from circuits.beyond.positions import job

    start = time.perf_counter()
    config = from_arguments(PositionConfig, args)
    with writing(args.out, "positions", args.overwrite):
        r = job.run(config, args.out, progress=not args.no_progress)
    print(f"[{config.template or config.task}] {len(r.pairs)} pairs, every head and MLP at every position in "
          f"{time.perf_counter() - start:.0f} s (the sweep {r.seconds:.0f} s) -> {args.out}/flow.html")
    return 0
