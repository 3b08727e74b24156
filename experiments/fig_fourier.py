"""How the key components compute (issue 32; kept apart from fig_heuristics.py): the key heads' and MLPs' direct
effect at END over the number line and its Fourier spectrum (Zhou et al. 2024), the model's accuracy on two-digit
sums, and, where it handles them, which neurons of the key MLPs move the answer's units digit and which its tens
(Baeumel et al. 2025). The key components come from the shared identify result (results/identify/<task>). Writes
``results/fig_fourier/`` (the result, ``figure.html``, ``digits.html`` where neurons were labelled) and
``published.json`` (the tables of docs/results.md; experiments/_tables.py renders them, publish.py copies them).

Run: ``python experiments/fig_fourier.py [--n-heads 8 --n-mlps 4]``; ``--replot`` redraws."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

import _common as C
import _tables as T

from circuits.config import option
from circuits.explain.numbers.config import NumbersConfig
from circuits.explain.numbers.job import numbers
from circuits.explain.numbers.result import NumbersResult
from circuits.viz.figures import write_figure


@dataclass(frozen=True)
class Config(C.KeyHeadConfig, NumbersConfig):
    """The identify run (its shared folder) and ``circuits numbers``'s own fields, each declared once there."""

    out: str = option("results/fig_fourier")


def main(config: Config, model=None) -> NumbersResult:
    t = C.Timer()
    model = model or C.model_for(config.model, config.dtype)
    made = C.identify_result(config, model=model)
    t(f"identify: {len(made.pairs)} pairs")
    own = {f.name: getattr(config, f.name) for f in dataclasses.fields(NumbersConfig)}
    nc = NumbersConfig(**{**own, "heads_from": str(config.identify_folder())})
    result = numbers(model, made, nc, progress=False)
    t("Fourier view and digit positions")
    result.save(config.out)
    return result


def published(result: NumbersResult) -> dict:
    """The two tables of docs/results.md this result gives: the mean share of the energy per period over the key
    heads and over the key MLPs (intervals over pairs and over components, beside the white-noise and straight-trend
    shares on the same number line, and the MLPs' minus the heads'), and each component's dominant periods,
    straight-trend share and mean share."""
    s = result.summary()
    kinds = {str(c): c.kind for c in result.spectra.components}
    keys = [f"{p:g}" for p in s["periods"]]  # the summary's keys, in the periods' order
    n_of = {k: sum(c.kind == k for c in result.spectra.components) for k in s["by_kind"]}
    periods = {"periods": s["periods"], "by_kind": {k: [v[p] for p in keys] for k, v in s["by_kind"].items()},
               "by_kind_ci": {k: [v[p] for p in keys] for k, v in s["by_kind_ci"].items()},
               # the nulls (issue 43): intervals over the components, chance and straight-trend shares on this line
               "n_components": n_of,
               "by_kind_component_ci": {k: [v[p] for p in keys] for k, v in s["by_kind_component_ci"].items()},
               "chance": [s["chance_shares"][p] for p in keys], "trend": [s["trend_shares"][p] for p in keys]}
    if "mlp_minus_head" in s:
        periods["mlp_minus_head"] = [[d["difference"], d["low"], d["high"], d["holm_apart"]]
                                     for d in (s["mlp_minus_head"][p] for p in keys)]
    return {"fourier_periods": {"render": "fourier_periods", "data": periods},
            "fourier_components": {"render": "fourier_components", "data": {"components": {
                name: {"kind": kinds[name], "dominant": s["dominant_periods"][name], "ramp_share": c["ramp_share"],
                       "mean_share": c["mean_share"]} for name, c in s["components"].items()}}}}


def plot(result: NumbersResult, out: Path) -> Path:
    T.write_published(out, published(result))
    digits = result.digit_figure()
    if digits is not None:
        write_figure(digits, Path(out) / "digits.html")
    return write_figure(result.figure(), Path(out) / "figure.html")


if __name__ == "__main__":
    C.run(Config, main, plot)
