"""``circuits stability``: how stable the key-head set is, per operation, across seeds (new prompt pairs) and across
template forms (equation, statement, question), as Jaccard overlaps.

Reads or makes identify results per operation and seed under ``--identify-dir`` (default: ``<--out>/identify``; as
``circuits identify`` writes them, each checked and locked before it is written) and writes into ``--out``, file by
file, each atomically: ``data.json`` (key-head sets and Jaccard matrices per operation), ``figure.html``,
``config.json`` and ``circuits.json``.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from circuits.beyond.stability.config import StabilityConfig
    from circuits.beyond.stability.result import StabilityResult


def printout(args: argparse.Namespace, config: StabilityConfig, r: StabilityResult, seconds: float) -> None:
    for op, s in r.summary()["per_operation"].items():
        print(f"  {op}: mean Jaccard across seeds {s['mean_jaccard_seeds']:.2f}, across forms {s['mean_jaccard_forms']:.2f}")
    print(f"-> {args.out}/figure.html")
