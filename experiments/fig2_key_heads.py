"""Figure 2: the effect of every head and MLP on the answer logit, pooled over the four operations (path
patching at END, Section 4.1). This is ``circuits identify --task all``: one result per operation and the
pooled one in ``all/``, shared with every other figure script.

Run: ``python experiments/fig2_key_heads.py [--pairs 64]`` from any folder; ``--replot`` redraws from the saved
result. The results go under ``--identify-dir`` (the repository's ``results/identify``), in a folder of their own when
they were made with another config (other ``--pairs``, ``--seed``, ...): the script prints where."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import _common as C
import _tables as T

from circuits.config import option, redefault
from circuits.identify.result import IdentifyResult
from circuits.viz.figures import write_figure


@dataclass(frozen=True)
class Config(C.KeyHeadConfig):
    task: str = redefault(C.KeyHeadConfig, "task", "all")  # 'all' pools the four operations, as the paper's Figure 2
    out: str = option("", help="the result's folder: where the identify cache puts it (default: <identify-dir>/all for "
                               "the default config); another is refused")

    def __post_init__(self) -> None:
        super().__post_init__()
        folder = self.identify_folder()  # the figure lives with its identify result, keyed by the identify config
        if self.out and C.repo_path(self.out).resolve() != folder.resolve():
            raise ValueError(f"--out {self.out}: this config's result goes to {folder} (the identify cache, keyed by "
                             "the config); leave --out unset")
        object.__setattr__(self, "out", str(folder))


def main(config: Config, model=None) -> IdentifyResult:
    t = C.Timer()
    result = C.identify_result(config, model=model)
    t(f"identify: {config.identify_folder()}")
    return result


SUMMARY_KEYS = ("accuracy", "mean_answer_prob", "counterfactual_accuracy", "baseline", "head_effects", "mlp_effects",
                "key_heads")


def counterfactual_per_template(result: IdentifyResult) -> dict[str, dict[str, float]]:
    """Each template's kept pairs: how often its counterfactual prompt still yields the answer, and the answer's
    probability there, from the result's own pairs and baseline (:func:`circuits.data.pairs.counterfactual_stats`);
    a template none of whose pairs was kept (a small ``--pairs``) has none. A result saved without its sweep: the
    templates its pair statistics give them for."""
    from circuits.data.pairs import counterfactual_stats

    saved = result.pair_stats.get("per_template") or {}
    if result.sweep is None:
        return {t: v for t, v in saved.items() if "counterfactual_accuracy" in v}
    kept = {p.template_id for p in result.pairs}
    per_template: dict[str, dict[str, float]] = {t: {} for t in [*saved, *(p.template_id for p in result.pairs)]
                                                 if t in kept}
    b = result.sweep.baseline
    counterfactual_stats(result.pairs, b.cf_answer == b.answer, b.cf_prob, per_template)
    return per_template


def published(result: IdentifyResult, out: Path) -> dict:
    """The three tables of docs/results.md that the identify results beside the pooled one in ``out`` give (the
    pooled one alone where ``out`` has no siblings), each read back with :meth:`IdentifyResult.load`: the numbers of
    their summaries the tables need (experiments/_tables.py renders them)."""
    from circuits.data.templates import FIGURE8

    root = Path(out).parent
    results = {t: IdentifyResult.load(root / t) for t in T.IDENTIFY_COLUMNS if t != "all" and (root / t).is_dir()}
    results["all"] = result
    summaries = {t: r.summary() for t, r in results.items()}
    rule = next(iter(summaries.values()))["key_rule"]["rule"]
    forms = {t.id: t.form for ts in FIGURE8.values() for t in ts}
    one = summaries.get("addition") or next(iter(summaries.values()))
    return {"fig2_addition": {"render": "fig2_addition", "data": {
                "model": one["model"], **{k: one[k] for k in ("accuracy", "mean_answer_prob", "baseline", "head_effects",
                                                             "mlp_effects")},
                "fraction_head_effects": one["metrics"]["fraction"]["head_effects"]}},
            "identify": {"render": "identify", "data": {
                "key_rule": rule, "results": {t: {k: s[k] for k in SUMMARY_KEYS} for t, s in summaries.items()}}},
            "identify_families": {"render": "identify_families", "data": {
                "forms": forms,
                "results": {t: {"per_template": counterfactual_per_template(r)} for t, r in results.items()}}}}


def plot(result: IdentifyResult, out: Path) -> Path:
    T.write_published(out, published(result, out))
    return write_figure(result.figure(), Path(out) / "heads.html")


if __name__ == "__main__":
    C.run(Config, main, plot)
