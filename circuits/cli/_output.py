"""The output location of a command: checked before any work, locked while the job runs."""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from circuits.config import add_arguments, from_arguments
from circuits.io import OutputError, output_lock
from circuits.results import check_output


def add_output_arguments(parser: argparse.ArgumentParser, help: str, default: str | None = None) -> None:
    if default is None:
        parser.add_argument("--out", required=True, help=help)
    else:
        parser.add_argument("--out", default=default, help=f"{help} (default: {default})")
    parser.add_argument("--overwrite", action="store_true",
                        help="replace --out even when it holds something a circuits job of this kind did not write")


@contextlib.contextmanager
def writing(out: str | Path, kind: str, overwrite: bool = False, *, container: bool = False,
            check: Callable[[Path, bool], object] | None = None) -> Iterator[Path]:
    """Check that a ``kind`` job may write to ``out`` (``check`` for single-file outputs), then hold its lock.

    Under torchrun every rank checks (the same verdict everywhere, so no rank waits for one that stopped) and rank 0,
    the only writer, holds the lock."""
    from circuits import distributed

    out = Path(out)
    if check is not None:
        if out.is_symlink():  # a file is written by renaming over it, which would replace the link, not its target
            raise OutputError(f"--out {out} is a symbolic link (to {os.readlink(out)}); name the file itself, or a "
                              "new one")
        check(out, overwrite)
    else:
        check_output(out, kind, overwrite=overwrite, container=container)
    if not distributed.is_main():
        yield out
        return
    with output_lock(out):
        yield out


def register_job(sub: argparse._SubParsersAction, name: str, config_type: type, *, help: str, description: str,
                 job: str, printout: Callable[[argparse.Namespace, Any, Any, float], object],
                 progress: bool) -> argparse.ArgumentParser:
    """Add the subcommand ``name`` of a job that writes one folder: its flags come from ``config_type``, with
    ``--out`` and ``--overwrite``. When it runs, the config is read from the flags, ``run(config, out)`` of the module
    ``job`` (imported only then, with torch) writes into ``--out`` while :func:`writing` holds it (``progress``: the
    job takes ``progress=``, from ``--no-progress``, which the module's ``PROGRESS = True`` declares), and
    ``printout(args, config, result, seconds)`` says what came out (``seconds``: the whole command's, model loading
    included)."""
    p = sub.add_parser(name, help=help, description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(p, config_type)
    add_output_arguments(p, "output folder")

    def main(args: argparse.Namespace) -> int:
        start = time.perf_counter()
        config = from_arguments(config_type, args)
        run = importlib.import_module(job).run
        with writing(args.out, name, args.overwrite):
            result = run(config, args.out, progress=not args.no_progress) if progress else run(config, args.out)
        printout(args, config, result, time.perf_counter() - start)
        return 0

    p.set_defaults(func=main)
    return p
