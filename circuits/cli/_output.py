"""The output location of a command: checked before any work, locked while the job runs."""

from __future__ import annotations

import argparse
import contextlib
import os
from collections.abc import Callable, Iterator
from pathlib import Path

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
