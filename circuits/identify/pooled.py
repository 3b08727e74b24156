"""The pooled identify result of ``--task all`` (``all/``) saved without copies of its operations' files.

``all/`` pools pairs drawn from the four operations with the per-pair values their sweeps computed (no model runs,
:func:`circuits.identify.job.run`), so a ``pairs.jsonl`` and a ``sweep.pt`` of its own would repeat, pair for pair,
rows of its sibling folders' files (0.3 MB of the demo's 9 MB; issue 44). It saves instead ``pooled.json``: for each
operation, its sibling folder, the indices of the pairs drawn, and the SHA-256 of the two files they were read from.
Loading reads those files, checks the hashes (a sibling rerun or edited since is one :class:`ResultError` saying so)
and pools exactly what the job pooled. Where the siblings are not there (a result saved elsewhere, or one the sibling
files do not give back bit for bit) the folder gets its own ``pairs.jsonl`` and ``sweep.pt``, as before; folders
saved before this file existed hold those and are read as they were. :func:`read_sweep` is the checked reader of
every identify folder's ``sweep.pt``, its own or a sibling's.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import torch

from circuits.data.pairs import PromptPair, read_pairs
from circuits.io import load_torch, read_json, write_json
from circuits.patching.engines.end_sweep import SweepResult
from circuits.results import ResultError

FILE = "pooled.json"
FORMAT = "circuits pooled identify result"
SOURCES = ("pairs.jsonl", "sweep.pt")


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _check_sweep_shapes(tensors: Any, path: Path, n_pairs: int, summary: Any) -> None:
    """A ``sweep.pt`` fits its result (:func:`~circuits.patching.engines.end_sweep_files.check_sweep`: per-pair head
    tensors ``[layer, head, pair]`` and MLP tensors ``[layer, pair]`` over one set of pairs and layers, the baseline
    over the same pairs, something measured), as many pairs as ``pairs.jsonl`` holds and the layers x heads of the
    saved summary's ``head_effects``; else one ResultError naming the file (a heat map of the wrong shape, or an empty
    ranking, is never drawn)."""
    from circuits.patching.engines.end_sweep_files import check_sweep

    known = {"pair": (n_pairs, "pairs.jsonl")} if n_pairs else {}
    grid = summary.get("head_effects") if isinstance(summary, dict) else None
    if isinstance(grid, list) and grid and isinstance(grid[0], list):
        known |= {"layer": (len(grid), "summary.json's head_effects"), "head": (len(grid[0]), "summary.json's head_effects")}
    try:
        check_sweep(tensors, path, **known)
    except ValueError as err:
        raise ResultError(f"{err}; rerun circuits identify" if "rerun" not in str(err) else str(err)) from None


def read_sweep(path: Path, n_pairs: int, summary: Any, mode: str) -> SweepResult:
    """The checked ``sweep.pt`` at ``path`` (one ResultError line naming it where it does not fit)."""
    from circuits.patching.engines.end_sweep_files import unpack_unmeasured

    try:
        tensors = unpack_unmeasured(load_torch(path, "sweep"), path)
    except ValueError as err:
        raise ResultError(f"{err}; rerun circuits identify") from None
    _check_sweep_shapes(tensors, path, n_pairs, summary)
    return SweepResult.from_tensors(tensors, mode)  # type: ignore[arg-type]


def _same(a: SweepResult, b: SweepResult) -> bool:
    ta, tb = a.tensors(), b.tensors()
    flat = lambda t: {**{k: v for k, v in t.items() if torch.is_tensor(v)}, **t["baseline"]}  # noqa: E731
    fa, fb = flat(ta), flat(tb)
    return fa.keys() == fb.keys() and all(
        fa[k] == fb[k] if not torch.is_tensor(fa[k]) else torch.is_tensor(fb[k]) and fa[k].shape == fb[k].shape
        and torch.equal(fa[k].nan_to_num(), fb[k].nan_to_num()) and torch.equal(fa[k].isnan(), fb[k].isnan()) for k in fa)


def write_pooled(folder: Path, picks: dict[str, list[int]], pairs: list[PromptPair], sweep: SweepResult | None
                 ) -> bool:
    """Write ``pooled.json`` into ``folder`` when the sibling folders ``folder.parent / task`` hold files that give
    back ``pairs`` and ``sweep`` exactly (``picks``: task -> the indices drawn, in pooling order); else write nothing
    and return False (the caller writes the pairs and the sweep themselves)."""
    if sweep is None or not picks:
        return False
    sources, got_pairs, parts = [], [], []
    for task, idx in picks.items():
        sub = folder.parent / task
        if not all((sub / f).is_file() for f in SOURCES):
            return False
        try:
            sub_pairs = read_pairs(sub / "pairs.jsonl")
            if not all(0 <= i < len(sub_pairs) for i in idx):
                return False
            parts.append(read_sweep(sub / "sweep.pt", len(sub_pairs), None, sweep.mode).select(idx))
        except (ResultError, ValueError, OSError):
            return False
        got_pairs += [sub_pairs[i] for i in idx]
        sources.append({"task": task, "folder": task, "pairs": list(idx),
                        "sha256": {f: _sha256(sub / f) for f in SOURCES}})
    if got_pairs != pairs or not _same(SweepResult.pool(parts), sweep):
        return False
    write_json(folder / FILE, {"format": FORMAT, "from": sources})
    return True


def read_pooled(folder: Path, summary: Any, mode: str) -> tuple[list[PromptPair], SweepResult]:
    """The pairs and the pooled sweep ``pooled.json`` in ``folder`` names, read from its sibling folders."""
    path = folder / FILE
    d = read_json(path)
    sources = d.get("from") if isinstance(d, dict) and d.get("format") == FORMAT else None
    if not isinstance(sources, list) or not sources:
        raise ResultError(f"{path}: not a pooled identify result (expected {{\"format\": \"{FORMAT}\", \"from\": "
                          "[...]}); rerun circuits identify --task all")
    pairs: list[PromptPair] = []
    parts = []
    for s in sources:
        ok = (isinstance(s, dict) and isinstance(s.get("folder"), str) and s["folder"] not in ("", ".", "..")
              and "/" not in s["folder"] and "\\" not in s["folder"] and isinstance(s.get("pairs"), list)
              and all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in s["pairs"])
              and isinstance(s.get("sha256"), dict))
        if not ok:
            raise ResultError(f"{path}: an entry of 'from' is not {{folder: a sibling folder's name, pairs: [indices], "
                              "sha256: {...}}; rerun circuits identify --task all")
        sub = folder.parent / s["folder"]
        for f in SOURCES:
            if not (sub / f).is_file():
                raise ResultError(f"{folder} pools pairs of {sub} and needs its {f}, which is not there; keep the "
                                  "--task all folder whole (or rerun circuits identify --task all)")
            if _sha256(sub / f) != s["sha256"].get(f):
                raise ResultError(f"{folder} pools pairs of {sub}, whose {f} has changed since it was made; rerun "
                                  "circuits identify --task all")
        sub_pairs = read_pairs(sub / "pairs.jsonl")
        if any(i >= len(sub_pairs) for i in s["pairs"]):
            raise ResultError(f"{path}: pair index {max(s['pairs'])} of {sub} is past its {len(sub_pairs)} pairs")
        pairs += [sub_pairs[i] for i in s["pairs"]]
        parts.append(read_sweep(sub / "sweep.pt", len(sub_pairs), summary, mode).select(s["pairs"]))
    return pairs, SweepResult.pool(parts)
