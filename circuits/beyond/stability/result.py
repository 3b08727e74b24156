"""Key heads across seeds, templates and pair counts, as saved."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from circuits.patching.core.ranking import DEFAULT_KEY_RULE
from circuits.io import read_json, write_json
from circuits.results import Result
from circuits.types import Head, jaccard
from circuits.beyond.stability.config import StabilityConfig


def jaccard_matrix(sets: list[set]) -> list[list[float]]:
    return [[jaccard(a, b) for b in sets] for a in sets]


def mean_off_diagonal(m: list[list[float]]) -> float:
    vals = [m[i][j] for i in range(len(m)) for j in range(len(m)) if i != j]
    return sum(vals) / len(vals) if vals else float("nan")


@dataclass(eq=False, repr=False)
class StabilityResult(Result[StabilityConfig]):
    """Key-head sets and their Jaccard overlaps per operation, across seeds and across template forms."""

    kind = "stability"
    in_place = True  # its folder also holds the identify results it was computed from (<out>/identify by default)
    work = "identify"

    by_seed: dict[str, dict[int, list[Head]]]  # operation -> seed -> key heads
    by_form: dict[str, dict[str, list[Head]]] = field(default_factory=dict)  # operation -> form -> key heads

    def summary(self) -> dict[str, Any]:
        per = {}
        for op, seeds in self.by_seed.items():
            ms = jaccard_matrix([set(v) for v in seeds.values()])
            forms = self.by_form.get(op, {})
            mf = jaccard_matrix([set(v) for v in forms.values()])
            per[op] = {"seeds": list(seeds), "jaccard_seeds": ms, "mean_jaccard_seeds": mean_off_diagonal(ms),
                       "forms": list(forms), "jaccard_forms": mf, "mean_jaccard_forms": mean_off_diagonal(mf),
                       "key_heads_by_seed": {str(s): [str(h) for h in v] for s, v in seeds.items()},
                       "key_heads_by_form": {f: [str(h) for h in v] for f, v in forms.items()}}
        return {"per_operation": per, "key_rule": self.config.key_rule or DEFAULT_KEY_RULE}

    def figure(self):
        from plotly.subplots import make_subplots

        from circuits.viz.analysis_figures import jaccard_panels

        s = self.summary()["per_operation"]
        a = jaccard_panels({op: ([f"seed {x}" for x in v["seeds"]], v["jaccard_seeds"]) for op, v in s.items()}, "")
        b = jaccard_panels({op: (v["forms"], v["jaccard_forms"]) for op, v in s.items()}, "")
        fig = make_subplots(rows=2, cols=len(s), subplot_titles=[f"{op}: seeds" for op in s] + [f"{op}: forms" for op in s],
                            vertical_spacing=0.15)
        for i, tr in enumerate(a.data):
            fig.add_trace(tr, 1, i + 1)
        for i, tr in enumerate(b.data):
            tr.showscale = False
            fig.add_trace(tr, 2, i + 1)
        fig.update_layout(title="Jaccard overlap of key-head sets across seeds (top) and template forms (bottom)",
                          height=700, width=max(700, 320 * len(s)))
        return fig

    def _write(self, folder: Path) -> None:
        from circuits.viz.figures import write_figure

        write_json(folder / "data.json", self.summary())
        write_figure(self.figure(), folder / "figure.html")

    @classmethod
    def _read(cls, folder: Path, config: StabilityConfig) -> StabilityResult:
        d = read_json(folder / "data.json")["per_operation"]
        by_seed = {op: {int(s): [Head.parse(h) for h in hs] for s, hs in v["key_heads_by_seed"].items()} for op, v in d.items()}
        by_form = {op: {f: [Head.parse(h) for h in hs] for f, hs in v["key_heads_by_form"].items()} for op, v in d.items()}
        return cls(config, by_seed, by_form)
