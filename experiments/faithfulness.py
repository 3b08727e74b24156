"""Which ranking gives the most faithful arithmetic circuit per unit of compute (issue 24), scored as MIB scores
circuit discovery: for every model and operation, each ranking of ``--rankings`` (exact path and activation patching
at END, exact patching at every position, the AtP* screen, GradDrop, EAP-IG) turned into circuits at MIB's sizes,
everything else ablated, f against size, CPR and CMD with bootstrap intervals, and the seconds each ranking took; at
node level with the circuit kept at END and at every position, and at edge level for EAP-IG.

Run: ``python experiments/faithfulness.py`` (SmolLM2, the four operations; ``--models smollm2,gemma3-270m`` adds Gemma
3 270M where it is installed); ``--pairs 8 --operations addition`` for a quick run; ``--replot`` redraws from the
saved results. Each model and operation is one ``circuits faithfulness`` result in ``<out>/<model>/<operation>``
(each finished ranking kept in its ``parts/``, so a stopped run resumes). The tables of docs/results.md come from
``published.json`` (experiments/_tables.py renders them)."""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import _common as C
import _tables as T

from circuits.beyond.faithfulness.config import FaithfulnessConfig
from circuits.beyond.faithfulness.job import faithfulness
from circuits.beyond.faithfulness.result import PARTS, FaithfulnessResult
from circuits.config import Config as BaseConfig
from circuits.config import add_arguments, from_arguments, option
from circuits.data.pair_config import COUNTERFACTUAL_KINDS
from circuits.data.templates import OPERATIONS
from circuits.io import read_json, write_json
from circuits.patching.faithfulness import cmd_margin
from circuits.results import check_output
from circuits.viz.figures import write_figure


@dataclass(frozen=True)
class Config(BaseConfig):
    faithfulness: FaithfulnessConfig = option(FaithfulnessConfig(n_pairs=16), skip=("model", "task", "pairs_from"),
                                              help="the run made for every model and operation")
    models: tuple[str, ...] = option(("smollm2",), help="models (gemma3-270m where installed)")
    operations: tuple[str, ...] = option(tuple(OPERATIONS), help="operations")
    out: str = option("results/faithfulness")

    def __post_init__(self) -> None:
        for op in self.operations:
            if op not in OPERATIONS:
                raise ValueError(f"Unknown operation {op!r}; accepted: {', '.join(OPERATIONS)}")
        if not self.models:
            raise ValueError("Give at least one model")

    def run_config(self, model: str, op: str) -> FaithfulnessConfig:
        return self.faithfulness.replace(model=model, task=op)

    def folder(self, model: str, op: str) -> Path:
        return Path(self.out) / slug(model) / op

    def counterfactuals_path(self) -> Path:
        return Path(self.out) / COUNTERFACTUALS


# Per model and operation, each counterfactual kind's pairs: how many, and the share whose metric can move (the
# counterfactual prompt's top token is not the answer, so m(N) != m(empty) with the logit difference).
COUNTERFACTUALS = "counterfactuals.json"


def movable(model, cfg: FaithfulnessConfig) -> dict[str, dict[str, float]]:
    """Each counterfactual kind's pairs (built as ``cfg`` builds them, that kind swapped in): how many, and the share
    whose counterfactual prompt's top token is not the answer."""
    from circuits.data.pairs import build_pairs

    out = {}
    for kind in COUNTERFACTUAL_KINDS:
        ps = build_pairs(model, cfg.pair_config().replace(counterfactual=kind), progress=False)
        out[kind] = {"n_pairs": len(ps), "movable": 1.0 - ps.counterfactual_accuracy}
    return out


def has_edges(model) -> bool:
    """Whether EAP-IG's edges can be scored on ``model`` (asked of the edge engine: not where a norm follows the
    attention sum, Gemma 2/3)."""
    from circuits.patching.faithfulness import check_edge_model

    try:
        check_edge_model(model)
    except ValueError:
        return False
    return True


def slug(model: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", Path(model).name or str(model)).strip("-") or "model"


def main(config: Config, model=None) -> dict[tuple[str, str], FaithfulnessResult]:
    """``model``: a loaded model for the first of ``config.models`` (the others are loaded here)."""
    t = C.Timer()
    out: dict[tuple[str, str], FaithfulnessResult] = {}
    given = model
    for i, name in enumerate(config.models):
        model = given if i == 0 and given is not None else C.model_for(name, config.faithfulness.dtype)
        edges = config.faithfulness.edges and "eap-ig" in config.faithfulness.rankings and has_edges(model)
        if config.faithfulness.edges and not edges and "eap-ig" in config.faithfulness.rankings:
            print(f"{name}: no edge level (its heads have no additive output of their own); nodes only", flush=True)
        for op in config.operations:
            cfg, folder = config.run_config(name, op), config.folder(name, op)
            cfg = cfg if edges or not cfg.edges else cfg.replace(edges=False)
            check_output(folder, "faithfulness")
            pairs, _ = cfg.load_pairs(model)
            shares_path = config.counterfactuals_path()
            shares = read_json(shares_path) if shares_path.is_file() else {}
            if f"{name}/{op}" not in shares:
                shares[f"{name}/{op}"] = movable(model, cfg)
                write_json(shares_path, shares)
            r = faithfulness(model, pairs, cfg, progress=False, parts=folder / PARTS)
            r.save(folder)
            out[(name, op)] = r
            t(f"{name} {op}: " + ", ".join(f"{k} {v:.0f} s" for k, v in r.seconds.items()))
    return out


def load(config: Config) -> dict[tuple[str, str], FaithfulnessResult]:
    return {(m, op): FaithfulnessResult.load(config.folder(m, op)) for m in config.models for op in config.operations
            if (config.folder(m, op) / "circuits.json").is_file()}


def margins(r: FaithfulnessResult) -> dict[str, list]:
    """Per setting: the ranking with the lowest CMD, the runner-up, and how much lower (paired bootstrap interval over
    the same pairs, :func:`~circuits.patching.faithfulness.cmd_margin`)."""
    out = {}
    for setting in r.settings:
        ranked = sorted((c.cmd, k) for k, by in r.curves.items() for s, c in by.items() if s == setting and c.cmd == c.cmd)
        if len(ranked) > 1:
            a, b = r.curves[ranked[0][1]][setting], r.curves[ranked[1][1]][setting]
            out[setting] = [ranked[0][1], ranked[1][1], *cmd_margin(a, b, r.config.n_boot)]
    return out


def published(results: dict[tuple[str, str], FaithfulnessResult], shares: dict | None = None) -> dict:
    """The tables of docs/results.md these results give (experiments/_tables.py renders them); ``shares``: the
    counterfactual kinds' pairs whose metric can move (:data:`COUNTERFACTUALS`)."""
    first = next(iter(results.values()))
    rows = [{"model": m, "operation": op, "setting": row["setting"], "ranking": row["ranking"], "cpr": row["cpr"],
             "cmd": row["cmd"], "cmd_ci": list(row["cmd_ci"]) if row["cmd_ci"] else None,
             "ranking_seconds": row["ranking_seconds"], "curve_seconds": row["curve_seconds"],
             "ranking_cpu_seconds": row["ranking_cpu_seconds"], "curve_cpu_seconds": row["curve_cpu_seconds"]}
            for (m, op), r in results.items() for row in r.table()]
    data = {"n_pairs": {f"{m}/{op}": len(r.pairs) for (m, op), r in results.items()}, "metric": first.config.metric,
            "ablation": first.config.ablation, "sizes": list(first.config.sizes), "rankings": list(first.config.rankings),
            "counterfactual": first.config.counterfactual, "count": first.config.count, "ig_grid": first.config.ig_grid,
            "n_boot": first.config.n_boot, "rows": rows,
            "margins": {f"{m}/{op}": margins(r) for (m, op), r in results.items()}}
    tables = {"faithfulness": {"render": "faithfulness", "data": data},
              "faithfulness_seconds": {"render": "faithfulness_seconds", "data": data}}
    if shares:
        tables["faithfulness_counterfactuals"] = {"render": "faithfulness_counterfactuals",
                                                  "data": {"kinds": list(COUNTERFACTUAL_KINDS), "shares": shares}}
    return tables


def plot(results: dict[tuple[str, str], FaithfulnessResult], out: Path) -> Path:
    shares_path = Path(out) / COUNTERFACTUALS
    T.write_published(out, published(results, read_json(shares_path) if shares_path.is_file() else None))
    for (m, op), r in results.items():
        for setting in r.settings:
            write_figure(r.figure(setting), Path(out) / slug(m) / op / f"figure-{setting.replace('@', '-')}.html")
    return Path(out) / T.PUBLISHED


def cli(argv: list[str] | None = None) -> Path:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(parser, Config)
    parser.add_argument("--replot", action="store_true", help="redraw the figures and tables from the saved results")
    args = parser.parse_args(argv)
    try:
        config = from_arguments(Config, args)
    except ValueError as e:
        parser.error(str(e))
    if not args.replot:
        C.configure_threads()
    results = load(config) if args.replot else main(config)
    if not results:
        parser.error(f"no saved faithfulness results under {config.out}; run without --replot first")
    path = plot(results, Path(config.out))
    print(path)
    return path


if __name__ == "__main__":
    sys.exit(0 if cli() else 1)
