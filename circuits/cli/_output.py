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
from circuits.jobs import load
from circuits.results import check_output, overwrite_granted


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
    with output_lock(out), (overwrite_granted(out) if overwrite else contextlib.nullcontext()):
        yield out


def register_job(sub: argparse._SubParsersAction, job: Any) -> argparse.ArgumentParser:
    """Add the subcommand of ``job`` (a :class:`circuits.jobs.Job` that writes one folder): its flags come from the
    job's config, with ``--out`` and ``--overwrite`` (and ``--no-progress`` where the job shows progress). When it
    runs, the config is read from the flags and the job's ``run(config, out, progress=...)`` (imported only then, with
    torch) writes into ``--out`` while :func:`writing` holds it. The command's module, where the job names one
    (``job.cli``), gives the description (its docstring; else the job's help and its config's docstring) and may say
    what came out with ``printout(args, config, result, seconds)`` (``seconds``: the whole
    command's, model loading included)."""
    module = importlib.import_module(job.cli) if job.cli else None
    config_type = job.config_type()
    description = module.__doc__ if module is not None else f"{job.help}.\n\n{config_type.__doc__}"
    p = sub.add_parser(job.name, help=job.help, description=description,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(p, config_type)
    add_output_arguments(p, "output folder")
    printout = load(job.printout) if job.printout else getattr(module, "printout", None)

    def main(args: argparse.Namespace) -> int:
        start = time.perf_counter()
        config = from_arguments(config_type, args)
        run = job.runner()
        with writing(args.out, job.kind, args.overwrite):
            result = run(config, args.out, progress=job.progress and not args.no_progress)
        if printout is not None:
            printout(args, config, result, time.perf_counter() - start)
        else:
            print(f"-> {args.out}")
        return 0

    p.set_defaults(func=main)
    return p
