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


# Set once Ctrl-C arrived during start-up: its SystemExit can land inside a callback Python runs for the import
# machinery, which prints it as "Exception ignored" and goes on; the unraisable hook below keeps that quiet and
# :func:`circuits.cli.main` then ends at once with 130.
interrupted = False


def startup_interrupt(signum, frame):  # noqa: ANN001, ANN201
    global interrupted
    if os.environ.get("CIRCUITS_DEBUG", "") not in ("", "0"):
        raise KeyboardInterrupt
    if not interrupted and os.environ.get("RANK", "0") == "0":
        print("circuits: interrupted", file=sys.stderr)
    interrupted = True
    raise SystemExit(130)


def _quiet_unraisable(hook):  # noqa: ANN001, ANN202
    def quiet(unraisable):  # noqa: ANN001, ANN202
        if interrupted and unraisable.exc_type in (SystemExit, KeyboardInterrupt):
            return  # our own start-up interruption, swallowed where Python could not raise it
        hook(unraisable)
    return quiet


def _quiet_excepthook(hook):  # noqa: ANN001, ANN202
    def quiet(exc_type, exc, tb):  # noqa: ANN001, ANN202
        if not interrupted:
            return hook(exc_type, exc, tb)
        # Our start-up interruption, reaching the top wrapped in another error: Python 3.11 turns an exception raised
        # in a descriptor's __set_name__ (a dataclass field while a class body runs) into a RuntimeError, and an
        # import the interruption cut short fails later. "circuits: interrupted" is printed already; end as at 130.
        import atexit

        atexit._run_exitfuncs()  # the exit handlers a normal exit runs (this process's temporary folder)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(130)
    return quiet


def quiet_interrupts() -> None:
    """Set :func:`startup_interrupt` for SIGINT when Python's default handler is the one in place (an importer's own
    handler stays); :func:`circuits.cli.main` replaces it with its own while a command runs."""
    if threading.current_thread() is threading.main_thread() \
            and signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        # first: they must be there once SIGINT can land
        sys.unraisablehook = _quiet_unraisable(sys.unraisablehook)
        sys.excepthook = _quiet_excepthook(sys.excepthook)
        signal.signal(signal.SIGINT, startup_interrupt)


# --- temporary folders: one per process, removed at its end; a killed process's removed by the next run ------------

# The temporary folders circuits makes in $TMPDIR carry the process id after these prefixes, so the next run can tell
# the leftovers of a killed process (SIGKILL runs no clean-up) from a running one's.
TEMP_PREFIXES = ("circuits-run-", "circuits-eval-", "circuits-hf-config-")
_private: list[str] = []


def private_temp() -> str:
    """This process's own temporary folder, ``$TMPDIR/circuits-run-<pid>-XXXX``, made on first use and removed when
    the process ends (a SIGKILLed one's by the next run: :func:`remove_stale_temps`)."""
    import atexit
    import shutil
    import tempfile

    if _private and os.path.isdir(_private[0]):
        return _private[0]
    path = tempfile.mkdtemp(prefix=f"{TEMP_PREFIXES[0]}{os.getpid()}-")
    _private[:] = [path]
    atexit.register(shutil.rmtree, path, True)
    return path


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # another user's: alive as far as we can tell
        return True
    return True


def remove_stale_temps() -> list[str]:
    """Remove the temporary folders of circuits processes that are gone (killed before their clean-up): those in
    ``$TMPDIR`` named by :data:`TEMP_PREFIXES` with a process id that no longer runs, and owned by this user. The
    folders removed."""
    import shutil
    import tempfile

    root, gone = tempfile.gettempdir(), []
    try:
        names = os.listdir(root)
    except OSError:
        return gone
    for name in names:
        prefix = next((p for p in TEMP_PREFIXES if name.startswith(p)), None)
        pid = name[len(prefix):].split("-", 1)[0] if prefix else ""
        path = os.path.join(root, name)
        if not pid.isdigit() or int(pid) == os.getpid() or _alive(int(pid)):
            continue
        try:
            if os.path.isdir(path) and not os.path.islink(path) and os.stat(path).st_uid == os.getuid():
                shutil.rmtree(path, ignore_errors=True)
                gone.append(path)
        except OSError:
            continue
    return gone


def private_torch_caches() -> None:
    """Point torch's compile caches (``torchinductor_<user>``, which ``import transformer_lens`` creates in $TMPDIR
    through torch._dynamo) into this process's own temporary folder, unless the user chose a folder
    (``TORCHINDUCTOR_CACHE_DIR``): a command leaves nothing in $TMPDIR. Call before torch._dynamo is imported."""
    if "TORCHINDUCTOR_CACHE_DIR" not in os.environ:
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(private_temp(), "torchinductor")


