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

from circuits.io import OutputError, Shapes, atomic_dir, load_torch, read_json, real_path, save_torch, write_json
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
        save_torch(pack_unmeasured(sweep.tensors()), tmp / "sweep.pt")
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
        t = unpack_unmeasured(load_torch(path, "sweep"), path)
    except ValueError as err:
        raise ResultError(str(err)) from None
    want = {f"head_{r}": (meta["n_layers"], meta["n_heads"], meta["n_pairs"]) for r in READOUTS}
    want |= {f"mlp_{r}": (meta["n_layers"], meta["n_pairs"]) for r in READOUTS}
    for k, shape in want.items():
        v = t.get(k) if isinstance(t, dict) else None
        if torch.is_tensor(v) and tuple(v.shape) != shape:
            raise ResultError(f"{path}: {k} is {list(v.shape)}, not {list(shape)} as {meta_path.name} says")
    try:
        check_sweep(t, path, layer=(meta["n_layers"], meta_path.name), head=(meta["n_heads"], meta_path.name),
                    pair=(meta["n_pairs"], meta_path.name))
    except ValueError as err:
        raise ResultError(str(err)) from None
    try:
        sweep = cls.from_tensors(t, meta.get("mode", "path"))
    except (KeyError, TypeError, ValueError) as err:
        raise ResultError(f"{path} lacks what a saved sweep holds ({type(err).__name__}: {err})") from None
    sweep.custom_metrics.update({m.name: m for m in metrics if getattr(m, "name", None) in sweep.custom})
    return sweep


def pack_unmeasured(t: dict) -> dict:
    """``t`` (:meth:`SweepResult.tensors`) with each readout measured for fewer than half of its components stored as
    ``{"measured": [layer, head] bool, "values": [measured, pair]}`` instead of a grid of NaN (the answer probability
    is measured for the key components only, ``prob='key'``: 8 of SmolLM2's 270 heads, so two thirds of a sweep.pt
    was NaN; issue 44). :func:`unpack_unmeasured` gives the same tensor back; other values are passed through."""
    out = dict(t)
    for name, value in t.items():
        if not (name.startswith(("head_", "mlp_")) and hasattr(value, "isnan") and value.is_floating_point()
                and value.ndim >= 2):
            continue
        measured = ~value.isnan().all(-1)
        if 2 * int(measured.sum()) < measured.numel():
            out[name] = {"measured": measured, "values": value[measured].clone()}
    return out


def unpack_unmeasured(t: Any, path: str | Path) -> Any:
    """The tensors :func:`pack_unmeasured` packed, as full grids with NaN where nothing was measured (a ``sweep.pt``
    written before, with full grids, is returned as it is); a packed entry that does not fit is one
    :class:`~circuits.io.TensorError` naming ``path``."""
    import torch

    if not isinstance(t, dict):
        return t
    out = dict(t)
    for name, value in t.items():
        if not (name.startswith(("head_", "mlp_")) and isinstance(value, dict)):
            continue
        shapes = Shapes(path)
        if set(value) != {"measured", "values"}:
            raise shapes.fail(f"{name} is a dict of {sorted(value)[:4]}, not a tensor or its measured values")
        axes = ("layer", "head") if name.startswith("head_") else ("layer",)
        mask = shapes.tensor(f"{name}.measured", value["measured"], axes, kind="bool")
        values = shapes.tensor(f"{name}.values", value["values"], ("measured", "pair"), no_inf=True)
        if int(mask.sum()) != values.shape[0]:
            raise shapes.fail(f"{name}.values has {values.shape[0]} rows for the {int(mask.sum())} components "
                              f"{name}.measured marks")
        full = torch.full((*mask.shape, values.shape[1]), float("nan"), dtype=values.dtype)
        full[mask] = values
        out[name] = full
    return out


def check_sweep(t: Any, path: str | Path, **known: tuple[int, str]) -> None:
    """What a ``sweep.pt`` holds (:meth:`SweepResult.tensors`), checked before anything reads it: the readouts float
    tensors ``head_* [layer, head, pair]`` and ``mlp_* [layer, pair]``, each custom metric's ``[heads, mlps]`` of the
    same axes, the baseline one value per pair, over one pair count (and the sizes ``known`` gives, e.g. ``pair=(4,
    "pairs.jsonl")``), no infinity, and something measured (not NaN everywhere: a sweep with nothing in it would rank
    nothing); else one :class:`~circuits.io.TensorError` line naming ``path`` and the tensor."""
    from circuits.patching.core.metrics import Baseline
    from circuits.patching.core.readouts import READOUTS

    shapes = Shapes(path, **known)
    if not isinstance(t, dict):
        raise shapes.fail(f"it holds a {type(t).__name__}, not a sweep's tensors")
    for r in READOUTS:
        shapes.tensor(f"head_{r}", t.get(f"head_{r}"), ("layer", "head", "pair"), no_inf=True)
        shapes.tensor(f"mlp_{r}", t.get(f"mlp_{r}"), ("layer", "pair"), no_inf=True)
    if bool(t["head_logit"].isnan().all()) and bool(t["mlp_logit"].isnan().all()):
        raise shapes.fail("head_logit and mlp_logit are NaN everywhere: nothing was measured")
    Baseline.checked(t.get("baseline"), shapes)
    if t.get("mode", "path") not in ("path", "activation"):
        raise shapes.fail(f"mode is {t.get('mode')!r}, not 'path' or 'activation'")
    custom = t.get("custom", {})
    if not isinstance(custom, dict):
        raise shapes.fail(f"custom is a {type(custom).__name__}, not the custom metrics' values by name")
    for name, v in custom.items():
        if not isinstance(v, (list, tuple)) or len(v) != 2:
            raise shapes.fail(f"custom.{name} is {type(v).__name__}, not [heads, mlps]")
        shapes.tensor(f"custom.{name}[0]", v[0], ("layer", "head", "pair"), no_inf=True)
        shapes.tensor(f"custom.{name}[1]", v[1], ("layer", "pair"), no_inf=True)


def describe(folder: str | Path) -> dict[str, Any]:
    """What ``sweep.json`` says of a saved sweep (mode, shape, custom metrics, provenance)."""
    return read_json(Path(folder) / "sweep.json", limit=1 << 20)
