"""A :class:`~circuits.patching.engines.end_sweep.SweepResult` on disk: ``sweep.save(folder)`` and ``SweepResult.load(folder)``.

``cc.sweep(...)`` returns its effects in memory; saving them keeps every per-pair value, so a loaded sweep gives the
same effects, scores, rankings and key heads. The folder holds ``sweep.pt`` (the tensors ``sweep.pt`` of an identify
result holds: ``SweepResult.tensors()``, read back with ``weights_only``) and ``sweep.json`` (what it is, its shape
and provenance); it is written atomically, and only into a new or empty folder or one holding a saved sweep and
nothing else (anything else is refused with one line, as a job's ``--out`` is). A custom metric's values are kept;
its function is not (a function is code, not data): pass the same metrics to :func:`load` to compute their effects.
For a result that also keeps the pairs, the config and the report's figures, use ``identify(model, pairs)``.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from circuits.io import OutputError, atomic_dir, load_torch, read_json, real_path, save_torch, write_json
from circuits.patching.core.metrics import Metric
from circuits.results import ResultError, check_writable

TAG = "circuits sweep"
FILES = frozenset({"sweep.pt", "sweep.json"})


def _check_folder(folder: Path, overwrite: bool) -> None:
    target = real_path(folder)
    if target.exists() and not target.is_dir():
        raise OutputError(f"{folder} is an existing file; a saved sweep is a folder (sweep.pt, sweep.json)")
    if target == Path(os.path.realpath(Path.cwd())) or target in Path(os.path.realpath(Path.cwd())).parents:
        raise OutputError(f"{folder} is the current folder or one of its parents; name a new folder for the sweep")
    if target.is_dir() and not overwrite:
        names = {p.name for p in target.iterdir()}
        if names and not (names <= FILES and _is_sweep(target)):
            raise OutputError(f"{folder} already holds files that are not a saved sweep ({', '.join(sorted(names)[:5])}"
                              f"); choose a new or empty folder, or pass overwrite=True to replace it")
    check_writable(target)


def _is_sweep(folder: Path) -> bool:
    try:
        d = read_json(folder / "sweep.json", limit=1 << 20)
    except (ValueError, OSError):
        return False
    return isinstance(d, dict) and d.get("format") == TAG


def save(sweep: Any, folder: str | Path, *, overwrite: bool = False) -> Path:
    """Write ``sweep`` into ``folder`` atomically (see the module's text); returns ``folder``."""
    from circuits.versions import provenance

    folder = Path(folder)
    _check_folder(folder, overwrite)
    L, H, n = sweep.head_logit.shape
    with atomic_dir(folder) as tmp:
        save_torch(sweep.tensors(), tmp / "sweep.pt")
        write_json(tmp / "sweep.json", {"format": TAG, "mode": sweep.mode, "n_layers": L, "n_heads": H,
                                        "n_pairs": n, "custom": sorted(sweep.custom), "provenance": provenance()})
    return folder


def load(cls: Any, folder: str | Path, metrics: Sequence[Metric] = ()) -> Any:
    """The sweep (a ``cls``, :class:`~circuits.patching.engines.end_sweep.SweepResult`) :func:`save` wrote in ``folder``; ``metrics``: the custom metrics it was made with (by name), so their
    effects can be computed again. A folder that is not a saved sweep, or a ``sweep.pt`` whose tensors do not fit
    its ``sweep.json``, is one :class:`~circuits.results.ResultError` naming the file."""
    import torch

    from circuits.patching.core.readouts import READOUTS

    folder = Path(folder)
    meta_path, path = folder / "sweep.json", folder / "sweep.pt"
    if not folder.is_dir():
        raise FileNotFoundError(f"No saved sweep at {folder}")
    if not meta_path.is_file():
        raise ResultError(f"{folder} holds no sweep.json: not a sweep saved by SweepResult.save")
    try:
        meta = read_json(meta_path, limit=1 << 20)
    except ValueError as err:
        raise ResultError(str(err)) from None
    if not isinstance(meta, dict) or meta.get("format") != TAG:
        raise ResultError(f"{meta_path} is not the description of a saved sweep (no \"format\": \"{TAG}\")")
    for field in ("n_layers", "n_heads", "n_pairs"):
        v = meta.get(field)
        if not isinstance(v, int) or isinstance(v, bool) or v < 0:
            raise ResultError(f"{meta_path}: field {field!r} is {v!r}, not a count")
    try:
        t = load_torch(path, "sweep")
    except ValueError as err:
        raise ResultError(str(err)) from None
    if not isinstance(t, dict):
        raise ResultError(f"{path} holds a {type(t).__name__}, not a sweep's tensors")
    want = {f"head_{r}": (meta["n_layers"], meta["n_heads"], meta["n_pairs"]) for r in READOUTS}
    want |= {f"mlp_{r}": (meta["n_layers"], meta["n_pairs"]) for r in READOUTS}
    for k, shape in want.items():
        v = t.get(k)
        if not torch.is_tensor(v) or tuple(v.shape) != shape:
            got = list(v.shape) if torch.is_tensor(v) else type(v).__name__
            raise ResultError(f"{path}: {k} is {got}, not {list(shape)} as {meta_path.name} says")
    try:
        sweep = cls.from_tensors(t, meta.get("mode", "path"))
    except (KeyError, TypeError, ValueError) as err:
        raise ResultError(f"{path} lacks what a saved sweep holds ({type(err).__name__}: {err})") from None
    sweep.custom_metrics.update({m.name: m for m in metrics if getattr(m, "name", None) in sweep.custom})
    return sweep


def describe(folder: str | Path) -> dict[str, Any]:
    """What ``sweep.json`` says of a saved sweep (mode, shape, custom metrics, provenance)."""
    return read_json(Path(folder) / "sweep.json", limit=1 << 20)
