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
from torch import Tensor

from circuits.beyond.faithfulness.config import RANKING_BOOT_SEED, FaithfulnessConfig
from circuits.data.pairs import PromptPair, read_pairs, write_pairs
from circuits.identify.validity import CheckedPairs, validity_from_summary, validity_json
from circuits.io import Shapes, load_torch, read_json, save_torch, write_json
from circuits.patching.circuit_curves import FaithfulnessCurve
from circuits.patching.core.uncertainty import percentile_interval
from circuits.results import Result
from circuits.viz.notebook import ShowsFigure

PARTS = "parts"  # the working folder of a run: one finished ranking per file
SCORING_PAIRS = "scoring_pairs.jsonl"  # the pairs the circuits were scored on (pairs.jsonl: the ones ranked on)


def _interval(iv: tuple[float, float]) -> tuple[float, float] | None:
    """A bootstrap interval, or None where none was computed (``n_boot=0``: NaN)."""
    return None if any(x != x for x in iv) else (float(iv[0]), float(iv[1]))


def _row(c: FaithfulnessCurve) -> dict[str, Any]:
    """One curve in ``summary.json``: per size (a fraction) the nodes kept and f with its interval; the areas."""
    return {"cpr": c.cpr, "cmd": c.cmd, "cpr_ci": _interval(c.cpr_interval), "cmd_ci": _interval(c.cmd_interval),
            "level": c.level, "positions": c.positions, "ablation": c.ablation, "metric": c.metric,
            "n_nodes": c.n_nodes, "m_full": float(c.m_full.mean()), "m_empty": float(c.m_empty.mean()),
            "seconds": c.seconds, "sizes": c.table()}


def _expect_edge_axes(shapes: Shapes) -> None:
    """Fix the ``sender`` and ``receiver`` axes' sizes from the layer and head counts met so far: the faithfulness
    engine's senders are the input and each layer's heads and MLP (``1 + L (H + 1)``), its receivers each head's q, k
    and v and each MLP, then the logits (``L (3H + 1) + 1``;
    :func:`~circuits.patching.circuit_curves.edge_senders`, ``edge_receivers``)."""
    if "layer" in shapes.sizes and "head" in shapes.sizes:
        (L, said), (H, _) = shapes.sizes["layer"], shapes.sizes["head"]
        source = f"{said}'s {L} layers x {H} heads"
        shapes.sizes.setdefault("sender", (1 + L * (H + 1), source))
        shapes.sizes.setdefault("receiver", (L * (3 * H + 1) + 1, source))


SETTING_TEXT = {"nodes@end": "nodes at END", "nodes@all": "nodes at every position", "edges@end": "edges at END",
                "edges@all": "edges at every position"}


@dataclass(eq=False, repr=False)
class FaithfulnessResult(ShowsFigure, CheckedPairs, Result[FaithfulnessConfig]):
    """Each ranking's circuits scored as MIB scores them; ``curves[ranking][setting]`` (settings: ``nodes@end``,
    ``nodes@all``, ``edges@end``, ``edges@all``; each a :class:`~circuits.patching.circuit_curves.FaithfulnessCurve`),
    ``scores[ranking]`` (``heads`` [layer, head], ``mlps`` [layer], ``input`` [] where the ranking scores the input
    node and ``config.input_node``, ``edges`` where defined: the importance each ranking orders by, larger first),
    ``seconds[ranking]`` (computing the ranking)."""

    kind = "faithfulness"
    in_place = True  # its folder is also the run's working folder (parts/: finished rankings a rerun resumes from)
    work = PARTS

    pairs: list[PromptPair]
    scores: dict[str, dict[str, Tensor]]
    curves: dict[str, dict[str, FaithfulnessCurve]]
    seconds: dict[str, float] = field(default_factory=dict)
    # ranking -> {"ranking": CPU seconds of the ranking, <setting>: CPU seconds of that curve} (this process's CPU
    # time, which other work on a shared machine does not inflate)
    cpu_seconds: dict[str, dict[str, float]] = field(default_factory=dict)
    # the same curves by the signed ranking (a node pushing the metric the other way ranks last): MIB's CPR curve
    signed_curves: dict[str, dict[str, FaithfulnessCurve]] = field(default_factory=dict)
    # the pairs the circuits were scored on; ``pairs`` are the ones each ranking was found on (held out: disjoint by
    # prompt; in-sample: the same pairs)
    scoring_pairs: list[PromptPair] = field(default_factory=list)
    # held out: the absolute ranking's circuits scored on the ranking pairs themselves (the in-sample CMD)
    in_sample_curves: dict[str, dict[str, FaithfulnessCurve]] = field(default_factory=dict)
    # held out, with config.ranking_boot: ranking -> node setting -> CMD per resample of both the ranking and the
    # scoring pairs (circuits.beyond.faithfulness.job.ranking_bootstrap)
    ranking_boot: dict[str, dict[str, Tensor]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        super().__post_init__()
        if not self.scoring_pairs:
            self.scoring_pairs = list(self.pairs)

    @property
    def held_out(self) -> bool:
        """Whether the circuits were scored on pairs other than the ones they were found on."""
        return self.scoring_pairs != self.pairs

    def cpr_curve(self, ranking: str, setting: str) -> FaithfulnessCurve:
        """The curve CPR is read from: the signed ranking's (``cpr_ranking="signed"``, MIB's) or the absolute one's."""
        signed = self.signed_curves.get(ranking, {}).get(setting)
        return signed if signed is not None and self.config.cpr_ranking == "signed" else self.curves[ranking][setting]

    @property
    def task(self) -> str:
        return getattr(self.config, "task", "")

    @property
    def settings(self) -> list[str]:
        return list(dict.fromkeys(s for by in self.curves.values() for s in by))

    def table(self) -> list[dict[str, Any]]:
        """One row per ranking and setting: CPR (from :meth:`cpr_curve`), CMD (from the absolute ranking's curve),
        with intervals, the ranking's seconds, the curve's seconds; ``cpr_signed`` and ``cpr_absolute`` both; held
        out, ``cmd_in_sample`` (the same circuits on the ranking pairs) and ``cmd_gap`` (in-sample minus held-out
        CMD), None where not measured."""
        return [{"ranking": r, "setting": s, "cpr": self.cpr_curve(r, s).cpr, "cmd": c.cmd,
                 "cpr_ci": _interval(self.cpr_curve(r, s).cpr_interval), "cmd_ci": _interval(c.cmd_interval),
                 "cpr_ranking": self.config.cpr_ranking, "cpr_absolute": c.cpr,
                 "cpr_signed": self.signed_curves[r][s].cpr if s in self.signed_curves.get(r, {}) else None,
                 "cmd_in_sample": self.in_sample_curves[r][s].cmd if s in self.in_sample_curves.get(r, {}) else None,
                 "cmd_gap": self.in_sample_curves[r][s].cmd - c.cmd if s in self.in_sample_curves.get(r, {}) else None,
                 "cmd_ci_ranking_boot": self._both_interval(r, s, c.ci_level),
                 "ranking_seconds": self.seconds.get(r, float("nan")), "curve_seconds": c.seconds,
                 "ranking_cpu_seconds": self.cpu_seconds.get(r, {}).get("ranking", float("nan")),
                 "curve_cpu_seconds": self.cpu_seconds.get(r, {}).get(s, float("nan"))}
                for r, by in self.curves.items() for s, c in by.items()]

    def _both_interval(self, ranking: str, setting: str, level: float) -> tuple[float, float] | None:
        """The CMD interval over resamples of the ranking and the scoring pairs (``ranking_boot``), or None."""
        draws = self.ranking_boot.get(ranking, {}).get(setting)
        if draws is None or not len(draws):
            return None
        low, high = percentile_interval(draws, level)
        return float(low), float(high)

    def best(self, setting: str = "nodes@end") -> tuple[str, float] | None:
        """The ranking with the lowest CMD in ``setting`` and that CMD (None when nothing was measured there)."""
        rows = [(c.cmd, r) for r, by in self.curves.items() for s, c in by.items() if s == setting and c.cmd == c.cmd]
        return (min(rows)[1], min(rows)[0]) if rows else None

    def summary(self) -> dict[str, Any]:
        return {"model": getattr(self.config, "model", ""), "task": self.task, "n_pairs": len(self.pairs),
                "n_scoring_pairs": len(self.scoring_pairs), "held_out": self.held_out,
                "splits": {"ranking": self._split(self.pairs), "scoring": self._split(self.scoring_pairs)},
                "cpr_ranking": self.config.cpr_ranking,
                "cpr_from": "the signed ranking's curve" if self.config.cpr_ranking == "signed" else
                            "the absolute ranking's curve", "cmd_from": "the absolute ranking's curve",
                "metric": self.config.metric, "ablation": self.config.ablation,
                "counterfactual": self.config.counterfactual, "second_logit": self.config.second_logit,
                "position_scores": self.config.position_scores,
                "input_node": self.config.input_node,
                "input_ranked": [r for r, parts in self.scores.items() if "input" in parts],
                "ranking_boot": {"n": self.config.ranking_boot, "rankings": list(self.ranking_boot),
                                 "seed": RANKING_BOOT_SEED} if self.ranking_boot else None,
                "pairs_with_label": sum(p.counterfactual_answer_token_id >= 0 for p in self.scoring_pairs),
                "mib": self.config.mib(),
                "sizes": list(self.config.sizes), "sizes_percent": [round(100 * s, 9) for s in self.config.sizes],
                "seconds": self.seconds, "cpu_seconds": self.cpu_seconds,
                "table": [{**row, **{k: list(row[k]) if row[k] else None
                                     for k in ("cpr_ci", "cmd_ci", "cmd_ci_ranking_boot")}} for row in self.table()],
                "curves": {r: {s: _row(c) for s, c in by.items()} for r, by in self.curves.items()},
                "signed_curves": {r: {s: _row(c) for s, c in by.items()} for r, by in self.signed_curves.items()},
                "in_sample_curves": {r: {s: _row(c) for s, c in by.items()}
                                     for r, by in self.in_sample_curves.items()},
                "best_cmd": {s: self.best(s) for s in self.settings}, **validity_json(self._validity)}

    def _split(self, pairs: list[PromptPair]) -> dict[str, Any]:
        """One split of pairs as the summary records it: how many, the seed they were built with, their prompts."""
        c = self.config
        seed = None if c.pairs_from else c.seed if pairs is self.pairs or not self.held_out else c.score_seed
        return {"n": len(pairs), "seed": seed, "pairs_from": c.pairs_from or None,
                "references": [p.reference for p in pairs]}

    def figure(self, setting: str | None = None):
        """f against circuit size, one line per ranking (``setting``: default the first measured)."""
        from circuits.viz.analysis_figures import faithfulness_figure
        from circuits.viz.figures import model_label

        setting = setting or (self.settings[0] if self.settings else "nodes@end")
        by = {r: c[setting] for r, c in self.curves.items() if setting in c}
        sizes = next(iter(by.values())).sizes if by else torch.tensor(self.config.sizes, dtype=torch.float64)
        title = (f"{self.task}: faithfulness of each ranking's circuit, {SETTING_TEXT.get(setting, setting)} "
                 f"({model_label(getattr(self.config, 'model', ''))}, {len(self.pairs)} pairs, {self.config.metric}, "
                 f"{self.config.ablation} ablation)")
        ci = {r: c for r, c in by.items() if not c.f_low.isnan().all()}  # no bootstrap (n_boot=0): no band
        from circuits.patching.engines.registry import COLORS

        # each signed ranking's curve beside its absolute one (same colour, dotted) where the two differ
        signed = {f"{r}, signed": c[setting].f for r, c in self.signed_curves.items()
                  if setting in c and r in by and not torch.equal(c[setting].f, by[r].f)}
        colors = {**COLORS, **{f"{r}, signed": COLORS.get(r, "#333333") for r in self.signed_curves}}
        f = {**{(f"{r}, absolute" if f"{r}, signed" in signed else r): c.f for r, c in by.items()}, **signed}
        name = {r: f"{r}, absolute" if f"{r}, signed" in signed else r for r in by}
        colors.update({f"{r}, absolute": COLORS.get(r, "#333333") for r in by})
        title += "; CPR from the " + ("signed (dotted)" if self.config.cpr_ranking == "signed" else "absolute") + \
            " ranking's curve, CMD from the absolute one's"
        ranked = [r for r in by if "input" in self.scores.get(r, {})]
        if setting.startswith("edges"):  # an edge circuit keeps edges; the input is always one of their senders
            title += "; senders: the input, heads and MLPs (MIB's edge graph)"
        else:
            title += ("; nodes: the input, heads and MLPs (MIB's node graph)" if ranked and len(ranked) == len(by) else
                      "; nodes: heads and MLPs" + (f", the input too for {', '.join(ranked)}" if ranked else
                                                   " (MIB also ranks the input node)"))
        if self.held_out:
            title += f"; ranked on {len(self.pairs)} pairs, scored on {len(self.scoring_pairs)} others"
        return faithfulness_figure(sizes, f, {name[r]: c.f_low for r, c in ci.items()},
                                   {name[r]: c.f_high for r, c in ci.items()}, title, colors, dotted=list(signed))

    def table_figure(self):
        from circuits.viz.analysis_figures import faithfulness_table

        return faithfulness_table(self.table(), f"{self.task}: CPR (higher is better), CMD (lower is better), seconds")

    def _write(self, folder: Path) -> None:
        from circuits.viz.figures import write_figures

        write_json(folder / "summary.json", self.summary_json())
        write_pairs(folder / "pairs.jsonl", self.pairs)
        write_pairs(folder / SCORING_PAIRS, self.scoring_pairs)
        save_torch({"scores": self.scores, "curves": {r: {s: c.to_dict() for s, c in by.items()}
                                                      for r, by in self.curves.items()},
                    "signed_curves": {r: {s: c.to_dict() for s, c in by.items()}
                                      for r, by in self.signed_curves.items()},
                    "in_sample_curves": {r: {s: c.to_dict() for s, c in by.items()}
                                         for r, by in self.in_sample_curves.items()},
                    "ranking_boot": self.ranking_boot, "seconds": self.seconds, "cpu_seconds": self.cpu_seconds},
                   folder / "faithfulness.pt")
        if self.curves:  # every setting's curves (nodes@end, nodes@all, edges), then the table of all of them
            write_figures([self.figure(s) for s in self.settings] + [self.table_figure()], folder / "figure.html", validity=self.validity())

    @classmethod
    def _read(cls, folder: Path, config: FaithfulnessConfig) -> FaithfulnessResult:
        path = folder / "faithfulness.pt"
        t = load_torch(path, "faithfulness")
        shapes = Shapes(path)
        if not isinstance(t, dict) or not all(isinstance(t.get(k, {}), dict) for k in
                                              ("scores", "curves", "signed_curves", "in_sample_curves")):
            raise shapes.fail("it is not a faithfulness result's tensors")
        for r, parts in t.get("scores", {}).items():  # every ranking over one model: one layer and head count
            if not isinstance(parts, dict):
                raise shapes.fail(f"scores.{r} is a {type(parts).__name__}, not a dictionary of tensors")
            for k, v in parts.items():
                part = k.removesuffix("_signed")
                if part == "edges":  # edge_senders x edge_receivers of the model the heads' scores are of
                    _expect_edge_axes(shapes)
                    shapes.tensor(f"scores.{r}.{k}", v, ("sender", "receiver"), finite=True)
                    continue
                axes = {"heads": ("layer", "head"), "mlps": ("layer",), "input": ()}.get(part) or \
                    tuple(f"{r}.{k} axis {i}" for i in range(getattr(v, "ndim", 0)))
                shapes.tensor(f"scores.{r}.{k}", v, axes)

        def read(key: str) -> dict[str, dict[str, FaithfulnessCurve]]:
            return {r: {s: FaithfulnessCurve.checked(c, path, f"{key}.{r}.{s}") for s, c in by.items()}
                    for r, by in t.get(key, {}).items()}

        curves, signed, inside = read("curves"), read("signed_curves"), read("in_sample_curves")
        boot = t.get("ranking_boot", {})
        if not isinstance(boot, dict) or not all(isinstance(by, dict) for by in boot.values()):
            raise shapes.fail("ranking_boot is not a dictionary of rankings' resampled CMDs")
        for r, by in boot.items():
            for s, v in by.items():
                shapes.tensor(f"ranking_boot.{r}.{s}", v, ("ranking resample",), no_inf=True)
        scoring = read_pairs(folder / SCORING_PAIRS) if (folder / SCORING_PAIRS).is_file() else []
        summary = read_json(folder / "summary.json") if (folder / "summary.json").is_file() else {}
        validity = validity_from_summary(summary, folder / "summary.json") if isinstance(summary, dict) else None
        return cls(config, read_pairs(folder / "pairs.jsonl"), t["scores"], curves, dict(t["seconds"]),
                   {k: dict(v) for k, v in t.get("cpu_seconds", {}).items()}, signed, scoring, inside, boot,
                   _validity=validity)
