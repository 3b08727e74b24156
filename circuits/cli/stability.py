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

from circuits.cli._output import register_job
from circuits.beyond.stability.config import StabilityConfig

if TYPE_CHECKING:
    from circuits.beyond.stability.result import StabilityResult


def register(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    return register_job(sub, "stability", StabilityConfig, job="circuits.beyond.stability.job", printout=_printout,
                        progress=False, description=__doc__,
                        help="Jaccard overlap of key heads across seeds and template forms")


def _printout(args: argparse.Namespace, config: StabilityConfig, r: StabilityResult, seconds: float) -> None:
    for op, s in r.summary()["per_operation"].items():
        print(f"  {op}: mean Jaccard across seeds {s['mean_jaccard_seeds']:.2f}, across forms {s['mean_jaccard_forms']:.2f}")
    print(f"-> {args.out}/figure.html")
