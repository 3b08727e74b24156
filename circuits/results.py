"""One typed result per step, each saving and loading itself.

Every step of the method returns a :class:`Result`: identify (:class:`~circuits.identify.result.IdentifyResult`),
validate (``KnockoutResult``, ``TransferResult``), explain (``AttentionRoles``, ``AttentionViews``, ``LogitLens``),
fine-tune (``FinetuneResult``, ``SFTComparison``) and evaluate (``EvalResult``). A result has a ``kind``, a
``config`` (what made it) and a format ``version``; ``save(folder)`` writes it atomically with ``config.json``
and a ``circuits.json`` marker (its kind and version), and ``load(folder)`` reads it back. Whatever reads a
saved result -- the report, ``--heads-from``, the experiment scripts -- goes through :func:`load_result` or a
class's ``load``, never through dict keys it guesses.

Folders written before the marker existed are still read: each class recognises its own older files
(:meth:`Result.recognizes`).
"""

from __future__ import annotations

import importlib
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar, TypeVar

from circuits.io import TEMPORARY, OutputError, atomic_dir, read_json, real_path, to_jsonable, write_json
from circuits.timing import timed

MARKER = "circuits.json"
R = TypeVar("R", bound="Result")

# kind -> "module:Class"; imported on first use (no registration by import side effect).
RESULT_TYPES: dict[str, str] = {
    "identify": "circuits.identify.result:IdentifyResult",
    "per_operation": "circuits.identify.result:PerOperation",
    "knockout": "circuits.validate.knockout:KnockoutResult",
    "transfer": "circuits.validate.transfer:TransferResult",
    "cross_model": "circuits.validate.cross_model:CrossModelResult",
    "word_problem_heads": "circuits.validate.transfer:WordProblemHeads",
    "attention_roles": "circuits.explain.attention:AttentionRoles",
    "attention_views": "circuits.explain.attention:AttentionViews",
    "logit_lens": "circuits.explain.logit_lens:LogitLens",
    "finetune": "circuits.sft.result:FinetuneResult",
    "sft_table": "circuits.sft.compare:SFTComparison",
    "evaluation": "circuits.evaluation.result:EvalResult",
    "screen": "circuits.beyond.screen.result:ScreenResult",
    "positions": "circuits.beyond.positions.result:PositionResult",
    "neurons": "circuits.beyond.neurons.result:NeuronResult",
    "edges": "circuits.beyond.edges.result:EdgeResult",
    "stability": "circuits.beyond.stability.result:StabilityResult",
    "ablation_kinds": "circuits.validate.ablation_kinds:AblationComparison",
}


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
    marker = read_json(path)
    if not isinstance(marker, dict) or "kind" not in marker:
        raise ResultError(f"{path} is not a circuits result marker (no 'kind')")
    return marker


def detect_kind(folder: str | Path) -> str | None:
    """The kind of result ``folder`` holds: its marker's, else the first kind whose class recognises the
    files (results saved before markers existed), else None."""
    folder = Path(folder)
    if not folder.is_dir():
        return None
    marker = read_marker(folder)
    if marker is not None:
        return str(marker["kind"])
    for kind in RESULT_TYPES:
        if result_type(kind).recognizes(folder):
            return kind
    return None


def load_result(folder: str | Path) -> Result:
    """Whatever result ``folder`` holds, as its typed class."""
    kind = detect_kind(folder)
    if kind is None:
        raise ResultError(f"{folder} holds no circuits result (no {MARKER} and no files a result writes)")
    return result_type(kind).load(folder)


# The names circuits writes in result folders: every result's files (what a folder saved before markers listed
# them holds) and the figures the experiment scripts' ``plot`` adds beside a saved result. A folder holding anything
# else beside its result is not replaced.
CIRCUITS_FILES = frozenset({
    MARKER, "config.json", "summary.json", "pairs.jsonl", "sweep.pt", "edges.pt", "heads.html", "data.json",
    "figure.html", "result.json", "screen.pt", "screen.html", "positions.pt", "neurons.pt", "circuit.html",
    "flow.html", "circuits_metrics.py", "figure_6c.html", "figure_overlap.html",
    *(f"figure-{t}.html" for t in ("addition", "subtraction", "multiplication", "division", "all")),
})


def own_files(folder: Path) -> frozenset[str]:
    """The names a saved result in ``folder`` may hold: those its marker lists (``files``) and
    :data:`CIRCUITS_FILES`."""
    marker = read_marker(folder)
    files = marker.get("files") if marker is not None else None
    listed = frozenset(files) if isinstance(files, list) and all(isinstance(f, str) for f in files) else frozenset()
    return listed | CIRCUITS_FILES


def _contents(folder: Path) -> list[Path]:
    """What ``folder`` holds, dot-files included, less the temporaries an interrupted write left (the job clears
    those once it holds the lock)."""
    return sorted(p for p in folder.iterdir() if not TEMPORARY.match(p.name))


def _names(paths: list[Path], limit: int = 4) -> str:
    names = [p.name + ("/" if p.is_dir() else "") for p in paths]
    return ", ".join(names[:limit]) + (f" and {len(names) - limit} more" if len(names) > limit else "")


def _refusal(out: Path, shown: str | Path, kind: str, container: bool) -> str | None:
    """Why a ``kind`` job may not replace the folder ``out`` (None when it may)."""
    entries = _contents(out)
    if not entries:
        return None
    article = "an" if kind[0] in "aeiou" else "a"
    found = detect_kind(out)
    if found is None and container:  # identify --task all: a folder of identify results, one per task
        bad = [p for p in entries if p.is_symlink() or not p.is_dir() or detect_kind(p) != kind]
        if not bad:
            for p in entries:
                why = _refusal(p, p, kind, False)
                if why is not None:
                    return why
            return None
        what = {detect_kind(p) if p.is_dir() and not p.is_symlink() else None for p in bad}
    else:
        what = {found}
    if what != {kind}:
        held = ", ".join(sorted(f"a {k} result" if k else "files circuits did not write" for k in what))
        return (f"--out {shown} already holds {held}; {article} {kind} job only replaces its own results (found: "
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
    if target.is_dir() and not overwrite:
        why = _refusal(target, out, kind, container)
        if why is not None:
            raise OutputError(why)
    check_writable(target)
    return out


def check_writable(out: Path) -> None:
    """Create and remove a temporary file in the first existing ancestor of ``out`` (a read-only or virtual
    file system fails here, not after the work)."""
    parent = out.absolute()
    if parent.is_file():  # a file that will be replaced: its folder must be writable
        parent = parent.parent
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir():
        raise OutputError(f"cannot write to {out}: {parent} is a file, not a folder")
    try:
        fd, tmp = tempfile.mkstemp(prefix=".circuits-probe-", dir=parent)
        os.close(fd)
        os.unlink(tmp)
    except OSError as err:
        raise OutputError(f"cannot write to {out}: no file can be created in {parent} ({err.strerror})") from None


class Result:
    """Base of every step's result.

    Subclasses are dataclasses with a ``config`` field and set ``kind`` and ``version``; they implement
    :meth:`_write` (the files, into a temporary folder) and :meth:`_read` (back from a folder), and may
    override :meth:`recognizes` for folders saved before the marker.
    """

    kind: ClassVar[str]
    version: ClassVar[int] = 1
    # A result whose folder is also a job's working folder (checkpoints, finished rows) is written file by file,
    # each atomically, the marker last; every other result replaces its folder whole.
    in_place: ClassVar[bool] = False
    config: Any

    def config_json(self) -> dict[str, Any]:
        cfg = to_jsonable(self.config)
        return cfg if isinstance(cfg, dict) else {"config": cfg}

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
        if self.in_place:  # the job's working folder, checked when the job started; only our own files are written
            folder.mkdir(parents=True, exist_ok=True)
            self._write(folder)
            write_json(folder / "config.json", self.config_json())
            write_json(folder / MARKER, {"kind": self.kind, "version": self.version})
            return folder
        check_output(folder, self.kind, overwrite=overwrite)
        with atomic_dir(folder) as tmp:
            self._write(tmp)
            write_json(tmp / "config.json", self.config_json())
            files = sorted({p.name for p in tmp.iterdir()} | {MARKER})  # what a later save may replace
            write_json(tmp / MARKER, {"kind": self.kind, "version": self.version, "files": files})
        return folder

    @classmethod
    def load(cls: type[R], folder: str | Path) -> R:
        folder = Path(folder)
        if not folder.is_dir():
            raise FileNotFoundError(f"No result folder at {folder}")
        marker = read_marker(folder)
        if marker is None and not cls.recognizes(folder):
            raise ResultError(f"{folder} holds no {cls.kind} result")
        if marker is not None:
            if marker["kind"] != cls.kind:
                raise ResultError(f"{folder} holds a {marker['kind']} result, not {cls.kind}")
            if int(marker.get("version", 1)) > cls.version:
                raise ResultError(f"{folder} was written by a newer circuits (format {marker['version']}; this one reads "
                                  f"up to {cls.version}); upgrade circuits to read it")
        return cls._read(folder)

    @classmethod
    def recognizes(cls, folder: Path) -> bool:
        """Whether ``folder`` holds this kind's files without a marker (results saved before markers)."""
        return False

    def _write(self, folder: Path) -> None:
        raise NotImplementedError

    @classmethod
    def _read(cls: type[R], folder: Path) -> R:
        raise NotImplementedError


def read_config(folder: Path) -> dict[str, Any]:
    path = folder / "config.json"
    return read_json(path) if path.is_file() else {}


def data_keys(folder: Path, name: str = "data.json") -> Mapping[str, Any] | None:
    """The top-level object of a folder's JSON file when it is one (for :meth:`Result.recognizes`)."""
    path = folder / name
    if not path.is_file():
        return None
    try:
        d = read_json(path)
    except ValueError:
        return None
    return d if isinstance(d, dict) else None
