"""``circuits screen``: attribution patching of every head, MLP and neuron at every position, the top-N re-measured
exactly, and the audit against the exact END engine.

Writes, atomically, into ``--out``: ``summary.json`` (the audit numbers: ``spearman_end``,
``exact_top10_missed_at_{10,20,50}``, ``exact_top5pct_missed_at_{10,20,50}``, the largest misses and why; every
verified node with its screen estimate and exact value; seconds per stage), ``screen.pt`` (the estimates by layer,
head and offset from END; neurons; QK-fixed query and key nodes; GradDrop scores; the exact END effects),
``pairs.jsonl``, ``screen.html``, ``config.json`` and ``circuits.json``.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from circuits.beyond.screen.config import ScreenConfig
    from circuits.beyond.screen.result import ScreenResult


def printout(args: argparse.Namespace, config: ScreenConfig, r: ScreenResult, seconds: float) -> None:
    s = r.summary()
    parts = ", ".join(f"{k} {v:.1f} s" for k, v in r.seconds.items())
    print(f"[{config.task}] screen of {len(r.pairs)} pairs in {seconds:.1f} s ({parts}; the rest: "
          "loading the model and building the pairs)"
          + (f"; Spearman with the exact END engine {s['spearman_end']:.3f}; exact top-10 missed by the screen's "
             f"top-20: {s['exact_top10_missed_at_20']}" if "spearman_end" in s else "") + f" -> {args.out}")
    for v in r.verified[:10]:
        print(f"  {v['node']:>16}  screen {v['screen']:+.4f}  exact {v['exact']:+.4f}")
    if len(r.verified) > 10:
        print(f"  ... and {len(r.verified) - 10} more verified nodes in {args.out}")
