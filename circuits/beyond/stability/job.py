"""How stable the key-head set is: across seeds (new operands, templates and words) and across template forms
(equation, statement, question), as Jaccard overlaps |A & B| / |A | B|, per operation.

Seeds: one identify result per seed, made exactly as ``circuits identify`` makes it (and reused when already saved
with the same config). Forms: the seed-0 sweep restricted to the pairs of each form -- its per-pair values are kept,
so no model runs -- and the key rule applied to each subset.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from circuits.config import Config, option
from circuits.data.templates import OPERATIONS, templates_for
from circuits.identify.config import IdentifyConfig
from circuits.patching.engine import SweepResult
from circuits.identify.result import IdentifyResult
from circuits.patching.ranking import DEFAULT_KEY_RULE, KeyRule
from circuits.io import read_json, write_json
from circuits.results import Result, data_keys, read_config
from circuits.types import Head


def jaccard(a: set, b: set) -> float:
    """|a & b| / |a | b| (1 when both are empty)."""
    return len(a & b) / len(a | b) if (a or b) else 1.0


def jaccard_matrix(sets: list[set]) -> list[list[float]]:
    return [[jaccard(a, b) for b in sets] for a in sets]


def mean_off_diagonal(m: list[list[float]]) -> float:
    vals = [m[i][j] for i in range(len(m)) for j in range(len(m)) if i != j]
    return sum(vals) / len(vals) if vals else float("nan")


def subset(sweep: SweepResult, idx: list[int]) -> SweepResult:
    """The sweep over a subset of its pairs."""
    return SweepResult(sweep.mode, sweep.baseline.select(idx),
                       **{f"{k}_{r}": getattr(sweep, f"{k}_{r}")[..., idx] for k in ("head", "mlp")
                          for r in ("logit", "logit_diff", "prob")},
                       custom={k: (v[0][..., idx], v[1][..., idx]) for k, v in sweep.custom.items()},
                       custom_metrics=sweep.custom_metrics)


def form_key_heads(result: IdentifyResult, rule: str | KeyRule | None = None) -> dict[str, list[Head]]:
    """Key heads found on the pairs of each template form alone (from the saved per-pair values)."""
    if result.sweep is None:
        raise ValueError("This identify result keeps no per-pair values (no sweep.pt); rerun circuits identify")
    forms = {t.id: t.form for op in OPERATIONS for t in templates_for(op)}
    by_form: dict[str, list[int]] = {}
    for i, p in enumerate(result.pairs):
        by_form.setdefault(forms.get(p.template_id, "custom"), []).append(i)
    rule = result.key_rule if rule is None else KeyRule.parse(rule)
    return {f: [h for h, _ in subset(result.sweep, idx).key_heads(rule)] for f, idx in sorted(by_form.items())}


@dataclass(frozen=True)
class StabilityConfig(Config):
    model: str = option("smollm2", help="smollm2, a .gguf file, a local Hugging Face folder or an official name")
    operations: tuple[str, ...] = option(tuple(OPERATIONS), help="operations")
    seeds: tuple[int, ...] = option((0, 1, 2), help="seeds of the pairs (one identify run each)")
    n_pairs: int = option(64, flag="--pairs", help="prompt pairs per identify run")
    key_rule: str = option(DEFAULT_KEY_RULE, help="the rule that picks the key heads")
    filter_correct: bool = option(True, help="keep only pairs the model answers correctly")
    identify_dir: str = option("results/identify", help="where identify results are read or written (seed 0: "
                                                         "<dir>/<operation>, as circuits identify --task all writes)")

    def __post_init__(self) -> None:
        KeyRule.parse(self.key_rule)
        for op in self.operations:
            if op not in OPERATIONS:
                raise ValueError(f"Unknown operation {op!r}; accepted: {', '.join(OPERATIONS)}")
        if not self.seeds:
            raise ValueError("Give at least one seed")

    def identify_config(self, op: str, seed: int) -> IdentifyConfig:
        return IdentifyConfig(model=self.model, task=op, n_pairs=self.n_pairs, seed=seed, key_rule=self.key_rule,
                              filter_correct=self.filter_correct)

    def folder(self, op: str, seed: int) -> Path:
        return Path(self.identify_dir) / (op if seed == 0 else f"{op}-seed{seed}")


@dataclass
class StabilityResult(Result):
    """Key-head sets and their Jaccard overlaps per operation, across seeds and across template forms."""

    kind = "stability"

    config: Any
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
        rule = getattr(self.config, "key_rule", None) or (self.config.get("key_rule") if isinstance(self.config, dict) else None)
        return {"per_operation": per, "key_rule": rule or DEFAULT_KEY_RULE}

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
    def recognizes(cls, folder: Path) -> bool:
        d = data_keys(folder)
        return d is not None and "per_operation" in d and "key_rule" in d

    @classmethod
    def _read(cls, folder: Path) -> StabilityResult:
        d = read_json(folder / "data.json")["per_operation"]
        by_seed = {op: {int(s): [Head.parse(h) for h in hs] for s, hs in v["key_heads_by_seed"].items()} for op, v in d.items()}
        by_form = {op: {f: [Head.parse(h) for h in hs] for f, hs in v["key_heads_by_form"].items()} for op, v in d.items()}
        return cls(StabilityConfig.from_json(read_config(folder)), by_seed, by_form)


def stability(results: dict[str, dict[int, IdentifyResult]], config: Any = None) -> StabilityResult:
    """From identify results per operation and seed: key heads per seed, and per form of the first seed's pairs."""
    by_seed = {op: {s: [h for h, _ in r.key_heads()] for s, r in seeds.items()} for op, seeds in results.items()}
    by_form = {op: form_key_heads(seeds[min(seeds)]) for op, seeds in results.items()}
    return StabilityResult(config, by_seed, by_form)


def run_stability(config: StabilityConfig, out: str | Path, model: Any = None) -> StabilityResult:
    """Identify results for every operation and seed (made when missing), then :func:`stability`."""
    from circuits.identify.job import finished, run_identify
    from circuits.models.loading import load_model

    results: dict[str, dict[int, IdentifyResult]] = {}
    for op in config.operations:
        results[op] = {}
        for seed in config.seeds:
            icfg, folder = config.identify_config(op, seed), config.folder(op, seed)
            if not finished(folder, icfg):
                model = model or load_model(config.model)
                run_identify(icfg, folder, model=model, progress=False)
            results[op][seed] = IdentifyResult.load(folder)
    result = stability(results, config)
    result.save(out)
    return result
