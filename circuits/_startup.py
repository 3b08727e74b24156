"""Ctrl-C while the ``circuits`` console script imports the package (before :func:`circuits.cli.main` sets its own
handler): one line and exit 130, as at any later moment, instead of a KeyboardInterrupt traceback. The console script
runs ``from circuits.cli import main`` first, and those imports take about a second; ``python -m circuits`` catches
it in ``circuits/__main__.py``. Only the standard library is imported here."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time

# When the command line started (time.perf_counter), before it imported torch and the toolkit: set by the console
# script and ``python -m circuits`` (:func:`mark_start`), taken (and cleared) by the command's ``--timings``, which
# counts the time outside every stage as "other" so its total is the command's wall-clock time.
started: float | None = None


def mark_start() -> None:
    global started
    if started is None:
        started = time.perf_counter()


def take_start() -> float:
    """The command line's start (cleared, so a later command in the same process counts from its own), or now."""
    global started
    t, started = (started if started is not None else time.perf_counter()), None
    return t


def startup_interrupt(signum, frame):  # noqa: ANN001, ANN201
    if os.environ.get("CIRCUITS_DEBUG", "") not in ("", "0"):
        raise KeyboardInterrupt
    if os.environ.get("RANK", "0") == "0":
        print("circuits: interrupted", file=sys.stderr)
    raise SystemExit(130)


def quiet_interrupts() -> None:
    """Set :func:`startup_interrupt` for SIGINT when Python's default handler is the one in place (an importer's own
    handler stays); :func:`circuits.cli.main` replaces it with its own while a command runs."""
    if threading.current_thread() is threading.main_thread() \
            and signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, startup_interrupt)
