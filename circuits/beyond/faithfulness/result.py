"""The saved faithfulness run: each ranking's scores, its curve f(size) per setting (nodes at END, nodes at every
position, edges), CPR and CMD with bootstrap intervals, and the seconds each ranking took.

A folder holds ``summary.json`` (the table: CPR, CMD and their intervals, f at every size, seconds), ``faithfulness.pt``
(every score and curve as tensors), ``pairs.jsonl``, ``figure.html`` (f against circuit size, one line per ranking),
``config.json`` and ``circuits.json``, and ``parts/`` (one file per finished ranking, which a stopped run resumes
from)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from jaxtyping import Float
from torch import Tensor

from circuits.beyond.faithfulness.config import FaithfulnessConfig
from circuits.data.pairs import PromptPair, read_pairs, write_pairs
from circuits.io import load_torch, save_torch, write_json
from circuits.results import Result

PARTS = "parts"  # the working folder of a run: one finished ranking per file


@dataclass(eq=False)
class Curve:
    """One circuit-size curve: ``f[i]`` is the faithfulness of the circuit of the ranking's top ``sizes[i]`` percent
    (``n_kept[i]`` nodes or edges), with its bootstrap interval over pairs; CPR the area under f, CMD the area
    between f and 1, over the sizes (as MIB: on the size fraction, trapezoids)."""

    sizes: tuple[float, ...]  # percent kept
    n_kept: tuple[int, ...]
    f: Float[Tensor, " size"]
    f_low: Float[Tensor, " size"] | None
    f_high: Float[Tensor, " size"] | None
    cpr: float
    cmd: float
    cpr_ci: tuple[float, float] | None
    cmd_ci: tuple[float, float] | None
    m_full: float  # m(N): the metric with nothing ablated
    m_empty: float  # m(empty): everything ablated
    n_total: int  # nodes (or edges) a circuit is chosen from
    seconds: float = 0.0  # measuring the curve (the ranking's own time is FaithfulnessResult.seconds)

    def __eq__(self, other: object) -> bool:
        from circuits.results import same

        if not isinstance(other, Curve):
            return NotImplemented
        return all(same(getattr(self, k), getattr(other, k)) for k in self.__dataclass_fields__)

    __hash__ = None  # type: ignore[assignment]

    def to_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Curve:
        d = dict(d)
        for k in ("sizes", "n_kept"):
            d[k] = tuple(d[k])
        for k in ("cpr_ci", "cmd_ci"):
            d[k] = tuple(d[k]) if d.get(k) is not None else None
        return cls(**d)

    def row(self) -> dict[str, Any]:
        """The JSON row of ``summary.json``."""
        return {"cpr": self.cpr, "cmd": self.cmd, "cpr_ci": list(self.cpr_ci) if self.cpr_ci else None,
                "cmd_ci": list(self.cmd_ci) if self.cmd_ci else None, "sizes": list(self.sizes),
                "n_kept": list(self.n_kept), "f": self.f.tolist(),
                "f_low": self.f_low.tolist() if self.f_low is not None else None,
                "f_high": self.f_high.tolist() if self.f_high is not None else None, "m_full": self.m_full,
                "m_empty": self.m_empty, "n_total": self.n_total, "seconds": self.seconds}


SETTING_TEXT = {"nodes@end": "nodes at END", "nodes@all": "nodes at every position", "edges": "edges"}


@dataclass(eq=False, repr=False)
class FaithfulnessResult(Result):
    """Each ranking's circuits scored as MIB scores them; ``curves[ranking][setting]`` (settings: ``nodes@end``,
    ``nodes@all``, ``edges``), ``scores[ranking]`` (``heads`` [layer, head], ``mlps`` [layer], ``edges`` where
    defined: the importance each ranking orders by, larger first), ``seconds[ranking]`` (computing the ranking)."""

    kind = "faithfulness"
    config_type = FaithfulnessConfig
    in_place = True  # its folder is also the run's working folder (parts/: finished rankings a rerun resumes from)

    config: FaithfulnessConfig
    pairs: list[PromptPair]
    scores: dict[str, dict[str, Tensor]]
    curves: dict[str, dict[str, Curve]]
    seconds: dict[str, float] = field(default_factory=dict)
    edge_names: list[str] = field(default_factory=list)  # MIB's names of the edges the edge scores are over

    @classmethod
    def unfinished(cls, folder: Path) -> bool:
        """A run stopped before its end: only the finished rankings it keeps under ``parts/``."""
        entries = [p for p in folder.iterdir() if not p.name.startswith(".")]
        return [p.name for p in entries] == [PARTS] and entries[0].is_dir()

    @property
    def task(self) -> str:
        return getattr(self.config, "task", "")

    @property
    def settings(self) -> list[str]:
        return list(dict.fromkeys(s for by in self.curves.values() for s in by))

    def table(self) -> list[dict[str, Any]]:
        """One row per ranking and setting: CPR, CMD (with intervals), the ranking's seconds, the curve's seconds."""
        return [{"ranking": r, "setting": s, "cpr": c.cpr, "cmd": c.cmd, "cpr_ci": c.cpr_ci, "cmd_ci": c.cmd_ci,
                 "ranking_seconds": self.seconds.get(r, float("nan")), "curve_seconds": c.seconds}
                for r, by in self.curves.items() for s, c in by.items()]

    def best(self, setting: str = "nodes@end") -> tuple[str, float] | None:
        """The ranking with the lowest CMD in ``setting`` and that CMD (None when nothing was measured there)."""
        rows = [(c.cmd, r) for r, by in self.curves.items() for s, c in by.items() if s == setting and c.cmd == c.cmd]
        return (min(rows)[1], min(rows)[0]) if rows else None

    def summary(self) -> dict[str, Any]:
        return {"model": getattr(self.config, "model", ""), "task": self.task, "n_pairs": len(self.pairs),
                "metric": self.config.metric, "ablation": self.config.ablation, "sizes_percent": list(self.config.sizes),
                "seconds": self.seconds, "table": [{**row, "cpr_ci": list(row["cpr_ci"]) if row["cpr_ci"] else None,
                                                   "cmd_ci": list(row["cmd_ci"]) if row["cmd_ci"] else None}
                                                  for row in self.table()],
                "curves": {r: {s: c.row() for s, c in by.items()} for r, by in self.curves.items()},
                "best_cmd": {s: self.best(s) for s in self.settings}}

    def figure(self, setting: str | None = None):
        """f against circuit size, one line per ranking (``setting``: default the first measured)."""
        from circuits.viz.analysis_figures import faithfulness_figure

        setting = setting or (self.settings[0] if self.settings else "nodes@end")
        by = {r: c[setting] for r, c in self.curves.items() if setting in c}
        sizes = next(iter(by.values())).sizes if by else tuple(self.config.sizes)
        title = (f"{self.task}: faithfulness of each ranking's circuit, {SETTING_TEXT.get(setting, setting)} "
                 f"({getattr(self.config, 'model', '')}, {len(self.pairs)} pairs, {self.config.metric}, "
                 f"{self.config.ablation} ablation)")
        return faithfulness_figure(torch.tensor(sizes, dtype=torch.float64), {r: c.f for r, c in by.items()},
                                   {r: c.f_low for r, c in by.items() if c.f_low is not None},
                                   {r: c.f_high for r, c in by.items() if c.f_high is not None}, title)

    def table_figure(self):
        from circuits.viz.analysis_figures import faithfulness_table

        return faithfulness_table(self.table(), f"{self.task}: CPR (higher is better), CMD (lower is better), seconds")

    def _repr_mimebundle_(self, include=None, exclude=None, **kwargs):  # noqa: ANN001, ANN202
        from circuits.viz.notebook import figure_bundle

        return figure_bundle(self, include, exclude, **kwargs)

    def _write(self, folder: Path) -> None:
        from circuits.viz.figures import write_figure

        write_json(folder / "summary.json", self.summary())
        write_pairs(folder / "pairs.jsonl", self.pairs)
        save_torch({"scores": self.scores, "curves": {r: {s: c.to_dict() for s, c in by.items()}
                                                      for r, by in self.curves.items()},
                    "seconds": self.seconds, "edge_names": self.edge_names}, folder / "faithfulness.pt")
        if self.curves:
            write_figure(self.figure(), folder / "figure.html")

    @classmethod
    def _read(cls, folder: Path, config: FaithfulnessConfig) -> FaithfulnessResult:
        t = load_torch(folder / "faithfulness.pt", "faithfulness")
        curves = {r: {s: Curve.from_dict(c) for s, c in by.items()} for r, by in t["curves"].items()}
        return cls(config, read_pairs(folder / "pairs.jsonl"), t["scores"], curves, dict(t["seconds"]),
                   list(t.get("edge_names", [])))
