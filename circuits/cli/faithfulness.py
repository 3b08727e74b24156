"""``circuits faithfulness``: the circuits each ranking yields, scored as MIB scores circuit discovery -- keep the
top s% of the nodes (or edges), ablate the rest, f = (m(C) - m(empty)) / (m(N) - m(empty)) at MIB's sizes, CPR (area
under f, higher is better) and CMD (area between f and 1, lower is better) with bootstrap intervals over pairs, and
the seconds each ranking took.

Rankings (``--rankings``, comma-separated): exact-path and exact-activation (the END engine, |effect|), positions
(exact patching at every position, max |effect| over positions), screen (AtP*), graddrop (AtP*'s GradDrop), eap-ig
(EAP-IG, nodes and, with ``--edges``, edges). Writes into ``--out``, file by file: ``summary.json`` (the table and every
curve), ``faithfulness.pt``, ``pairs.jsonl``, ``figure.html`` (f against circuit size, one line per ranking),
``config.json``, ``circuits.json``, and ``parts/`` (each finished ranking: the same command resumes a stopped run).
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from circuits.beyond.faithfulness.config import FaithfulnessConfig
    from circuits.beyond.faithfulness.result import FaithfulnessResult


def printout(args: argparse.Namespace, config: FaithfulnessConfig, r: FaithfulnessResult, seconds: float) -> None:
    print(f"[{config.task}] {len(r.pairs)} pairs, {len(r.curves)} rankings in {seconds:.0f} s -> {args.out}/figure.html")
    print(f"  {'ranking':<17} {'circuit':<10} {'CPR':>7} {'CMD':>7} {'ranking s':>10} {'curve s':>8}")
    for row in r.table():
        print(f"  {row['ranking']:<17} {row['setting']:<10} {row['cpr']:7.3f} {row['cmd']:7.3f} "
              f"{row['ranking_seconds']:10.1f} {row['curve_seconds']:8.1f}")
    for setting in r.settings:
        best = r.best(setting)
        if best is not None:
            print(f"  lowest CMD, {setting}: {best[0]} ({best[1]:.3f})")
