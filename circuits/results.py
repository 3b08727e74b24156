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
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar, TypeVar

from circuits.io import atomic_dir, read_json, to_jsonable, write_json

MARKER = "circuits.json"
R = TypeVar("R", bound="Result")

# kind -> "module:Class"; imported on first use (no registration by import side effect).
RESULT_TYPES: dict[str, str] = {
    "identify": "circuits.identify.result:IdentifyResult",
    "per_operation": "circuits.identify.result:PerOperation",
    "knockout": "circuits.validate.knockout:KnockoutResult",
    "transfer": "circuits.validate.transfer:TransferResult",
    "word_problem_heads": "circuits.validate.transfer:WordProblemHeads",
    "attention_roles": "circuits.explain.attention:AttentionRoles",
    "attention_views": "circuits.explain.attention:AttentionViews",
    "logit_lens": "circuits.explain.logit_lens:LogitLens",
    "finetune": "circuits.sft.result:FinetuneResult",
    "sft_table": "circuits.sft.compare:SFTComparison",
    "evaluation": "circuits.evaluation.result:EvalResult",
    "screen": "circuits.identify.screen:ScreenResult",
    "positions": "circuits.identify.position_result:PositionResult",
    "neurons": "circuits.identify.neuron_result:NeuronResult",
    "edges": "circuits.identify.edge_result:EdgeResult",
    "stability": "circuits.identify.stability:StabilityResult",
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

    def save(self, folder: str | Path) -> Path:
        """Write the result into ``folder`` atomically (a finished folder replaces the old one at once)."""
        folder = Path(folder)
        if self.in_place:
            folder.mkdir(parents=True, exist_ok=True)
            self._write(folder)
            write_json(folder / "config.json", self.config_json())
            write_json(folder / MARKER, {"kind": self.kind, "version": self.version})
            return folder
        with atomic_dir(folder) as tmp:
            self._write(tmp)
            write_json(tmp / "config.json", self.config_json())
            write_json(tmp / MARKER, {"kind": self.kind, "version": self.version})
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
