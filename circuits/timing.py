"""Where a job's time goes: wall-clock seconds per named stage (load, candidates, filtering, sweep, write, report).

Library steps mark their stages with :func:`stage`; nothing is recorded unless a caller records
(:func:`recording`), so the marks cost nothing otherwise. Stages are exclusive: time inside a nested stage counts
for it, not for the one around it. ``circuits --timings FILE <command>`` adds a command's stages to ``FILE`` (JSON)
and prints the table of everything ``FILE`` holds, which is how ``make demo`` ends with one table for its two
commands (docs/speed.md).
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import math
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from circuits.io import read_json, write_json

# The stages the demo reports, in pipeline order (others are listed after them).
STAGES = ("load", "candidates", "filtering", "sweep", "write", "report")


@dataclass
class Stages:
    """Seconds per stage, and the stack of open stages (the innermost one is being timed)."""

    seconds: dict[str, float] = field(default_factory=dict)
    _open: list[tuple[str, float]] = field(default_factory=list)

    def _charge(self, now: float) -> None:
        if self._open:
            name, since = self._open[-1]
            self.seconds[name] = self.seconds.get(name, 0.0) + now - since

    def enter(self, name: str) -> None:
        now = time.perf_counter()
        self._charge(now)
        self._open.append((name, now))

    def exit(self) -> None:
        now = time.perf_counter()
        self._charge(now)
        self._open.pop()
        if self._open:  # the outer stage resumes now
            self._open[-1] = (self._open[-1][0], now)


_current: contextvars.ContextVar[Stages | None] = contextvars.ContextVar("circuits_stages", default=None)


@contextlib.contextmanager
def stage(name: str) -> Iterator[None]:
    """Count the time of the block for stage ``name`` in the active recording (if any)."""
    rec = _current.get()
    if rec is None:
        yield
        return
    rec.enter(name)
    try:
        yield
    finally:
        rec.exit()


def timed(name: str) -> Callable:
    """Decorator: the function's calls count for stage ``name``."""

    def wrap(fn: Callable) -> Callable:
        @functools.wraps(fn)
        def inner(*args, **kwargs):
            with stage(name):
                return fn(*args, **kwargs)

        return inner

    return wrap


@contextlib.contextmanager
def recording() -> Iterator[Stages]:
    """Record the stages of everything run inside the block."""
    rec = Stages()
    token = _current.set(rec)
    try:
        yield rec
    finally:
        _current.reset(token)


# The time of a command outside every stage (imports, parsing, setting up): with it the table's total is the
# command's wall-clock time, not the stages' sum alone.
OTHER = "other"
OTHER_TEXT = "other (imports, setup: outside the stages)"


def with_other(seconds: dict[str, float], wall: float) -> dict[str, float]:
    """``seconds`` and, as :data:`OTHER`, what of the ``wall`` seconds no stage counted."""
    return {**seconds, OTHER: max(0.0, wall - sum(seconds.values()))}


def table(seconds: dict[str, float]) -> str:
    """A plain-text table: one line per stage (pipeline order), the time outside them, then the total (the
    commands' wall-clock time when :func:`with_other` added it)."""
    names = [s for s in STAGES if s in seconds] + sorted(k for k in seconds if k not in (*STAGES, OTHER))
    names += [OTHER] if OTHER in seconds else []
    label = {OTHER: OTHER_TEXT}
    width = max([len(label.get(n, n)) for n in names] + [5])
    lines = [f"{'stage':<{width}}  seconds"]
    lines += [f"{label.get(n, n):<{width}}  {seconds[n]:7.1f}" for n in names]
    lines.append(f"{'total' + (' (wall clock)' if OTHER in seconds else ''):<{width}}  {sum(seconds.values()):7.1f}")
    return "\n".join(lines)


# What --timings writes: an object that says it is circuits' timings, so a flat JSON object of numbers somebody else
# wrote (an editor's settings.json) is never taken for one and rewritten.
TIMINGS_TAG = "circuits timings"


def _seconds_ok(v: object) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v >= 0


def read_file(path: str | Path) -> dict[str, float]:
    """The stages saved in ``path`` by ``--timings`` (empty when there is no file yet). A file --timings did not
    write -- not JSON, JSON without its ``"format": "circuits timings"`` tag, seconds that are not finite numbers
    >= 0 -- or a folder is one error naming it, so ``circuits --timings FILE`` can refuse it before the command runs
    (and never writes over it)."""
    path = Path(path)
    if path.is_dir():
        raise ValueError(f"--timings {path} is a folder; name a JSON file that --timings writes (it is created if absent)")
    if not path.exists():
        return {}
    try:
        saved = read_json(path, limit=1 << 20)
    except ValueError:
        saved = None
    stages = saved.get("seconds") if isinstance(saved, dict) and saved.get("format") == TIMINGS_TAG else None
    if not isinstance(stages, dict) or not all(isinstance(k, str) for k in stages):
        raise ValueError(f"--timings {path} holds something other than the stage timings --timings writes (a JSON "
                         f"object tagged \"format\": \"{TIMINGS_TAG}\"); name a new file, or one written by --timings")
    bad = [k for k, v in stages.items() if not _seconds_ok(v)]
    if bad:
        raise ValueError(f"--timings {path}: stage {bad[0]!r} holds {stages[bad[0]]!r}, not seconds (a finite number "
                         ">= 0); name a new file, or fix that one")
    return {k: float(v) for k, v in stages.items()}


def add_to_file(path: str | Path, seconds: dict[str, float]) -> dict[str, float]:
    """Add ``seconds`` to the stages saved in ``path`` (created if absent); returns the sums. A file --timings did
    not write is refused (:func:`read_file`) and left as it is."""
    path = Path(os.path.realpath(path))  # a link to the file is followed, not replaced
    saved = read_file(path)
    total = {k: saved.get(k, 0.0) + seconds.get(k, 0.0) for k in {*saved, *seconds}}
    bad = [k for k, v in seconds.items() if not _seconds_ok(v)]
    if bad:
        raise ValueError(f"stage {bad[0]!r} took {seconds[bad[0]]!r} seconds; not written to --timings {path}")
    write_json(path, {"format": TIMINGS_TAG, "seconds": total})
    return total
