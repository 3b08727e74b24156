"""Figure 2: the effect of every head and MLP on the answer logit, pooled over the four operations (path
patching at END, Section 4.1). This is ``circuits identify --task all``: one result per operation and the
pooled one in ``all/``, shared with every other figure script.

Run: ``python experiments/fig2_key_heads.py [--pairs 64]``; ``--replot`` redraws from the saved result. The results
go under ``--identify-dir`` (``results/identify``), in a folder of their own when they were made with another config
(other ``--pairs``, ``--seed``, ...): the script prints where."""

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
        if not self.out:  # the figure lives with its identify result, keyed by the identify config
            object.__setattr__(self, "out", str(self.identify_folder()))
        elif Path(self.out) != self.identify_folder():
            raise ValueError(f"--out {self.out}: this config's result goes to {self.identify_folder()} (the identify "
                             "cache, keyed by the config); leave --out unset")


def main(config: Config, model=None) -> IdentifyResult:
    t = C.Timer()
    result = C.identify_result(config, model=model)
    t(f"identify: {config.identify_folder()}")
    return result


SUMMARY_KEYS = ("accuracy", "mean_answer_prob", "counterfactual_accuracy", "baseline", "head_effects", "mlp_effects",
                "key_heads")


def published(result: IdentifyResult, out: Path) -> dict:
    """The three tables of docs/results.md that the identify results beside the pooled one in ``out`` give (the
    pooled one alone where ``out`` has no siblings): the numbers of their summaries the tables need
    (experiments/_tables.py renders them)."""
    from circuits.data.templates import FIGURE8

    root = Path(out).parent
    summaries = {t: IdentifyResult.load(root / t).summary() for t in T.IDENTIFY_COLUMNS
                 if t != "all" and (root / t).is_dir()}
    summaries["all"] = result.summary()
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
                "forms": forms, "results": {t: {"per_template": s["per_template"]} for t, s in summaries.items()}}}}


def plot(result: IdentifyResult, out: Path) -> Path:
    T.write_published(out, published(result, out))
    return write_figure(result.figure(), Path(out) / "heads.html")


if __name__ == "__main__":
    C.run(Config, main, plot)
