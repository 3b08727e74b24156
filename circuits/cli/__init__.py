"""The ``circuits`` command line: one subcommand per job.

Each module here exposes ``register(subparsers)``, which adds its subcommand and sets ``func`` to a callable
taking the parsed arguments; flags come from the job's config (:func:`circuits.config.add_arguments`).

Under ``torchrun`` (``torchrun --nproc-per-node N -m circuits identify|finetune ...``) the process group is started
here, once, from torchrun's environment (:func:`circuits.distributed.init_from_env`) and ended on the way out; rank 0
prints errors.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from circuits.cli import evaluate, finetune, identify, report

COMMAND_MODULES = [identify, finetune, evaluate, report]


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
    from circuits import distributed

    parser = build_parser()
    args = parser.parse_args(argv)
    launch = distributed.init_from_env()
    try:
        return int(args.func(args) or 0)
    except (ValueError, FileNotFoundError) as err:
        # Bad input gets one clear line, not a traceback (one line, not one per rank).
        if distributed.is_main():
            print(f"circuits {args.command}: error: {err}", file=sys.stderr)
        return 2
    finally:
        if launch is not None:
            launch.close()


if __name__ == "__main__":
    sys.exit(main())
