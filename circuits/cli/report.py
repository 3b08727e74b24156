"""``circuits report RESULTS_DIR... --out report.html``: one offline HTML page from saved results.

Reads what ``circuits identify``, the figure scripts in ``experiments/`` and the fine-tuning jobs
wrote (folders are searched, so ``results/`` itself works) and runs no model. Sections whose results
are absent are skipped with a note saying how to make them.
"""

from __future__ import annotations

import argparse

from circuits.cli._output import add_output_arguments, writing
from circuits.jobs import job


def register(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = sub.add_parser("report", help=job("report").help,
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("results", nargs="+", help="result folders (searched recursively) or JSON files")
    add_output_arguments(p, "the HTML file to write", default="report.html")
    p.add_argument("--title", default="circuits report")
    p.add_argument("--inline", action="store_true",
                   help="embed plotly.js and circuitsvis in the page (one file to send alone, about 6 MB more) instead "
                        "of loading the shared copy in _assets/ beside the results")
    p.set_defaults(func=_main)
    return p


def _main(args: argparse.Namespace) -> int:
    from circuits.viz.report import check_report_output, write_report

    with writing(args.out, "report", args.overwrite, check=check_report_output):
        out = write_report(args.results, args.out, title=args.title, overwrite=args.overwrite,
                           inline=args.inline)
    print(f"Report: {out.resolve()} ({out.stat().st_size / 1e6:.1f} MB)")
    return 0
