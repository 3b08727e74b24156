"""Atomic files and folders: the one place results are written.

Every file is written to a temporary sibling and renamed into place, and every result folder is built
in a temporary sibling folder that replaces the target at the end, so an interrupted job never leaves a
half-written result, and a failed write removes its temporary file.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import enum
import fcntl
import json
import os
import shutil
import socket
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any


def _write_step() -> None:
    """A point inside every write, just before the rename that publishes it: the worst moment for an interruption.

    It does nothing here. The kill tests (tests/integration/test_kill.py) run the command line through a wrapper that
    replaces it with one that SIGKILLs the process at its N-th call; every write looks it up at call time."""


def to_jsonable(obj: Any) -> Any:
    """Dataclasses, tuples, paths, enums and tensors as plain JSON values."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: to_jsonable(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, enum.Enum):
        return obj.value
    if isinstance(obj, dict):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_jsonable(v) for v in obj]
    if isinstance(obj, Path):
        return str(obj)
    if hasattr(obj, "tolist"):
        return obj.tolist()
    return obj


def atomic_write(path: str | Path, write: Callable[[IO], None], mode: str = "w") -> Path:
    """Call ``write(file)`` on a temporary sibling of ``path``, then rename it into place (mode 0644)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}-tmp-", dir=path.parent)
    try:
        with os.fdopen(fd, mode, **({"encoding": "utf-8"} if "b" not in mode else {})) as f:
            write(f)
        os.chmod(tmp, 0o644)
        _write_step()
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    return path


def write_json(path: str | Path, data: Any, indent: int = 1) -> Path:
    """JSON, atomically."""
    text = json.dumps(to_jsonable(data), indent=indent)  # serialise first: a bad value writes nothing
    return atomic_write(path, lambda f: f.write(text))


def write_text(path: str | Path, text: str) -> Path:
    return atomic_write(path, lambda f: f.write(text))


def save_torch(obj: Any, path: str | Path) -> Path:
    """``torch.save``, atomically."""
    import torch

    return atomic_write(path, lambda f: torch.save(obj, f), mode="wb")


def load_torch(path: str | Path, what: str = "circuits", **kwargs: Any) -> Any:
    """``torch.load`` (tensors only, on the CPU); a missing, truncated or foreign file is one error naming it."""
    import torch

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path} not found")
    try:
        return torch.load(path, map_location="cpu", weights_only=True, **kwargs)
    except Exception as err:  # torch raises several types (UnpicklingError, RuntimeError, EOFError, ...)
        first = (str(err).strip().splitlines() or [""])[0][:160]
        raise ValueError(f"{path} cannot be read as a {what} file ({type(err).__name__}: {first}); it may be truncated "
                         "or written by something else") from None


def read_json(path: str | Path) -> Any:
    """JSON from ``path``; a missing or corrupt file is one error that names it."""
    path = Path(path)
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except FileNotFoundError:
        raise FileNotFoundError(f"{path} not found") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise ValueError(f"{path} is not valid JSON ({err}); it may be truncated or corrupt") from None


def read_jsonl(path: str | Path) -> list[Any]:
    """JSON Lines; a bad line is one error naming the file and line."""
    path = Path(path)
    out = []
    with open(path, encoding="utf-8") as f:
        for i, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError as err:
                raise ValueError(f"{path}, line {i}: not valid JSON ({err}); the file may be truncated") from None
    return out


def write_jsonl(path: str | Path, rows: list[Any]) -> Path:
    text = "".join(json.dumps(to_jsonable(r)) + "\n" for r in rows)
    return atomic_write(path, lambda f: f.write(text))


@contextlib.contextmanager
def atomic_dir(out: str | Path) -> Iterator[Path]:
    """Yield a temporary folder that replaces ``out`` when the block finishes without error.

    On error the temporary folder is removed and ``out`` is left as it was.
    """
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}-tmp-", dir=out.parent))
    tmp.chmod(0o755)  # mkdtemp makes it private; results are meant to be shared
    try:
        yield tmp
        _write_step()
        if out.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{out.name}-old-", dir=out.parent))
            os.replace(out, old / "x")
            _write_step()  # the old result is set aside (remove_stale_temporaries puts it back if we die here)
            os.replace(tmp, out)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


class OutputError(ValueError):
    """An output location a job must not or cannot write to, found before any work is done."""


def lock_path(out: str | Path) -> Path:
    out = Path(out).absolute()
    return out.parent / f".{out.name}.lock"


def _restore_set_aside(folder: Path, pattern: str = ".*-old-*") -> None:
    """Put back a result that an interrupted :func:`atomic_dir` had set aside (``.<name>-old-*/x``) when nothing
    replaced it."""
    for old in sorted(folder.glob(pattern)):
        target = folder / old.name[1:].rsplit("-old-", 1)[0]
        if (old / "x").exists() and not target.exists():
            os.replace(old / "x", target)


def remove_stale_temporaries(out: str | Path) -> list[Path]:
    """Clear what an interrupted write of ``out`` left: a result set aside but not replaced goes back in place;
    ``.<name>-tmp-*`` and ``.<name>-old-*`` beside ``out`` and inside it are removed. Call only while holding
    ``out``'s lock (then nothing else is writing them)."""
    out = Path(out).absolute()
    _restore_set_aside(out.parent, f".{out.name}-old-*")
    found = [*out.parent.glob(f".{out.name}-tmp-*"), *out.parent.glob(f".{out.name}-old-*")]
    if out.is_dir():
        _restore_set_aside(out)
        found += [*out.glob(".*-tmp-*"), *out.glob(".*-old-*"), *out.glob("*/.*-tmp-*")]
    for p in found:
        if p.is_dir():
            shutil.rmtree(p, ignore_errors=True)
        else:
            p.unlink(missing_ok=True)
    return found


@contextlib.contextmanager
def output_lock(out: str | Path) -> Iterator[None]:
    """Hold an exclusive lock on the output location ``out`` for the block (a lock file beside it, released when
    the process ends however it ends). A second job on the same ``out`` is refused with a line naming the first;
    leftovers of an interrupted earlier write are removed once the lock is held."""
    path = lock_path(out)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.read(fd, 4096).decode(errors="replace").strip() or "another process"
        os.close(fd)
        raise OutputError(f"{out} is being written by another circuits job ({holder}); wait for it to finish or "
                          "choose another --out") from None
    try:
        now = datetime.datetime.now().isoformat(timespec="seconds")
        os.ftruncate(fd, 0)
        os.write(fd, f"pid {os.getpid()} on {socket.gethostname()}, started {now}: {' '.join(sys.argv)}".encode())
        remove_stale_temporaries(out)
        yield
    finally:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
        os.close(fd)
