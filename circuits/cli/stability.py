"""``circuits stability``: how stable the key-head set is, per operation, across seeds (new prompt pairs) and across
template forms (equation, statement, question), as Jaccard overlaps.

Reads or makes identify results per operation and seed under ``--identify-dir`` (default: ``<--out>/identify``; as
``circuits identify`` writes them, each checked and locked before it is written) and writes into ``--out``, file by
file, each atomically: ``data.json`` (key-head sets and Jaccard matrices per operation), ``figure.html``,
``config.json`` and ``circuits.json``.
"""

from __future__ import annotations

import argparse

from circuits.cli._output import add_output_arguments, writing
from circuits.config import add_arguments, from_arguments
from circuits.beyond.stability.config import StabilityConfig


def register(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = sub.add_parser("stability", help="Jaccard overlap of key heads across seeds and template forms",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(p, StabilityConfig)
    add_output_arguments(p, "output folder")
    p.set_defaults(func=_main)
    return p


def _main(args: argparse.Namespace) -> int:
    from circuits.beyond.stability import job

    config = from_arguments(StabilityConfig, args)
    with writing(args.out, "stability", args.overwrite):
        r = job.run(config, args.out)
    for op, s in r.summary()["per_operation"].items():
        print(f"  {op}: mean Jaccard across seeds {s['mean_jaccard_seeds']:.2f}, across forms {s['mean_jaccard_forms']:.2f}")
    print(f"-> {args.out}/figure.html")
    return 0
