"""The evaluation step's result: scores per benchmark task, with the config (model, delta, limits) that made them.

``circuits evaluate --out`` takes a folder, or a ``.json`` file (one self-describing file: its kind, version,
config and scores); :meth:`EvalResult.load` reads either.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from circuits.config import Config
from circuits.io import OutputError, read_json, write_json
from circuits.results import Result, ResultError, check_writable, lazy_type


def check_json_output(path: Path, overwrite: bool = False) -> None:
    """An evaluation ``.json`` may replace a file that holds an evaluation result, nothing else."""
    if path.is_dir():
        raise OutputError(f"--out {path} is a folder; name a new .json file or a folder for the result")
    if path.exists() and not overwrite:
        try:
            EvalResult.from_json(read_json(path))
        except (ValueError, ResultError):
            raise OutputError(f"--out {path} exists and holds no evaluation result; choose another --out, or pass "
                              "--overwrite to replace it") from None
    check_writable(path)


@dataclass(eq=False, repr=False)
class EvalResult(Result):
    """``tasks``: ``{task: {metric: value, "n": documents}}``; accuracies in [0, 1], perplexities as is."""

    kind = "evaluate"
    config_type = lazy_type("circuits.evaluation.tasks:EvalConfig")  # tasks.py imports this module

    config: Config  # a circuits.evaluation.tasks.EvalConfig
    tasks: dict[str, dict[str, Any]]
    arithmetic_by_form: dict[str, float] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": self.kind, "version": self.version, "config": self.config_json(), "tasks": self.tasks}
        if self.arithmetic_by_form:
            out["arithmetic_by_form"] = self.arithmetic_by_form
        return out

    def save(self, path: str | Path, *, overwrite: bool = False) -> Path:
        """A folder, or one ``.json`` file when ``path`` ends in ``.json`` (an existing file is replaced only when
        it holds an evaluation result, unless ``overwrite``)."""
        path = Path(path)
        if path.suffix == ".json":
            check_json_output(path, overwrite=overwrite)
            return write_json(path, self.to_json())
        return super().save(path, overwrite=overwrite)

    def _write(self, folder: Path) -> None:
        write_json(folder / "result.json", {k: v for k, v in self.to_json().items() if k not in ("kind", "version", "config")})

    @classmethod
    def from_json(cls, d: Any, where: str | Path = "the JSON") -> EvalResult:
        """From the one-file form (:meth:`to_json`); anything else is one :class:`ResultError` naming ``where``."""
        if not isinstance(d, dict) or not isinstance(d.get("tasks"), dict):
            raise ResultError(f"{where} holds no evaluation result (no 'tasks')")
        cls.check_header(d, where)
        config = d.get("config")
        if not isinstance(config, dict):
            raise ResultError(f"{where} holds no config of the evaluation (a JSON object under 'config')")
        try:
            typed = cls.config_type.from_json(config)
        except (TypeError, ValueError) as err:
            raise ResultError(f"{where}: its config is not a valid {cls.config_type.__name__}: {err}") from None
        return cls(typed, d["tasks"], d.get("arithmetic_by_form", {}))

    @classmethod
    def load(cls, path: str | Path) -> EvalResult:
        path = Path(path)
        if path.is_file():
            try:
                return cls.from_json(read_json(path), path)
            except ResultError:
                raise
            except ValueError as err:
                raise ResultError(str(err)) from None
        return super().load(path)

    @classmethod
    def _read(cls, folder: Path, config: Config) -> EvalResult:
        d = read_json(folder / "result.json")
        if not isinstance(d, dict) or not isinstance(d.get("tasks"), dict):
            raise ResultError(f"{folder / 'result.json'} holds no evaluation scores (no 'tasks')")
        return cls(config, d["tasks"], d.get("arithmetic_by_form", {}))
