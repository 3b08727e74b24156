"""One typed result per step, each saving and loading itself.

Every step of the method returns a :class:`Result`: identify (:class:`~circuits.identify.result.IdentifyResult`),
validate (``KnockoutResult``, ``TransferResult``), explain (``AttentionRoles``, ``AttentionViews``, ``LogitLens``),
fine-tune (``FinetuneResult``, ``SFTComparison``) and evaluate (``EvalResult``). A result has a ``kind``, a
``config`` (what made it: a frozen :class:`~circuits.config.Config` of the class's ``config_type``) and a format
``version``; ``save(folder)`` writes it atomically with ``config.json`` and a ``circuits.json`` marker (its kind and
version), and ``load(folder)`` reads it back equal (``Result.load(r.save(f)) == r``, the typed config included).
Whatever reads a saved result -- the report, ``--heads-from``, the experiment scripts -- goes through
:func:`load_result` or a class's ``load``, never through dict keys it guesses.

Every file of a result is read through :mod:`circuits.io` (``load_torch``, ``read_json``, ``read_jsonl``), and the
config through :func:`read_config` alone, so a missing, truncated or foreign file is one :class:`ResultError` line
naming it. A folder without the ``circuits.json`` marker holds no circuits result.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import importlib
import math
import os
import re
import tempfile
import types
import typing
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, ClassVar, Generic, TypeVar

from circuits import jobs
from circuits.config import Config
from circuits.io import (TEMPORARY, OutputError, atomic_dir, read_json, real_path, save_torch, sibling_prefix, write_json,
                         write_jsonl)
from circuits.timing import timed

MARKER = "circuits.json"
# the scripts (plotly.js, circuitsvis) the pages of a result folder, or of a folder of results, share
ASSETS = "_assets"
R = TypeVar("R", bound="Result")
C = TypeVar("C", bound=Config)

# kind -> "module:Class", a view of the job table (circuits.jobs); imported on first use (no registration by import
# side effect).
RESULT_TYPES: dict[str, str] = {o.kind: jobs.where(o.type) for o in jobs.outputs()}
# The kinds results were saved under before each kind was named as its command (issue 38): read as the new ones, so
# folders saved earlier still load.
OLD_KINDS = {"logit_lens": "lens", "attention_roles": "attention", "attention_views": "attention-views",
             "word_problem_heads": "word_problems", "evaluation": "evaluate"}


def a_kind(kind: object) -> str:
    """``kind`` with its indefinite article: "an identify", "a screen" (a message read "a identify result")."""
    word = str(kind)
    return f"{'an' if word[:1].lower() in 'aeiou' else 'a'} {word}"


def kind_of(saved: str) -> str:
    """The kind a saved ``kind`` field names today (an old name read as its new one, :data:`OLD_KINDS`)."""
    return OLD_KINDS.get(saved, saved)


class ResultError(ValueError):
    """A folder that holds no result of the kind asked for, or an unreadable one."""


def result_type(kind: str) -> type[Result]:
    try:
        module, name = RESULT_TYPES[kind].split(":")
    except KeyError:
        raise ResultError(f"Unknown result kind {kind!r}; known: {', '.join(RESULT_TYPES)}") from None
    return getattr(importlib.import_module(module), name)


def read_marker(folder: str | Path) -> dict[str, Any] | None:
    """The ``circuits.json`` marker of a result folder (None when there is none)."""
    path = Path(folder) / MARKER
    if not path.is_file():
        return None
    try:
        marker = read_json(path)
    except ValueError as err:
        raise ResultError(str(err)) from None
    if not isinstance(marker, dict) or not isinstance(marker.get("kind"), str):
        raise ResultError(f"{path} is not a circuits result marker (no 'kind')")
    if not isinstance(marker.get("version", 1), int) or isinstance(marker.get("version"), bool):
        raise ResultError(f"{path}: the format version {marker['version']!r} is not a whole number")
    return {**marker, "kind": kind_of(marker["kind"])}


def detect_kind(folder: str | Path) -> str | None:
    """The kind of result ``folder`` holds (its marker's), or None when it holds none."""
    folder = Path(folder)
    if not folder.is_dir():
        return None
    marker = read_marker(folder)
    return None if marker is None else str(marker["kind"])


def results_below(folder: str | Path) -> dict[str, str]:
    """The result folders directly below ``folder``, by name, with the kind each holds (unreadable markers left out)."""
    folder = Path(folder)
    found = {}
    for sub in sorted(folder.iterdir()) if folder.is_dir() else []:
        try:
            kind = detect_kind(sub)
        except ResultError:
            continue
        if kind is not None:
            found[sub.name] = kind
    return found


def load_result(folder: str | Path) -> Result:
    """Whatever result ``folder`` holds, as its typed class."""
    kind = detect_kind(folder)
    if kind is None:
        raise ResultError(f"{folder} holds no circuits result (no {MARKER}: pass a folder a circuits job or script "
                          "saved)")
    return result_type(kind).load(folder)


# What every result folder may hold beside its job's files: the marker, the config, the shared scripts, and the
# tables an experiment script's ``plot`` writes beside the result it saved (experiments/_tables.py).
COMMON_FILES = frozenset({MARKER, ASSETS, "config.json", "published.json", "published.md"})
# The names circuits writes in result folders: every job's files (circuits.jobs lists them per job, the figures its
# script's ``plot`` adds included) and the common ones.
CIRCUITS_FILES = COMMON_FILES | jobs.job_files()


def own_files(folder: Path) -> frozenset[str]:
    """The names the saved result in ``folder`` may hold, so a new save may replace them: the files of the jobs that
    write its kind (:func:`circuits.jobs.files_of`) and :data:`COMMON_FILES`; :data:`CIRCUITS_FILES` for a folder
    without a marker. A folder holding anything else beside its result is not replaced."""
    kind = detect_kind(folder)
    return COMMON_FILES | (jobs.files_of(kind) if kind in RESULT_TYPES else CIRCUITS_FILES)


def _contents(folder: Path) -> list[Path]:
    """What ``folder`` holds, dot-files included, less the temporaries an interrupted write left (the job clears
    those once it holds the lock)."""
    return sorted(p for p in folder.iterdir() if not TEMPORARY.match(p.name))


def _names(paths: list[Path], limit: int = 4) -> str:
    names = [p.name + ("/" if p.is_dir() else "") for p in paths]
    return ", ".join(names[:limit]) + (f" and {len(names) - limit} more" if len(names) > limit else "")


def unfinished_run(folder: Path, kind: str, work: str) -> bool:
    """Whether ``folder`` holds a ``kind`` job's own run stopped before its marker was written: its working folder
    ``work`` (``parts``, ``identify``) and, besides it, only names the job writes (:func:`circuits.jobs.files_of`,
    ``config.json``, ``_assets``) -- a SIGKILL at any step of the final save leaves that, and the same command
    resumes it. A folder with a marker is a finished result, never an unfinished run."""
    entries = [p for p in folder.iterdir() if not p.name.startswith(".")]
    if (folder / MARKER).exists() or not (folder / work).is_dir() or (folder / work).is_symlink():
        return False
    own = jobs.files_of(kind) | COMMON_FILES | {work}
    return all(p.name in own and not p.is_symlink() for p in entries)


def _refusal(out: Path, shown: str | Path, kind: str, container: bool) -> str | None:
    """Why a ``kind`` job may not replace the folder ``out`` (None when it may)."""
    entries = _contents(out)
    if not entries:
        return None
    found = detect_kind(out)
    if found is None and result_type(kind).in_place and result_type(kind).unfinished(out):
        return None  # its own run, stopped before the result was saved: the same command resumes it
    if found is None and container:  # identify --task all: a folder of identify results, one per task
        bad = [p for p in entries if p.name != ASSETS and (p.is_symlink() or not p.is_dir() or detect_kind(p) != kind)]
        if not bad:
            for p in entries:
                if p.name == ASSETS:
                    continue
                why = _refusal(p, p, kind, False)
                if why is not None:
                    return why
            return None
        what = {detect_kind(p) if p.is_dir() and not p.is_symlink() else None for p in bad}
    else:
        what = {found}
    if what != {kind}:
        held = ", ".join(sorted(f"{a_kind(k)} result" if k else "files circuits did not write" for k in what))
        return (f"--out {shown} already holds {held}; {a_kind(kind)} job only replaces its own results (found: "
                f"{_names(entries)}). Choose another --out, or pass --overwrite to replace it")
    if result_type(kind).in_place:  # its folder is its working folder: written file by file, nothing else touched
        return None
    own = own_files(out)
    extra = [p for p in entries if p.name not in own or p.is_symlink()]  # a result writes no links
    if extra:
        return (f"--out {shown} holds {_names(extra)} beside its {kind} result; a result folder is replaced whole, so "
                f"only one holding nothing but its own files is (a result or file inside it is never removed). Move "
                f"them out, or choose another --out")
    return None


# Working folders an ``in_place`` job keeps inside its result folder (a stopped run resumes from them), and the lock
# files a job holds on a sub-folder (``identify --task all``): circuits wrote them too.
WORK_FOLDERS = frozenset({"parts", "identify"})
_LOCK = re.compile(r"^\..+\.lock$")


def _foreign(folder: Path, depth: int = 0) -> list[Path]:
    """What in ``folder`` no circuits job wrote: anything not named as a job's file (:data:`CIRCUITS_FILES`), a work
    folder or a lock, a symbolic link, or a sub-folder that is not a circuits result holding only such things (a
    ``.git``, a user's notes, a pairs file). ``--overwrite`` replaces a job's files, never these."""
    found = []
    for p in _contents(folder):
        if p.is_symlink():
            found.append(p)
        elif p.name in CIRCUITS_FILES or p.name in WORK_FOLDERS or (_LOCK.match(p.name) and p.is_file()):
            continue
        elif p.is_dir() and depth < 4 and detect_kind(p) is not None:
            found += _foreign(p, depth + 1)
        else:
            found.append(p)
    return found


def check_inputs(out: str | Path, reads: Iterable[tuple[str, str | Path]]) -> None:
    """Refuse, before any work, an ``--out`` that is or holds one of the command's inputs (``reads``: flag and path,
    e.g. ``("--pairs-file", "proj/p.jsonl")``), or lies inside one (``knockout --heads-from id --out id/ko``): a
    result never replaces nor nests inside what it was made from."""
    target = real_path(out)
    for flag, path in reads:
        if not path:
            continue
        src = real_path(path)
        if src == target or target in src.parents:
            raise OutputError(f"--out {out} would replace {flag} {path}, an input of this command; choose another "
                              "--out")
        if src in target.parents:
            raise OutputError(f"--out {out} lies inside {flag} {path}, an input of this command; a result is never "
                              "written into what it reads. Choose an --out outside it")


_GRANTED: contextvars.ContextVar[tuple[Path, ...]] = contextvars.ContextVar("circuits_overwrite", default=())


@contextlib.contextmanager
def overwrite_granted(out: str | Path) -> Iterator[None]:
    """While the block runs, the ``--overwrite`` a command was given for ``out`` holds for every check of ``out`` and
    of what lies below it (the job's own :meth:`Result.save` included): the decision is made once, before the work,
    never refused after it."""
    token = _GRANTED.set((*_GRANTED.get(), real_path(Path(out).expanduser())))
    try:
        yield
    finally:
        _GRANTED.reset(token)


def _granted(out: Path) -> bool:
    target = real_path(out)
    return any(target == g or g in target.parents for g in _GRANTED.get())


def check_output(out: str | Path, kind: str, *, overwrite: bool = False, container: bool = False) -> Path:
    """Check, before any work, that a ``kind`` job may write its result to ``out``.

    Allowed: a path that does not exist yet (in a folder this process can write to), an empty folder, or a folder
    that holds a ``kind`` result and nothing else (the files it wrote, as its marker lists them; it will be
    replaced). With ``container`` (``identify --task all``), ``out`` may also hold ``kind`` results in sub-folders.
    Anything else (a file, a folder of other things -- dot-files such as ``.git`` included --, a result with a
    user's file or another result inside it, the current folder) is refused with one line, unless ``overwrite``.
    A symbolic link is followed: the check and the write are of the place it points to, and the link stays.
    """
    out = Path(out).expanduser()
    target = real_path(out)
    overwrite = overwrite or _granted(out)
    here = Path(os.path.realpath(Path.cwd()))
    if target == here or target in here.parents or target == Path(target.anchor) \
            or out.absolute() == Path.cwd() or out.absolute() in Path.cwd().parents:
        raise OutputError(f"--out {out} is the current folder or one of its parents; name a new folder for the result, "
                          "e.g. --out results/run1")
    if target.exists() and not target.is_dir():
        if overwrite:
            return out
        raise OutputError(f"--out {out} is an existing file; a {kind} result is a folder. Choose another --out, or "
                          "pass --overwrite to replace the file")
    if target.is_dir() and overwrite:  # it replaces circuits' own files, never what no circuits job wrote
        foreign = _foreign(target)
        if foreign:
            raise OutputError(f"--out {out} holds {_names(foreign)}, which no circuits job wrote; --overwrite only "
                              "replaces circuits results, never a folder holding anything else. Move them out, or "
                              "choose another --out")
    if target.is_dir() and not overwrite:
        why = _refusal(target, out, kind, container)
        if why is not None:
            raise OutputError(why)
    check_writable(target)
    return out


def check_writable(out: Path) -> None:
    """Create and remove a temporary file in the first existing ancestor of ``out`` (a read-only or virtual
    file system fails here, not after the work). Its name has the form of :data:`~circuits.io.TEMPORARY`, so one a
    SIGKILL left between the two steps is taken for what it is (a leftover of circuits', cleared by the next job),
    never for a file the folder's owner wrote."""
    parent = out.absolute()
    if parent.is_file():  # a file that will be replaced: its folder must be writable
        parent = parent.parent
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir():
        raise OutputError(f"cannot write to {out}: {parent} is a file, not a folder")
    try:
        fd, tmp = tempfile.mkstemp(prefix=sibling_prefix("probe", "tmp"), dir=parent)
        os.close(fd)
        os.unlink(tmp)
    except OSError as err:
        raise OutputError(f"cannot write to {out}: no file can be created in {parent} ({err.strerror})") from None


class lazy_type:  # noqa: N801 (used as a class attribute, like the class it stands for)
    """A class attribute naming a class ``"module:Name"`` imported when first read (a result's ``config_type`` whose
    module imports the result's own module)."""

    def __init__(self, ref: str) -> None:
        self.ref = ref

    def __get__(self, obj: Any, owner: Any = None) -> type:
        module, name = self.ref.split(":")
        return getattr(importlib.import_module(module), name)


@dataclasses.dataclass(eq=False, repr=False)
class Result(Generic[C]):
    """Base of every step's result.

    Subclasses are ``@dataclass(eq=False, repr=False)`` classes named with their config class, ``class
    KnockoutResult(Result[KnockoutConfig])``: that is their ``config_type``, and the ``config`` field (first) holds
    one (a subclass of it too: a figure script's config adds its own fields). They set ``kind`` and ``version``; they
    implement :meth:`_write` (the files, into a temporary folder) and :meth:`_read` (back from a folder, given the
    config :func:`read_config` read). Equality compares every field, tensors with :func:`torch.equal` (NaN equal
    to NaN) and floats exactly; the repr names the kind, the config and the shapes, never whole tensors.
    """

    kind: ClassVar[str]
    version: ClassVar[int] = 1
    config_type: ClassVar[type[Config]]
    # A result whose folder is also a job's working folder (checkpoints, finished rows) is written file by file,
    # each atomically, the marker last; every other result replaces its folder whole.
    in_place: ClassVar[bool] = False
    # The working folder inside it (``parts``, ``identify``, ``runs``) whose presence, with only the job's own files
    # beside it, marks a run stopped before its end (:meth:`unfinished`, :func:`unfinished_run`); None: no such folder.
    work: ClassVar[str | None] = None
    # What made the result (circuits.versions.provenance: backend, TransformerLens/transformers/torch versions, the
    # toolkit's version and commit): set by save, read back by load; None until then. Not a field, so never part of
    # ``==``: results made on two lines are equal when everything but their provenance is.
    provenance: ClassVar[dict[str, Any] | None] = None
    config: C

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for base in cls.__dict__.get("__orig_bases__", ()):  # class X(Result[XConfig]): XConfig, unless X names one
            arg = typing.get_args(base)[:1]
            if typing.get_origin(base) is Result and arg and isinstance(arg[0], type) and "config_type" not in cls.__dict__:
                cls.config_type = arg[0]

    def __post_init__(self) -> None:
        if not isinstance(self.config, self.config_type):
            raise TypeError(f"{type(self).__name__}'s config must be a {self.config_type.__name__} (or a subclass), "
                            f"not {type(self.config).__name__}; build one, e.g. {self.config_type.__name__}(...)")

    def config_json(self) -> dict[str, Any]:
        return self.config.to_json()

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        if type(self.config) is not type(other.config) or self.config != other.config:
            return False
        return all(same(getattr(self, f.name), getattr(other, f.name))
                   for f in dataclasses.fields(self) if f.compare and f.name != "config")  # type: ignore[arg-type]

    __hash__ = None  # type: ignore[assignment]  # results are mutable

    def __repr__(self) -> str:
        parts = [f"config={config_summary(self.config)}"]
        for f in dataclasses.fields(self):  # type: ignore[arg-type]
            if f.name != "config" and f.repr:
                parts.append(f"{f.name}={brief(getattr(self, f.name))}")
        return f"{type(self).__name__}[{self.kind}]({', '.join(parts)})"

    @timed("write")
    def save(self, folder: str | Path, *, overwrite: bool = False) -> Path:
        """Write the result into ``folder`` atomically (a finished folder replaces the old one at once).

        ``folder`` may be new, empty, or hold a result of the same kind; a folder of anything else is refused
        (:class:`~circuits.io.OutputError`) unless ``overwrite``. Under ``torchrun`` only rank 0 writes (every rank
        holds the same gathered result); the others return at once."""
        folder = Path(folder)
        from circuits.distributed import is_main

        if not is_main():
            return folder
        made_by = self.made_by()
        read = self.pairs_read()
        if read is not None:
            made_by["pairs_file"] = read
        if self.in_place:  # the job's working folder, checked when the job started; only our own files are written
            folder.mkdir(parents=True, exist_ok=True)
            self._write(folder)
            write_json(folder / "config.json", self.config_json())
            write_json(folder / MARKER, {"kind": self.kind, "version": self.version, "provenance": made_by})
            return folder
        check_output(folder, self.kind, overwrite=overwrite)
        with atomic_dir(folder) as tmp:
            self._write(tmp)
            write_json(tmp / "config.json", self.config_json())
            files = sorted({p.name for p in tmp.iterdir()} | {MARKER})  # what a later save may replace
            write_json(tmp / MARKER, {"kind": self.kind, "version": self.version, "files": files,
                                      "provenance": made_by})
        return folder

    def summary_json(self, summary: dict[str, Any] | None = None) -> dict[str, Any]:
        """What ``summary.json`` holds: ``summary`` (default :meth:`summary`) and, for pairs read from a file, its
        ``pairs_file`` record (:meth:`pairs_read`)."""
        summary = self.summary() if summary is None else summary
        read = self.pairs_read()
        return summary if read is None or "pairs_file" in summary else {**summary, "pairs_file": read}

    def pairs_read(self) -> dict[str, Any] | None:
        """The ``--pairs-file`` this result's pairs came from (None: the task's templates or a saved result's pairs):
        its absolute path and the SHA-256 of its bytes, as the result kept them when the job read the file (identify's
        ``pair_stats``, with the lines read), else read when the result is saved (``sha256`` None if the file is gone
        by then: the pairs themselves are in the result). Saved in ``summary.json`` and the marker's provenance, where
        the report's made-by line reads it (issue 40)."""
        kept = (getattr(self, "pair_stats", None) or {}).get("pairs_file")
        if isinstance(kept, dict) and kept.get("path"):
            return dict(kept)
        name = getattr(self.config, "pairs_file", "")
        if not (isinstance(name, str) and name):
            return None
        import hashlib

        path = Path(name).expanduser().resolve()
        try:
            digest: str | None = hashlib.sha256(path.read_bytes()).hexdigest()
        except OSError:
            digest = None
        return {"path": str(path), "sha256": digest}

    def made_by(self) -> dict[str, Any]:
        """The result's provenance: the one it was loaded with, else this process's (which it keeps from now on)."""
        if self.provenance is None:
            from circuits.versions import provenance

            object.__setattr__(self, "provenance", provenance())
        return dict(self.provenance)  # type: ignore[arg-type]

    @classmethod
    def load(cls: type[R], folder: str | Path) -> R:
        """The result saved in ``folder``; a folder of another kind, of a newer format, or with a missing,
        truncated or invalid file is one :class:`ResultError` line naming the folder and what is wrong."""
        folder = Path(folder)
        if not folder.is_dir():
            raise FileNotFoundError(f"No result folder at {folder}")
        marker = read_marker(folder)
        if marker is None:
            raise ResultError(f"{folder} holds no circuits result (no {MARKER}); pass the folder {a_kind(cls.kind)} job "
                              "or script saved")
        cls.check_header(marker, folder)
        config = read_config(folder, cls.config_type)
        made_by = marker.get("provenance")
        try:
            result = cls._read(folder, config)
            check_result_types(result, folder)
            object.__setattr__(result, "provenance", dict(made_by) if isinstance(made_by, dict) else None)
            return result
        except FileNotFoundError as err:
            raise ResultError(f"{folder} holds an incomplete {cls.kind} result: {err}") from None
        except ResultError:
            raise
        except ValueError as err:  # load_torch, read_json and read_jsonl name the file
            raise ResultError(f"{folder} holds an unreadable {cls.kind} result: {err}") from None
        except (KeyError, TypeError, IndexError, AttributeError) as err:
            for path in sorted(folder.glob("*.json")):  # a file that is not a JSON object at all: name it
                try:
                    top = read_json(path)
                except ValueError:
                    continue
                if not isinstance(top, dict):
                    raise ResultError(f"{path}: a JSON {type(top).__name__}, not the object the {cls.kind} result writes "
                                      "there; rerun the job that made it") from None
            raise ResultError(f"{folder} holds {a_kind(cls.kind)} result whose files lack what this version reads "
                              f"({type(err).__name__}: {err}); rerun the job that made it") from None

    @classmethod
    def check_header(cls, saved: dict[str, Any], where: str | Path) -> None:
        """That ``saved`` (a marker, or a one-file result) names this class's kind (an old name read as today's) in a
        format this version reads; else one :class:`ResultError` naming ``where``."""
        if kind_of(saved.get("kind", cls.kind)) != cls.kind:
            raise ResultError(f"{where} holds {a_kind(saved['kind'])} result, not {cls.kind}")
        if int(saved.get("version", 1)) > cls.version:
            raise ResultError(f"{where} was written by a newer circuits (format {saved['version']}; this one reads "
                              f"up to {cls.version}); upgrade circuits to read it")

    @classmethod
    def unfinished(cls, folder: Path) -> bool:
        """Whether ``folder`` holds the working files this job writes before its result (an ``in_place`` kind's run
        stopped before its end, which the same command resumes: :func:`unfinished_run` on its :attr:`work` folder,
        and, killed during its final save, the files it writes); never true for results saved whole."""
        return cls.work is not None and unfinished_run(folder, cls.kind, cls.work)

    def _write(self, folder: Path) -> None:
        raise NotImplementedError

    @classmethod
    def _read(cls: type[R], folder: Path, config: Any) -> R:
        raise NotImplementedError


def _fits(value: Any, hint: Any) -> bool:
    """Whether a value read from JSON has the type a result field declares (int, float, str, bool, list[...],
    dict; other hints are not checked here)."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is bool:
        return isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if hint is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if hint is str:
        return isinstance(value, str)
    if hint is list or origin is list:
        return isinstance(value, list) and (not args or all(_fits(v, args[0]) for v in value))
    if hint is dict or origin is dict:
        return isinstance(value, dict)
    if origin in (typing.Union, types.UnionType):
        return any(_fits(value, a) for a in args)
    if hint is type(None):
        return value is None
    return True


def _mismatch(value: Any, hint: Any, where: str, depth: int = 0) -> str | None:
    """Where ``value`` (a loaded result's field) is not of the type its annotation ``hint`` declares: the first
    ``where.path`` and what is there, or None. Checks int, float, str, bool, lists, tuples, dict values, unions,
    named tuples (a :class:`~circuits.types.Head`'s layer and head) and dataclasses, recursively; ``Any``, tensors and
    other classes are taken as they are (their own readers check them)."""
    if hint is Any or hint is object:
        return _named_mismatch(value, where, where.rsplit(".", 1)[-1].split("[", 1)[0], depth)
    if depth > 12 or isinstance(hint, (str, typing.TypeVar)):
        return None
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    here = lambda: f"{where} is {brief(value, 40)} ({type(value).__name__}), not {getattr(hint, '__name__', hint)}"  # noqa: E731
    if hint in (bool, int, float, str):
        return None if _fits(value, hint) else here()
    if origin in (typing.Union, types.UnionType):
        fits = [_mismatch(value, a, where, depth + 1) for a in args]
        if any(f is None for f in fits):
            return None
        # an arm whose kind the value has, wrong inside (a dict with a string where a number is): that field
        deeper = [f for a, f in zip(args, fits) if a is not type(None) and not f.startswith(f"{where} is ")]
        return deeper[0] if deeper else here()
    if hint is type(None):
        return None if value is None else here()
    if origin in (list, tuple, set, frozenset) or hint in (list, tuple):
        if not isinstance(value, (list, tuple, set, frozenset)):
            return here()
        inner = [a for a in args if a is not Ellipsis]
        items = list(value)
        for i, v in enumerate(items):
            a = inner[min(i, len(inner) - 1)] if origin is tuple and Ellipsis not in args and inner else \
                (inner[0] if inner else Any)
            bad = _mismatch(v, a, f"{where}[{i}]", depth + 1)
            if bad:
                return bad
        return None
    if origin is dict or hint is dict:
        if not isinstance(value, dict):
            return here()
        vh = args[1] if len(args) == 2 else Any
        for k, v in value.items():
            bad = _mismatch(v, vh, f"{where}.{k}", depth + 1)
            if bad:
                return bad
        return None
    if isinstance(hint, type) and issubclass(hint, tuple) and hasattr(hint, "_fields"):  # a NamedTuple (Head, ...)
        if not isinstance(value, tuple):
            return here()
        hints = typing.get_type_hints(hint)
        for name, v in zip(hint._fields, value):
            bad = _mismatch(v, hints.get(name, Any), f"{where}.{name}", depth + 1)
            if bad:
                return bad
        return None
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return None if not isinstance(value, hint) else _dataclass_mismatch(value, where, depth + 1)
    return None


# Inside a field declared loosely (``dict[str, Any]``: a table's rows, a job's statistics), the names that always hold
# numbers (or None, or lists and dicts of them) and those that hold heads ([layer, head, ...] with integer layer and
# head): a string there is refused as a string in a typed field is.
NUMERIC_KEYS = ("n", "n_*", "acc", "acc_*", "accuracy", "accuracy_*", "*_accuracy", "*_prob", "*_effect", "*_effects",
                "seconds", "*_seconds", "share", "shares", "share_*", "spearman*", "offset", "exact", "screen", "error",
                "error_*", "*_rank", "*_size", "*_missed_at_*", "layers", "ks", "mean", "std", "delta", "delta_*",
                "in_A", "in_B", "writing_start", "word_perplexity", "perplexity", "losses", "samples_per_s", "steps",
                "samples", "tuned_parameters", "total_parameters", "head_counts", "digits", "words", "gsm8k", "mmlu",
                "ci_*")
HEAD_KEYS = ("heads", "*_heads", "shared_with_templates", "ranking", "random_orders")
# ... and the names that always hold shares of pairs (accuracies) or of heads: a number there outside [0, 1] is
# refused as impossible (a knockout accuracy of 7.5 was drawn as "750%"; issue 41). NaN (nothing to share) passes.
RATE_KEYS = ("acc", "accuracy", "accuracy_*", "*_accuracy", "share", "shares", "share_*")
# ... and the names that always hold a mean probability of the answer (identify's pair statistics, transfer's before
# and after, the neuron knockout's): a mean answer probability of 1.5 was drawn (issue 41's re-run).
PROB_KEYS = ("*answer_prob", "prob_before", "prob_after")


def _named_mismatch(value: Any, where: str, key: str, depth: int = 0) -> str | None:
    """:data:`NUMERIC_KEYS` and :data:`HEAD_KEYS` checked in a loosely declared value (recursively)."""
    import fnmatch

    if depth > 16:
        return None
    if isinstance(value, dict):
        for k, v in value.items():
            bad = _named_mismatch(v, f"{where}.{k}", str(k), depth + 1)
            if bad:
                return bad
        return None
    heads = any(fnmatch.fnmatchcase(key, p) for p in HEAD_KEYS)
    if isinstance(value, (list, tuple)):
        if heads and value and all(isinstance(h, (list, tuple)) and len(h) >= 2 and not isinstance(h[0], (list, tuple))
                                   for h in value):
            for i, h in enumerate(value):
                if not all(isinstance(x, int) and not isinstance(x, bool) for x in h[:2]) \
                        or not all(x is None or _fits(x, float) for x in h[2:]):
                    return f"{where}[{i}] is {brief(list(h), 40)}, not a head [layer, head(, effect)] of numbers"
            return None
        for i, v in enumerate(value):
            bad = _named_mismatch(v, f"{where}[{i}]", key, depth + 1)
            if bad:
                return bad
        return None
    if any(fnmatch.fnmatchcase(key, p) for p in NUMERIC_KEYS) and value is not None and not _fits(value, float):
        return f"{where} is {brief(value, 40)} ({type(value).__name__}), not a number"
    if _fits(value, float) and not math.isnan(value) and not 0 <= value <= 1:
        if any(fnmatch.fnmatchcase(key, p) for p in RATE_KEYS):
            return f"{where} is {value!r}, not a share in [0, 1]"
        if any(fnmatch.fnmatchcase(key, p) for p in PROB_KEYS):
            return f"{where} is {value!r}, not a probability in [0, 1]"
    return None


def _dataclass_mismatch(obj: Any, where: str, depth: int = 0) -> str | None:
    try:
        hints = typing.get_type_hints(type(obj))
    except Exception:  # noqa: BLE001 (an annotation this module cannot resolve: not checked)
        return None
    for f in dataclasses.fields(obj):
        if f.name in ("config", "provenance") or not f.init:
            continue
        bad = _mismatch(getattr(obj, f.name), hints.get(f.name, Any), f"{where}{'.' if where else ''}{f.name}", depth)
        if bad:
            return bad
    return None


def check_result_types(result: Any, folder: Path) -> None:
    """Every field of a loaded result of the type its class declares (nested lists, dicts, heads, dataclasses
    included), else one :class:`ResultError` naming the folder and the field: a string read where a number was
    written is refused here, not drawn or compared later."""
    bad = _dataclass_mismatch(result, "")
    if bad:
        raise ResultError(f"{folder}: field {bad}; the result's files were changed or written by something else "
                          "(rerun the job that made it)")


def number(data: Any, key: str, path: Path, default: Any = None, kind: type = float) -> Any:
    """``data[key]`` (``default`` when absent) as a ``kind`` (float or int), else one :class:`ResultError` naming
    ``path`` and the field."""
    v = data.get(key, default) if isinstance(data, dict) else default
    if v is None and default is None:
        return None
    if not _fits(v, int if kind is int else float):
        raise ResultError(f"{path}: field {key!r} is {brief(v, 40)} ({type(v).__name__}), not {kind.__name__}")
    return kind(v)


def check_rate(values: Any, field: str, path: Path) -> None:
    """Every number in ``values`` (nested lists) a share or probability: finite and in [0, 1]; else one
    :class:`ResultError` naming ``path``, the field and the value (a 7.5 is no accuracy, and was drawn as 750%)."""
    import numpy as np

    flat = np.asarray(values, dtype=float).ravel() if np.size(values) else np.zeros(0)
    bad = flat[~(np.isfinite(flat) & (flat >= 0) & (flat <= 1))]
    if bad.size:
        raise ResultError(f"{path}: field {field!r} holds {bad[0]:g}, not a share or probability in [0, 1]; the file "
                          "was changed or written by something else (rerun the job that made it)")


def check_fields(cls: type, data: Any, path: Path) -> dict[str, Any]:
    """The fields of dataclass ``cls`` in ``data`` (a dict read from ``path``), each of its declared type; else one
    :class:`ResultError` line naming the file and the field."""
    if not isinstance(data, dict):
        raise ResultError(f"{path}: expected a JSON object, found {type(data).__name__}")
    hints = typing.get_type_hints(cls)
    out = {}
    for f in dataclasses.fields(cls):
        if f.name not in data or f.name == "config":
            continue
        if not _fits(data[f.name], hints.get(f.name, Any)):
            hint = hints.get(f.name)
            want = hint.__name__ if isinstance(hint, type) else str(hint).replace("typing.", "")
            raise ResultError(f"{path}: field {f.name!r} is {brief(data[f.name], 40)} ({type(data[f.name]).__name__}), "
                              f"not {want}")
        out[f.name] = data[f.name]
    return out


def write_parts(folder: Path, summary: dict[str, Any], pairs: Any, tensors: dict[str, Any]) -> None:
    """The files of a result made on prompt pairs, in this order: ``summary.json``, ``pairs.jsonl`` and each of
    ``tensors`` (file name -> what :func:`~circuits.io.save_torch` writes); its figure's page is the caller's. The
    pairs file is :func:`~circuits.data.pairs.write_pairs`'s (read back by ``read_pairs``)."""
    write_json(folder / "summary.json", summary)
    write_jsonl(folder / "pairs.jsonl", [p.to_json() for p in pairs])
    for name, tensor in tensors.items():
        save_torch(tensor, folder / name)


def read_config(folder: Path, config_type: type[C]) -> C:
    """The ``config.json`` of a result folder as ``config_type`` (the one reader of result configs): a missing,
    unreadable or invalid file is one :class:`ResultError` naming the folder and what is wrong."""
    path = Path(folder) / "config.json"
    if not path.is_file():
        raise ResultError(f"{folder} holds no config.json; a circuits result always has one (rerun the job)")
    try:
        data = read_json(path)
    except ValueError as err:
        raise ResultError(str(err)) from None
    if not isinstance(data, dict):
        raise ResultError(f"{path} holds a {type(data).__name__}, not the JSON object of a {config_type.__name__}")
    try:
        return config_type.from_json(data)
    except (TypeError, ValueError) as err:
        raise ResultError(f"{path} is not a valid {config_type.__name__}: {err}") from None


def same(a: Any, b: Any) -> bool:
    """Exact equality of result values: tensors by dtype, shape and value (NaN equal to NaN), floats exactly,
    containers and dataclasses field by field, types included (a list never equals a tuple)."""
    import torch

    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)):
            return False
        if a.dtype != b.dtype or a.shape != b.shape:
            return False
        if a.is_floating_point() or a.is_complex():
            return bool(((a == b) | (a.isnan() & b.isnan())).all())
        return torch.equal(a, b)
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return a == b or (math.isnan(a) and math.isnan(b))
    if isinstance(a, Config):  # configs by their own equality
        return a == b
    if dataclasses.is_dataclass(a):
        return all(same(getattr(a, f.name), getattr(b, f.name)) for f in dataclasses.fields(a) if f.compare)
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(v, b[k]) for k, v in a.items())
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return bool(a == b)


_SCALARS = (bool, int, float, str, type(None))


def brief(value: Any, width: int = 60, depth: int = 0) -> str:
    """A short description of a result field: tensor shapes and dtypes, list lengths, dict keys, short values; a
    dataclass (a sweep) by its tensors and lists, one level down."""
    import torch

    if isinstance(value, torch.Tensor):
        return f"Tensor{list(value.shape)} {str(value.dtype).removeprefix('torch.')}"
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        if depth >= 2:
            return type(value).__name__
        inner = [f"{f.name}={brief(getattr(value, f.name), 30, depth + 1)}" for f in dataclasses.fields(value)
                 if isinstance(getattr(value, f.name), (torch.Tensor, list)) or dataclasses.is_dataclass(getattr(value, f.name))]
        return f"{type(value).__name__}({', '.join(inner[:4])}{', ...' if len(inner) > 4 else ''})"
    text = repr(value)
    if isinstance(value, (list, tuple)) and not (len(value) <= 4 and all(isinstance(x, _SCALARS) for x in value)
                                                 and len(text) <= width):
        return f"{type(value).__name__}[{len(value)}]"
    if isinstance(value, dict) and not (len(value) <= 4 and all(isinstance(x, _SCALARS) for x in value.values())
                                        and len(text) <= width):
        keys = ", ".join(map(str, list(value)[:4]))
        return f"dict[{len(value)}: {keys}{', ...' if len(value) > 4 else ''}]"
    return text if len(text) <= width else text[: width - 3] + "..."


def config_summary(config: Config) -> str:
    """The config's class and the fields that differ from their defaults (short values)."""
    changed = []
    for f in dataclasses.fields(config):  # type: ignore[arg-type]
        value = getattr(config, f.name)
        default = f.default if f.default is not dataclasses.MISSING else (
            f.default_factory() if f.default_factory is not dataclasses.MISSING else dataclasses.MISSING)
        if default is dataclasses.MISSING or value != default:
            changed.append(f"{f.name}={brief(value, 40)}")
    return f"{type(config).__name__}({', '.join(changed)})"

