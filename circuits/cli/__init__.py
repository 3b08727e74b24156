"""The ``circuits`` command line: one subcommand per job of the job table (:data:`circuits.jobs.JOBS`).

A job's subcommand takes its flags from the job's config (:func:`circuits.config.add_arguments`), which imports no
torch, and runs the job's ``run(config, out, progress=...)`` and then its ``printout``
(:func:`circuits.cli.commands.register_job`); a command with flags of its own (identify, finetune, evaluate, export,
report) names its ``register`` in :mod:`circuits.cli.commands`, which adds its subcommand and sets ``func``. A
subcommand's heavy modules (torch, the model, the job) are imported only when it runs, so ``circuits --help`` and a
bad flag answer at once. A job that shows progress (``Job.progress``) gets ``--no-progress`` here, declared once.

Under ``torchrun`` (``torchrun --nproc-per-node N -m circuits identify|finetune ...``) the process group is started
here, once, from torchrun's environment (:func:`circuits.distributed.init_from_env`) and ended on the way out; rank 0
prints errors.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
import time
from collections.abc import Sequence

from circuits._startup import quiet_interrupts, startup_interrupt as _startup_interrupt

# The `circuits` console script runs `from circuits.cli import main` before main() sets its handler: a Ctrl-C in the
# imports below is one line (circuits/__init__.py set it already; here again for an importer of circuits.cli alone).
if os.path.basename(sys.argv[0] if sys.argv else "") == "circuits":
    quiet_interrupts()

from circuits.threads import configure_threads, prefer_passive_waiting  # noqa: E402

prefer_passive_waiting()  # before the subcommands import torch, whose OpenMP runtime reads the policy once

from circuits.cli.commands import register_job  # noqa: E402
from circuits import jobs  # noqa: E402


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="circuits",
        description="Find, explain and precisely fine-tune the components of a language model that do arithmetic.",
    )
    parser.add_argument("--debug", action="store_true",
                        help="show the full traceback of an error (also: CIRCUITS_DEBUG=1), for bug reports")
    parser.add_argument("--timings", metavar="FILE",
                        help="add the command's seconds per stage (load, candidates, filtering, sweep, write, report) "
                             "to FILE (JSON; summed over commands) and print the table of all it holds")
    sub = parser.add_subparsers(dest="command", required=True)
    for job in (j for j in jobs.JOBS if j.command):
        p = jobs.load(job.register)(sub) if job.register else register_job(sub, job)
        if job.progress:
            p.add_argument("--no-progress", action="store_true", help="no progress bars")
    return parser


def one_line(err: BaseException) -> str:
    from circuits.io import DiskFullError

    text = " ".join(str(err).split()) or type(err).__name__
    if isinstance(err, (ValueError, FileNotFoundError, NotADirectoryError, PermissionError, DiskFullError)):
        return text
    return f"{type(err).__name__}: {text}"


def _one_line_warnings(command: str, main_rank: bool):  # noqa: ANN202
    """Warnings (fewer pairs than asked, a key rule that selects nothing, ...) as one line each on stderr, from rank 0
    only, instead of Python's file-and-source-line form."""
    import warnings

    def show(message, category, filename, lineno, file=None, line=None) -> None:  # noqa: ANN001
        if main_rank:
            print(f"circuits {command}: note: {' '.join(str(message).split())}", file=sys.stderr)

    previous, warnings.showwarning = warnings.showwarning, show
    return previous


_INTERRUPTED = threading.Event()
_TERMINATED = threading.Event()
_PREVIOUS_TERM: list = []


def _note_interrupts():  # noqa: ANN202
    """Ctrl-C raises KeyboardInterrupt as Python's default does, and is also remembered: a library that turns it into
    an error of its own (transformers' lazy imports report a module that could not be imported) is still read as the
    interruption it was. Returns the handler it replaced (None off the main thread, where none is set)."""
    def handler(signum, frame):  # noqa: ANN001, ANN202
        _INTERRUPTED.set()
        raise KeyboardInterrupt

    def terminate(signum, frame):  # noqa: ANN001, ANN202
        _TERMINATED.set()
        handler(signum, frame)

    _INTERRUPTED.clear()
    _TERMINATED.clear()
    if threading.current_thread() is not threading.main_thread():
        return None
    # SIGTERM (kill, a batch system's stop, torchrun ending its workers) unwinds like Ctrl-C, so the job's temporary
    # folders and its output lock are removed on the way out (exit 143); its default would end the process at once.
    # Also where SIGINT is ignored (a job started with `nohup ... &`: exactly the batch jobs SIGTERM stops).
    if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        _PREVIOUS_TERM.append(signal.signal(signal.SIGTERM, terminate))
    if signal.getsignal(signal.SIGINT) not in (signal.default_int_handler, _startup_interrupt):
        return None  # a caller's own handler (a notebook, a test runner), or SIGINT ignored, stays
    return signal.signal(signal.SIGINT, handler)


def _interrupted(err: BaseException) -> bool:
    """Whether ``err`` comes from a Ctrl-C: one was received while the command ran, or its chain of causes holds a
    KeyboardInterrupt."""
    if _INTERRUPTED.is_set():
        return True
    seen: set[int] = set()
    e: BaseException | None = err
    while e is not None and id(e) not in seen:
        if isinstance(e, KeyboardInterrupt):
            return True
        seen.add(id(e))
        e = e.__cause__ or e.__context__
    return False


def _disk_full(err: BaseException, args: argparse.Namespace | None) -> BaseException:
    """``err``, or the disk-full error it stands for (ENOSPC, or a library's write error on a disk with no room)."""
    from pathlib import Path

    from circuits.io import DiskFullError, disk_full

    if isinstance(err, DiskFullError):
        return err
    out = getattr(args, "out", None) if args is not None else None
    full = disk_full(err, Path(out or ".").absolute() / "x") if isinstance(err, (OSError, RuntimeError)) else None
    return full if full is not None else err


def main(argv: Sequence[str] | None = None) -> int:
    """Run a subcommand. Every error is one line on stderr and exit code 2 (a traceback only with ``--debug`` or
    ``CIRCUITS_DEBUG=1``); a full disk is named as such; an interrupted job says how to resume, exit code 130, and
    Ctrl-C at any other moment (start-up, imports, shutdown) is one line too. Under ``torchrun`` the process group
    is started here, and only rank 0 prints an error (one line, not one per rank)."""
    debug = os.environ.get("CIRCUITS_DEBUG", "") not in ("", "0") or "--debug" in (sys.argv[1:] if argv is None else argv)
    from circuits import _startup

    if _startup.interrupted:  # Ctrl-C during start-up that Python swallowed inside an import callback: said already
        return 130
    previous = _note_interrupts()
    try:
        code = _main(argv)
        return 143 if code == 130 and _TERMINATED.is_set() else code
    except KeyboardInterrupt:
        if debug:
            raise
        if os.environ.get("RANK", "0") == "0":  # under torchrun, one line for all ranks
            print("circuits: interrupted", file=sys.stderr)
        return 143 if _TERMINATED.is_set() else 130  # SIGTERM before the command's own try (its imports): 128 + 15
    except Exception:  # an import that Ctrl-C broke half-way fails later with an error of its own (numpy: "cannot
        if debug or not _INTERRUPTED.is_set():  # load module more than once per process"): still the interruption
            raise
        if os.environ.get("RANK", "0") == "0":
            print("circuits: interrupted", file=sys.stderr)
        return 143 if _TERMINATED.is_set() else 130
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)
        while _PREVIOUS_TERM:
            signal.signal(signal.SIGTERM, _PREVIOUS_TERM.pop())


def _bad_flags(args: argparse.Namespace) -> bool:
    """Whether the command's flags are refused: its config built (or, for finetune, its flags checked) from the
    flags, each field inside the range it declares (:func:`circuits.config.check_ranges`), before torch or the job
    is imported, so a bad value is one line at once. Under torchrun rank 0 says it."""
    check = getattr(args, "check", None)
    if check is None:
        return False
    try:
        check(args)
    except ValueError as err:
        if args.debug or os.environ.get("CIRCUITS_DEBUG", "") not in ("", "0"):
            raise
        if os.environ.get("RANK", "0") == "0":
            print(f"circuits {args.command}: error: {one_line(err)}", file=sys.stderr)
        elif int(os.environ.get("WORLD_SIZE", "1")) > 1:
            time.sleep(3)  # rank 0 reports first, as for an error in the job (below)
        return True
    return False


def _main(argv: Sequence[str] | None = None) -> int:
    from circuits._startup import take_start

    start = take_start()
    parser = build_parser()
    args = parser.parse_args(argv)
    if _bad_flags(args):
        return 2
    from circuits._startup import private_torch_caches, remove_stale_temps

    remove_stale_temps()  # what killed runs left in $TMPDIR
    private_torch_caches()  # before torch._dynamo: its cache folder inside this process's own temporary folder
    import torch  # after the flags are read: --help and a bad flag import no torch

    from circuits import distributed, timing

    debug = args.debug or os.environ.get("CIRCUITS_DEBUG", "") not in ("", "0")
    launch = previous_show = None
    try:
        if args.timings:  # a file --timings did not write is refused before the command runs, not after
            timing.read_file(args.timings)
        launch = distributed.init_from_env()
        previous_show = _one_line_warnings(args.command, distributed.is_main())
        configure_threads()  # the cores this process may use, or CIRCUITS_THREADS / OMP_NUM_THREADS (docs/speed.md)
        with timing.recording() as stages:
            code = int(args.func(args) or 0)
        if args.timings and distributed.is_main():
            total = timing.add_to_file(args.timings, timing.with_other(stages.seconds, time.perf_counter() - start))
            print(f"Time per stage, {torch.get_num_threads()} threads ({args.timings}):\n{timing.table(total)}")
        return code
    except KeyboardInterrupt:
        if debug:
            raise
        if distributed.is_main():
            print(f"circuits {args.command}: interrupted; run the same command to resume", file=sys.stderr)
        return 130
    except Exception as err:
        if debug:
            raise
        if _interrupted(err):  # Ctrl-C inside a library that re-raises it as its own error (transformers' lazy imports)
            if distributed.is_main():
                print(f"circuits {args.command}: interrupted; run the same command to resume", file=sys.stderr)
            return 130
        err = _disk_full(err, args)
        expected = isinstance(err, (ValueError, OSError))
        hint = "" if expected else " (this looks like a bug: rerun with --debug and report the traceback)"
        if distributed.is_main():
            print(f"circuits {args.command}: error: {one_line(err)}{hint}", file=sys.stderr)
        elif int(os.environ.get("WORLD_SIZE", "1")) > 1:
            # Rank 0 reports; the others fail a moment later, so that torchrun's ending of the remaining workers (a
            # SIGTERM, which unwinds as an interruption) does not reach rank 0 before it has said what was wrong.
            time.sleep(3)
        return 2
    finally:
        if previous_show is not None:
            import warnings

            warnings.showwarning = previous_show
        if launch is not None:
            launch.close()


if __name__ == "__main__":
    sys.exit(main())
