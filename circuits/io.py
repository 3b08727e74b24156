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
import errno
import fcntl
import hashlib
import json
import os
import re
import shutil
import stat
import socket
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any


def _write_step() -> None:
    """A point inside every write, just before the rename that publishes it: the worst moment for an interruption.

    It does nothing here. The kill tests (tests/integration/test_kill.py, tests/kill_steps.py) run the command line
    through a wrapper that replaces it with one that SIGKILLs the process at its N-th call; every write looks it up
    at call time."""


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


NAME_MAX = 255  # bytes in one file name (Linux, macOS)
# What a write of this module leaves while it runs (and, if killed, until the next job clears it):
# ``.<name>.circuits-tmp-`` or ``.<name>.circuits-old-`` and mkstemp's 8 random characters. Only names of this form
# are ever removed as leftovers, so a user's ``.backup-old-20240101`` is never taken for one.
TEMPORARY = re.compile(r"^\..+\.circuits-(tmp|old)-[a-z0-9_]{8}$")


def sibling_prefix(name: str, tag: str) -> str:
    """``.<name>.circuits-<tag>-``, the prefix of a temporary sibling of ``name``; a name too long to take it (and
    mkstemp's 8 characters) within :data:`NAME_MAX` bytes is cut and given a hash of the whole, so it stays unique."""
    full = f".{name}.circuits-{tag}-"
    if len(os.fsencode(full)) + 8 <= NAME_MAX:
        return full
    digest = hashlib.sha1(os.fsencode(name)).hexdigest()[:12]
    short = name
    while len(os.fsencode(short)) > 160:
        short = short[:-1]
    return f".{short}~{digest}.circuits-{tag}-"


class DiskFullError(OSError):
    """A write failed because the file system holding it is full (or over quota)."""

    def __str__(self) -> str:
        return str(self.strerror)


def _free_bytes(folder: Path) -> int | None:
    try:
        st = os.statvfs(folder)
    except OSError:
        return None
    return st.f_bavail * st.f_frsize


def disk_full(err: BaseException, path: Path) -> DiskFullError | None:
    """The error to raise instead of ``err`` when writing ``path`` failed because its disk is full: ENOSPC or EDQUOT,
    or an error from a library that wrote through its own buffers (torch.save's ``unexpected pos``) while the file
    system has (almost) no room left. None otherwise."""
    full = isinstance(err, OSError) and err.errno in (errno.ENOSPC, errno.EDQUOT)
    free = _free_bytes(path.parent)
    if not full and isinstance(err, RuntimeError) and free is not None and free < 1 << 20 \
            and re.search(r"unexpected pos|writ|space", str(err), re.IGNORECASE):
        full = True
    if not full:
        return None
    left = f"{free / 2**20:.1f} MiB left" if free is not None else "no room left"
    return DiskFullError(errno.ENOSPC, f"the disk is full: writing {path} failed ({left} on the file system holding "
                                       f"{path.parent}); free some space or choose an --out on another disk")


def atomic_write(path: str | Path, write: Callable[[IO], None], mode: str = "w") -> Path:
    """Call ``write(file)`` on a temporary sibling of ``path``, then rename it into place (mode 0644). A full disk
    is a :class:`DiskFullError` naming it, with nothing left behind."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=sibling_prefix(path.name, "tmp"), dir=path.parent)
    try:
        with os.fdopen(fd, mode, **({"encoding": "utf-8"} if "b" not in mode else {})) as f:
            write(f)
        os.chmod(tmp, 0o644)
        _write_step()
        os.replace(tmp, path)
    except BaseException as err:
        full = disk_full(err, path) if isinstance(err, Exception) else None  # while the partial file still fills it
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        if full is not None:
            raise full from None
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

    path = check_regular(path)
    try:
        return torch.load(path, map_location="cpu", weights_only=True, **kwargs)
    except Exception as err:  # torch raises several types (UnpicklingError, RuntimeError, EOFError, ...)
        first = (str(err).strip().splitlines() or [""])[0][:160]
        raise ValueError(f"{path} cannot be read as a {what} file ({type(err).__name__}: {first}); it may be truncated "
                         "or written by something else") from None


# The largest text or JSON file a job reads back (results, markers, configs, parts, MIB graphs, timings, data files):
# checked before reading, so a file that is not what circuits wrote cannot make a reader allocate gigabytes.
MAX_READ_BYTES = int(os.environ.get("CIRCUITS_MAX_READ_BYTES", 2 << 30))


def check_regular(path: str | Path, limit: int | None = None) -> Path:
    """``path``, when it is a regular file (links followed) of at most ``limit`` bytes (:data:`MAX_READ_BYTES`);
    a directory, FIFO, device (a link to ``/dev/zero``) or oversized file is one ValueError naming it, before any
    read (a FIFO would block, a device never end)."""
    path = Path(path)
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise FileNotFoundError(f"{path} not found") from None
    if not stat.S_ISREG(st.st_mode):
        what = "a folder" if stat.S_ISDIR(st.st_mode) else "not a regular file (a FIFO, device or socket)"
        raise ValueError(f"{path} is {what}; circuits reads only regular files")
    limit = MAX_READ_BYTES if limit is None else limit
    if st.st_size > limit:
        raise ValueError(f"{path} is {st.st_size} bytes, more than the {limit} a circuits file may hold")
    return path


def read_json(path: str | Path, limit: int | None = None) -> Any:
    """JSON from ``path``; a missing, corrupt, too deeply nested or non-regular file is one error that names it."""
    text = read_text(path, limit)
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        raise ValueError(f"{path} is not valid JSON ({err}); it may be truncated or corrupt") from None
    except RecursionError:
        raise ValueError(f"{path} is nested too deeply to be a circuits file") from None


def read_text(path: str | Path, limit: int | None = None) -> str:
    """UTF-8 text from ``path`` (a regular file, :func:`check_regular`; a leading byte-order mark, as some editors
    write, is dropped); a missing or undecodable file is one error that names it."""
    path = check_regular(path, limit)
    try:
        return path.read_text(encoding="utf-8-sig")
    except FileNotFoundError:
        raise FileNotFoundError(f"{path} not found") from None
    except UnicodeDecodeError as err:
        raise ValueError(f"{path} is not UTF-8 text ({err}); it may be corrupt") from None


def read_jsonl(path: str | Path) -> list[Any]:
    """JSON Lines; a bad or too deeply nested line is one error naming the file and line."""
    path = Path(path)
    out = []
    for i, line in enumerate(read_text(path).split("\n"), 1):
        if not line.strip():
            continue
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError as err:
            raise ValueError(f"{path}, line {i}: not valid JSON ({err}); the file may be truncated") from None
        except RecursionError:
            raise ValueError(f"{path}, line {i}: nested too deeply to be a circuits pair or row") from None
    return out


def write_jsonl(path: str | Path, rows: list[Any]) -> Path:
    text = "".join(json.dumps(to_jsonable(r)) + "\n" for r in rows)
    return atomic_write(path, lambda f: f.write(text))


def real_path(out: str | Path) -> Path:
    """``out`` with symbolic links followed (the place a write lands; a link is never replaced)."""
    return Path(os.path.realpath(Path(out).expanduser()))


@contextlib.contextmanager
def atomic_dir(out: str | Path) -> Iterator[Path]:
    """Yield a temporary folder that replaces ``out`` when the block finishes without error.

    On error the temporary folder is removed and ``out`` is left as it was. A symbolic link ``out`` is followed: the
    folder it points to is what is replaced, and the link stays. Callers check first that ``out`` holds nothing but
    what they may replace (:func:`circuits.results.check_output`).
    """
    out = real_path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=sibling_prefix(out.name, "tmp"), dir=out.parent))
    tmp.chmod(0o755)  # mkdtemp makes it private; results are meant to be shared
    try:
        yield tmp
        _write_step()
        if out.exists():
            old = Path(tempfile.mkdtemp(prefix=sibling_prefix(out.name, "old"), dir=out.parent))
            (old / "name").write_text(out.name)  # which folder to put back if this process dies before the swap
            os.replace(out, old / "x")
            _write_step()  # the old result is set aside (remove_stale_temporaries puts it back if we die here)
            os.replace(tmp, out)
            shutil.rmtree(old, ignore_errors=True)
        else:
            try:
                os.replace(tmp, out)
            except OSError as err:  # another process made ``out`` meanwhile (an unlocked write: a cache, the API)
                if err.errno not in (errno.ENOTEMPTY, errno.EEXIST):
                    raise
                raise OutputError(f"{out} was written by another process while this one worked; nothing of it was "
                                  "replaced. Run again (a finished cache is then reused), or choose another --out") from None
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


class OutputError(ValueError):
    """An output location a job must not or cannot write to, found before any work is done."""


def lock_path(out: str | Path) -> Path:
    """The lock file of the output location ``out``: ``.<name>.lock`` beside the place ``out`` resolves to (a link
    and its target share one lock); a name too long for that gets a shortened, hashed one."""
    out = real_path(out)
    name = f".{out.name}.lock"
    if len(os.fsencode(name)) > NAME_MAX:
        name = sibling_prefix(out.name, "lock")[:-1] + ".lock"
    return out.parent / name


def _temporaries(folder: Path, prefix: str) -> list[Path]:
    """This module's temporaries in ``folder`` whose names start with ``prefix`` (no glob: a name may hold ``[``)."""
    try:
        return sorted(p for p in folder.iterdir() if p.name.startswith(prefix) and TEMPORARY.match(p.name))
    except (FileNotFoundError, NotADirectoryError):
        return []


def _restore_set_aside(folder: Path, prefix: str = ".") -> None:
    """Put back a result that an interrupted :func:`atomic_dir` had set aside (``.<name>.circuits-old-*/x``) when
    nothing replaced it."""
    for old in _temporaries(folder, prefix):
        if "-old-" not in old.name[-13:] or not (old / "x").exists():
            continue
        named = old / "name"
        name = named.read_text() if named.is_file() else old.name[1:].rsplit(".circuits-old-", 1)[0]
        target = folder / name
        if name and "/" not in name and not target.exists():
            os.replace(old / "x", target)


def remove_stale_temporaries(out: str | Path) -> list[Path]:
    """Clear what an interrupted write of ``out`` left: a result set aside but not replaced goes back in place;
    ``.<name>.circuits-tmp-XXXXXXXX`` and ``.<name>.circuits-old-XXXXXXXX`` beside ``out`` and inside it (and in its
    sub-folders) are removed, nothing else. Call only while holding ``out``'s lock (then nothing else is writing them)."""
    out = real_path(out)
    mine = (sibling_prefix(out.name, "tmp"), sibling_prefix(out.name, "old"))
    _restore_set_aside(out.parent, mine[1])
    found = [p for p in _temporaries(out.parent, ".") if p.name.startswith(mine)]
    if out.is_dir():
        _restore_set_aside(out)
        found += _temporaries(out, ".")
        found += [p for sub in sorted(out.iterdir()) if sub.is_dir() and not sub.is_symlink()
                  for p in _temporaries(sub, ".") if "-tmp-" in p.name[-13:]]
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
    created = [p for p in (path.parent, *path.parent.parents) if not p.exists()]  # removed again if left empty
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except BaseException:
        _remove_empty(created)
        raise
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
        _remove_empty(created)


def _remove_empty(folders: list[Path]) -> None:
    """Remove the folders a job created for its output and left empty (a job refused or failed early), innermost
    first; one that holds anything stays."""
    for folder in folders:
        try:
            folder.rmdir()
        except OSError:
            return
