"""The ``circuits`` command line: one subcommand per job.

Each module here exposes ``register(subparsers)``, which adds its subcommand and sets ``func`` to a callable
taking the parsed arguments; flags come from the job's config (:func:`circuits.config.add_arguments`).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from circuits.cli import evaluate, finetune, identify, neurons, positions, report, screen, stability

COMMAND_MODULES = [identify, screen, positions, neurons, stability, finetune, evaluate, report]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="circuits",
        description="Find, explain and precisely fine-tune the components of a language model that do arithmetic.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    for module in COMMAND_MODULES:
        module.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except (ValueError, FileNotFoundError) as err:
        # Bad input gets one clear line, not a traceback.
        print(f"circuits {args.command}: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
