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
import math
import os
import re
import shutil
import stat
import socket
import sys
import tempfile
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import IO, Any, TypeVar

T = TypeVar("T")


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


def write_json(path: str | Path, data: Any, indent: int = 1, *, compact_numbers: bool = False) -> Path:
    """JSON, atomically; with ``compact_numbers`` each list of numbers on one line, its floats as short as they
    can be (:func:`compact_json`)."""
    data = to_jsonable(data)
    text = compact_json(data, indent) if compact_numbers else json.dumps(data, indent=indent)  # a bad value writes nothing
    return atomic_write(path, lambda f: f.write(text))


def _short_float(x: float) -> str:
    """``x`` as JSON, in the fewest digits that read back as the same float32 where a float32 holds ``x`` exactly (a
    value taken from a float32 tensor: ``0.14523457`` for ``0.14523456990718842``), else Python's own repr."""
    import numpy as np

    if math.isfinite(x) and float(np.float32(x)) == x:
        text = repr(float(str(np.float32(x))))  # float32's shortest digits, written as Python writes a float
        return text if float(np.float32(float(text))) == x else json.dumps(x)
    return json.dumps(x)


def _is_numbers(value: Any) -> bool:
    """A list of numbers, or of lists of numbers (at any depth), and nothing else."""
    return isinstance(value, list) and all(
        (isinstance(v, (int, float)) and not isinstance(v, bool)) or _is_numbers(v) for v in value)


def _numbers_text(value: list) -> str:
    return "[" + ",".join(_numbers_text(v) if isinstance(v, list) else
                          _short_float(v) if isinstance(v, float) else str(v) for v in value) + "]"


def compact_json(data: Any, indent: int = 1) -> str:
    """``json.dumps(data, indent=indent)`` with each list of numbers (a grid of numbers too) on one line, without
    spaces, and each float that a float32 holds exactly in float32's shortest digits: the same float32 values once
    read back (torch.tensor(...) of a saved grid equals the tensor it was saved from) in about half the text of an
    indented file (issue 44: the demo's summaries were 130 KB each). Other values are written as ``json.dumps``
    writes them, a float a float32 does not hold exactly in full."""
    lists: list[str] = []
    tag = os.urandom(6).hex()  # no string of the data can be taken for a placeholder

    def mark(value: Any) -> Any:
        if _is_numbers(value) and value:
            lists.append(_numbers_text(value))
            return f"\x00{tag}{len(lists) - 1}\x00"
        if isinstance(value, dict):
            return {k: mark(v) for k, v in value.items()}
        if isinstance(value, list):
            return [mark(v) for v in value]
        return value

    text = json.dumps(mark(data), indent=indent)
    return re.sub(rf'"\\u0000{tag}(\d+)\\u0000"', lambda m: lists[int(m.group(1))], text)


def write_text(path: str | Path, text: str) -> Path:
    return atomic_write(path, lambda f: f.write(text))


def _stored_once(obj: Any) -> Any:
    """``obj`` with every tensor that declares more elements than it stores (an ``expand``ed view, stride 0) made
    contiguous, so what circuits writes passes its own reader (:func:`check_loaded`)."""
    import torch

    if isinstance(obj, torch.Tensor):
        return obj.contiguous() if obj.numel() * obj.element_size() > obj.untyped_storage().nbytes() else obj
    if isinstance(obj, dict):
        return {k: _stored_once(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)) and not hasattr(obj, "_fields"):
        return type(obj)(_stored_once(v) for v in obj)
    return obj


def save_torch(obj: Any, path: str | Path) -> Path:
    """``torch.save``, atomically."""
    import torch

    obj = _stored_once(obj)
    return atomic_write(path, lambda f: torch.save(obj, f), mode="wb")


def load_torch(path: str | Path, what: str = "circuits", **kwargs: Any) -> Any:
    """``torch.load`` (tensors only, on the CPU); a missing, truncated or foreign file, or one holding a tensor that
    declares more than the file stores (:func:`check_loaded`), is one error naming it."""
    import torch

    path = check_regular(path)
    try:
        obj = torch.load(path, map_location="cpu", weights_only=True, **kwargs)
    except Exception as err:  # torch raises several types (UnpicklingError, RuntimeError, EOFError, ...)
        first = (str(err).strip().splitlines() or [""])[0][:160]
        raise ValueError(f"{path} cannot be read as a {what} file ({type(err).__name__}: {first}); it may be truncated "
                         "or written by something else") from None
    check_loaded(obj, path)
    return obj


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


# --- Tensors read back, checked against what they claim (issue 41) ----------------------------------------------
# (here, in the base with the readers, rather than a module of its own: the package's top folder holds its 14)
# ``torch.load(weights_only=True)`` rebuilds a tensor from the sizes and strides the file declares over the bytes it
# holds: a 2.8 KB file can declare a stride-0 tensor of 3e8 elements, which costs nothing until something makes it
# contiguous (a mean, a ``torch.cat``, a figure) and then asks for gigabytes. :func:`check_loaded` (run by
# :func:`load_torch` on everything it reads) refuses, in one line naming the file, any tensor that is not a
# plain dense CPU tensor of numbers: a sparse, quantized or nested one, or one declaring more elements than its stored
# bytes hold. Since a file is at most :data:`MAX_READ_BYTES`, no tensor read back implies more memory than
# its file's size.
#
# :class:`Shapes` then checks each named tensor of a file against the axes its reader expects (``("layer", "head",
# "pair")``), its kind (float, integer, bool) and, where asked, finiteness; an axis seen twice must have one size in the
# whole file (and may be given in advance: the pairs of ``pairs.jsonl``, the layers of ``sweep.json``), so a per-pair
# tensor of another pair count is named, not broadcast or indexed past.


class TensorError(ValueError):
    """A tensor read from a file is not what the file's reader expects; the message names the file and the tensor."""


KINDS = {"float": ("float16", "bfloat16", "float32", "float64"), "int": ("int8", "int16", "int32", "int64", "uint8"),
         "bool": ("bool",)}
KINDS["number"] = KINDS["float"] + KINDS["int"] + KINDS["bool"]
MAX_NESTING = 16  # nesting of dicts and lists in a result file circuits writes is at most 4


def _dtype_name(t: Any) -> str:
    return str(t.dtype).removeprefix("torch.")


def _stored_bytes(t: Any) -> int:
    return t.untyped_storage().nbytes()


def implied_bytes(t: Any) -> int:
    """The bytes ``t`` would take made contiguous: what a copy of it asks for."""
    return t.numel() * t.element_size()


def tensor_problem(t: Any) -> str | None:
    """Why ``t`` cannot be a tensor circuits wrote (None when it can): only dense CPU tensors of numbers, each element
    stored once or more (a view) but never declared beyond its stored bytes (stride 0, overlapping strides)."""
    import torch

    if t.layout != torch.strided:
        return f"a {str(t.layout).removeprefix('torch.')} tensor (circuits writes dense tensors only)"
    if _dtype_name(t) not in KINDS["number"]:
        return f"a {_dtype_name(t)} tensor (circuits writes float, integer and bool tensors only)"
    if t.is_quantized or getattr(t, "is_nested", False):
        return "a quantized or nested tensor (circuits writes dense tensors only)"
    if t.device.type != "cpu":
        return f"a tensor on {t.device} (read onto the CPU)"
    need, held = implied_bytes(t), _stored_bytes(t)
    if need > held:
        return (f"a tensor of shape {list(t.shape)} ({t.numel():,} elements, {need:,} bytes) over {held:,} stored "
                f"bytes (strides {list(t.stride())}): it declares more than the file holds")
    return None


def _is_tensor(obj: Any) -> bool:
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(obj, torch.Tensor)


def check_loaded(obj: Any, path: str | Path, where: str = "", depth: int = 0) -> None:
    """Every tensor in ``obj`` (what ``torch.load`` gave, walked through dicts, lists and tuples) passes
    :func:`tensor_problem`; else one :class:`TensorError` naming ``path`` and where in the file the tensor is."""
    if depth > MAX_NESTING:
        raise TensorError(f"{path} is nested too deeply to be a circuits file")
    if _is_tensor(obj):
        why = tensor_problem(obj)
        if why:
            raise TensorError(f"{path}: {where or 'the file'} is {why}; it was not written by circuits")
    elif isinstance(obj, dict):
        for k, v in obj.items():
            check_loaded(v, path, f"{where}.{k}" if where else str(k), depth + 1)
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            check_loaded(v, path, f"{where}[{i}]", depth + 1)


class Shapes:
    """The tensors of one file checked by name against their expected axes, with one size per axis name.

    ``Shapes(path, pair=(4, "pairs.jsonl"))`` fixes an axis in advance (its size and what said so); each
    :meth:`tensor` call then checks one tensor and records the sizes of the axes it meets first. Every failure is a
    :class:`TensorError` line naming the file, the tensor and what is wrong."""

    def __init__(self, path: str | Path, **known: tuple[int, str]) -> None:
        self.path = path
        self.sizes: dict[str, tuple[int, str]] = dict(known)

    def fail(self, what: str) -> TensorError:
        return TensorError(f"{self.path}: {what}; the file does not fit its result (rerun the job that made it)")

    def build(self, make: Callable[[], T], what: str, errors: tuple[type[Exception], ...] = (KeyError, TypeError,
                                                                                           ValueError)) -> T:
        """``make()`` (an object built from the checked tensors), any of ``errors`` it raises one :meth:`fail` line:
        ``what``, then the error's type and text."""
        try:
            return make()
        except errors as err:
            raise self.fail(f"{what} ({type(err).__name__}: {err})") from None

    def tensor(self, name: str, value: Any, axes: Sequence[str], kind: str = "float", *,
               finite: bool = False, no_inf: bool = False, some_measured: bool = False) -> Any:
        """``value``, when it is a tensor of ``kind`` whose axes are ``axes`` (sizes agreeing with every axis of that
        name met before); ``finite``: no NaN or infinity; ``no_inf``: NaN allowed (not measured), infinity not;
        ``some_measured``: not all NaN (a result where nothing was measured)."""
        if not _is_tensor(value):
            raise self.fail(f"{name} is {'missing' if value is None else 'a ' + type(value).__name__}, not a tensor "
                            f"[{', '.join(axes)}]")
        why = tensor_problem(value)
        if why:
            raise self.fail(f"{name} is {why}")
        if _dtype_name(value) not in KINDS[kind]:
            raise self.fail(f"{name} is a {_dtype_name(value)} tensor, not a {kind} one")
        if value.ndim != len(axes):
            raise self.fail(f"{name} has shape {list(value.shape)}, not the {len(axes)} axes [{', '.join(axes)}]")
        for axis, n in zip(axes, value.shape):
            if axis in self.sizes and self.sizes[axis][0] != n:
                size, source = self.sizes[axis]
                raise self.fail(f"{name} has shape {list(value.shape)}: {n} along its {axis} axis, where {source} "
                                f"has {size}")
            self.sizes.setdefault(axis, (int(n), name))
        if value.is_floating_point() and value.numel():
            if finite and not bool(value.isfinite().all()):
                raise self.fail(f"{name} holds NaN or infinite values")
            if no_inf and bool(value.isinf().any()):
                raise self.fail(f"{name} holds infinite values")
            if some_measured and bool(value.isnan().all()):
                raise self.fail(f"{name} is NaN everywhere: nothing was measured")
        return value
