"""``circuits positions``: activation patching of every head and MLP at every position (Stolfo et al. 2023),
exact, from a cached prefix: only positions p..END are recomputed for a patch at p.

Writes, atomically, into ``--out``: ``summary.json`` (effects by layer, head and offset from END in every metric),
``positions.pt`` (per-pair patched values), ``pairs.jsonl``, ``flow.html`` (the information-flow figure, operand
and operator positions marked), ``config.json`` and ``circuits.json``. ``--template`` keeps the pairs of one
template so positions align token for token.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from circuits.beyond.positions.config import PositionConfig
    from circuits.beyond.positions.result import PositionResult


def printout(args: argparse.Namespace, config: PositionConfig, r: PositionResult, seconds: float) -> None:
    print(f"[{config.template or config.task}] {len(r.pairs)} pairs, every head and MLP at every position in "
          f"{seconds:.0f} s (the sweep {r.seconds:.0f} s) -> {args.out}/flow.html")
