"""The identify step's result: the pairs, the sweep over every component, and the key components (Figure 2).

:class:`IdentifyResult` is what ``circuits identify`` writes and what everything downstream reads heads from
(``circuits finetune --heads-from``, the figure scripts, the report). Its ranking is the sweep's one ranking
(:func:`circuits.patching.core.ranking.rank`) and returns every head.

A saved folder holds ``summary.json`` (effects in every metric, key heads and MLPs, pair statistics; for
people and other tools), ``pairs.jsonl`` (the exact token ids), ``sweep.pt`` (per-pair patched values, from
which every metric is recomputed), ``heads.html`` (the heatmap), ``config.json`` and ``circuits.json``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from circuits.config import count, option
from circuits.data.pairs import PromptPair, read_pairs, write_pairs
from circuits.data.templates import OPERATIONS
from circuits.data.source import PAIR_STAT_FIELDS
from circuits.identify.config import IdentifyConfig
from circuits.identify.circuit_graph import circuit_figure, edge_summary, receiver_effects_of
from circuits.identify.validity import Validity
from circuits.patching.engines.end_sweep import SweepResult
from circuits.patching.core.metrics import DEFAULT_METRIC, METRICS, PROB_METRICS, Metric, get_metric
from circuits.patching.core.ranking import KeyRule, Ranked
from circuits.patching.core.scores import Scores
from circuits.io import load_torch, read_json, save_torch, write_json
from circuits.identify.config import KeyHeadSource
from circuits.results import MARKER, Result, ResultError, number, results_below
from circuits.types import Head
from circuits.viz.notebook import ShowsFigure

class KeyHead(tuple):
    """A key head as ``key_heads()`` returns it: the ``(head, effect)`` pair -- it unpacks, indexes and compares as
    that pair -- with the effect's bootstrap interval over pairs (``low``, ``high`` at ``level``) and ``uncertain``:
    whether the interval reaches the key rule's threshold, so that other pairs could leave the head out."""

    def __new__(cls, head: Head, effect: float, low: float, high: float, uncertain: bool = False,
                level: float = 0.95) -> KeyHead:
        self = super().__new__(cls, (head, effect))
        self.low, self.high, self.uncertain, self.level = low, high, uncertain, level
        return self

    def __getnewargs__(self):
        return (self[0], self[1], self.low, self.high, self.uncertain, self.level)

    @property
    def head(self) -> Head:
        return self[0]

    @property
    def effect(self) -> float:
        return self[1]

    def __repr__(self) -> str:
        mark = ", uncertain" if self.uncertain else ""
        return f"({self[0]!r}, {self[1]!r}, {self.level:.0%} CI [{self.low:.4g}, {self.high:.4g}]{mark})"


@dataclass(eq=False, repr=False)
class IdentifyResult(ShowsFigure, Result[IdentifyConfig]):
    """One task's identify result.

    ``config`` is the :class:`~circuits.identify.job.IdentifyConfig` (as saved); ``pair_stats`` what the model
    did on every candidate before filtering (accuracy, answer probability, per template). ``sweep`` holds the
    per-pair patched values; a result saved by an older script may hold only mean effects (``saved_effects``,
    ``{metric: (heads, mlps)}``).
    """

    kind = "identify"
    version = 2

    pairs: list[PromptPair]
    sweep: SweepResult | None
    pair_stats: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0
    per_task: dict[str, Any] | None = None
    saved_effects: dict[str, tuple[Tensor, Tensor]] = field(default_factory=dict)
    edges: Any = None  # an identify.circuit_graph.EdgeSweep when made with --receivers
    weights: str = ""  # the model's weights_fingerprint (circuits.models.fingerprint), "" in results saved before
    _intervals: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    _validity: Validity | None = field(default=None, repr=False, compare=False)  # as saved in summary.json
    # --task all's pooled result: task -> the indices of its pairs drawn, in order (saved as pooled.json, read from
    # the sibling folders: circuits.identify.pooled); None for a result of its own pairs
    pooled_from: dict[str, list[int]] | None = field(default=None, repr=False, compare=False)

    # --- the one ranking --------------------------------------------------------------------------

    @property
    def key_rule(self) -> KeyRule:
        return KeyRule.parse(self.config.key_rule, tuple(self._custom()))

    @property
    def task(self) -> str:
        return self.config.task

    @property
    def model_name(self) -> str:
        return self.config.model

    def metric(self, metric: str | Metric | None = None) -> Metric:
        """A metric by name (the sweep's custom ones too); ``None``: the key rule's metric."""
        if metric is None:
            metric = self.key_rule.metric
        if self.sweep is not None:
            return self.sweep.metric(metric)
        return get_metric(metric)

    def scores(self, metric: str | Metric | None = DEFAULT_METRIC) -> Scores:
        """:class:`~circuits.patching.core.scores.Scores` of every head and MLP by ``metric`` (default ``fraction``, as
        on every result; ``None``: the key rule's metric), from the sweep or the effects saved with the result. Every
        ranking of this result is read from it (``scores(m).ranked(part="heads")``, ``.key(rule, "mlps")``, ...)."""
        m = self.metric(metric)
        if self.sweep is not None:
            return self.sweep.scores(m)
        if m.name not in self.saved_effects:
            raise ResultError(f"This identify result was saved with effects in {', '.join(self.saved_effects)} only, "
                              f"not {m.name}; rerun circuits identify to get every metric")
        heads, mlps = self.saved_effects[m.name]
        return Scores({"heads": heads, "mlps": mlps}, m.name, m.sign, engine=f"exact-{self.config.mode}")

    # The paper's workflow reads the key heads and "the top k" of this result; these two conveniences are Scores.key and
    # Scores.top(first=rule) by the key rule, with what the result adds: its check that the rule's metric was measured
    # for every component, and each key head's bootstrap interval over its pairs.
    def key_heads(self, rule: str | KeyRule | None = None) -> list[Ranked]:
        """The heads ``rule`` selects (default: the rule the result was made with), most important first.

        Each is a ``(head, effect)`` pair, and, where the result holds per-pair values and its config a bootstrap
        (the default), a :class:`KeyHead` that also carries the effect's bootstrap interval over pairs (``low``,
        ``high``, the ``head_ci_low``/``head_ci_high`` of ``summary.json``) and whether it reaches the rule's
        threshold (``uncertain``, the command's ``uncertain_key_heads``). The key MLPs:
        ``scores(None).key(result.key_rule, "mlps")``."""
        rule, s = self._rule_scores(rule, "heads")
        selected = s.key(rule)
        ci = self.intervals(rule.metric)
        if ci is None:
            return selected
        from circuits.patching.core.uncertainty import crosses, rule_threshold

        th = rule_threshold(rule, s.heads, s.sign)
        level = getattr(ci, "level", 0.95)
        return [KeyHead(h, e, float(ci.head_low[h]), float(ci.head_high[h]),
                        crosses(float(ci.head_low[h]), float(ci.head_high[h]), th), level) for h, e in selected]

    def top_heads(self, k: int, rule: str | KeyRule | None = None) -> list[Head]:
        """``k`` heads: the key heads first, then the rest of the same metric's ranking (how fine-tuning and the
        knockout curves take "the top k"): :meth:`Scores.top` with ``first=rule``. The top MLPs:
        ``scores(None).top(k, "mlps", first=result.key_rule)``."""
        rule, s = self._rule_scores(rule, "heads")
        if k > (n := len(s.ranked(part="heads"))):
            raise ResultError(f"This identify result ranks only {n} heads, fewer than {k}")
        return s.top(k, "heads", first=rule)

    def _rule_scores(self, rule: str | KeyRule | None, part: str) -> tuple[KeyRule, Scores]:
        """The key rule and the scores by its metric, refused when the metric was measured for some components only
        (``prob`` of a result made with ``prob='key'``: NaN for all but the key ones), where the rule would pick
        among the measured few without a word. A metric unmeasured everywhere (``fraction`` where the counterfactual
        moves nothing) selects nothing, as before."""
        rule = self.key_rule if rule is None else KeyRule.parse(rule, tuple(self._custom()))
        s = self.scores(rule.metric)
        values = s[part]
        missing = int(torch.isnan(values).sum())
        if 0 < missing < values.numel():
            what = "heads" if part == "heads" else "MLPs"
            made = (f" (this result was made with prob={self.config.prob!r}: the answer probability of the key components "
                    f"of {self.config.key_rule} alone)" if s.metric in PROB_METRICS else "")
            raise ResultError(f"Key rule {rule}: {s.metric} was measured for {values.numel() - missing} of {values.numel()} "
                              f"{what} only{made}, so the rule would ignore the {missing} unmeasured ones; rerun circuits "
                              f"identify with --prob all, or use a rule over another metric (fraction, relative_logit, "
                              f"logit_diff)")
        return rule, s

    def _custom(self) -> dict[str, Metric]:
        return self.sweep.custom_metrics if self.sweep is not None else {}

    # --- how sure: bootstrap intervals over pairs (identify.uncertainty) ---------------------------

    def intervals(self, metric: str | Metric | None = None):
        """Bootstrap confidence intervals of every head's and MLP's effect (None without per-pair values or with
        ``bootstrap=0``)."""
        from circuits.patching.core.uncertainty import bootstrap

        n = getattr(self.config, "bootstrap", 1000)
        if self.sweep is None or not n:
            return None
        m = self.metric(metric)
        if m.name not in self._intervals:
            self._intervals[m.name] = bootstrap(self.sweep, m, n_boot=n, seed=self.config.seed)
        return self._intervals[m.name]

    def uncertain(self, rule: str | KeyRule | None = None) -> tuple[list[Head], list[int]]:
        """Key heads and MLPs whose interval crosses the rule's threshold (for ``topK``: the effect of the first
        component left out)."""
        from circuits.patching.core.uncertainty import crosses, rule_threshold

        rule = self.key_rule if rule is None else KeyRule.parse(rule, tuple(self._custom()))
        ci = self.intervals(rule.metric)
        if ci is None:
            return [], []
        s = self._rule_scores(rule, "mlps")[1]
        th_h, th_m = rule_threshold(rule, s.heads, s.sign), rule_threshold(rule, s.mlps, s.sign)
        hs = [h for h, _ in self.key_heads(rule) if crosses(float(ci.head_low[h]), float(ci.head_high[h]), th_h)]
        ms = [c.layer for c, _ in s.key(rule, "mlps") if crosses(float(ci.mlp_low[c.layer]), float(ci.mlp_high[c.layer]), th_m)]
        return hs, ms

    # --- can it be trusted: identify.validity ----------------------------------------------------

    def validity(self) -> Validity:
        """:class:`~circuits.identify.validity.Validity` of this result: the record saved with it, or measured from the
        sweep's unpatched runs, the pair statistics and the key heads' intervals."""
        if self._validity is not None:
            return self._validity
        from circuits.identify.validity import baseline_checks, forced

        values: dict[str, Any] = baseline_checks(self.sweep.baseline) if self.sweep is not None else {}
        before = self.pair_stats.get("accuracy")
        if before is not None and getattr(self.config, "filter_correct", True):
            values["accuracy_before_filtering"] = before  # unfiltered pairs: the swept accuracy is the same number
        keys = self.key_heads()
        if keys and self.intervals() is not None:
            values["uncertain_share"] = len(self.uncertain()[0]) / len(keys)
        return Validity.measure(len(self.pairs), forced=forced(getattr(self.config, "force", False)),
                                n_key_heads=len(keys), **values)

    # --- summary, figure, files --------------------------------------------------------------------

    def summary(self) -> dict[str, Any]:
        """The ``summary.json`` content: effects in every metric, the key components, pair statistics."""
        rule = self.key_rule
        metrics = {}
        for name in (*METRICS, *self._custom()) if self.sweep is not None else self.saved_effects:
            m, s = self.metric(name), self.scores(name)
            metrics[name] = {"head_effects": s.heads.tolist(), "mlp_effects": s.mlps.tolist(), "meaning": m.doc,
                             "important_sign": m.sign}
            ci = self.intervals(m) if self.sweep is not None else None
            if ci is not None:
                metrics[name].update(ci.to_json())
        key_heads = self.key_heads()
        ranked = self._rule_scores(rule, "mlps")[1]
        n_heads = ranked.heads.numel()
        out: dict[str, Any] = {
            "model": self.model_name, "task": self.task, "mode": self.config.mode, "n_pairs": len(self.pairs),
            **{k: self.pair_stats.get(k) for k in PAIR_STAT_FIELDS},
        }
        if self.sweep is not None:
            b = self.sweep.baseline
            out["counterfactual_accuracy"] = float((b.cf_answer == b.answer).float().mean())
            out["counterfactual_answer_prob"] = float(b.cf_prob.mean())
            out["baseline"] = {
                "answer_logit": float(b.logit.mean()), "counterfactual_answer_logit": float(b.cf_logit.mean()),
                "full_effect_relative_logit": float(((b.cf_logit - b.logit) / b.logit).mean()),
                "answer_prob": float(b.prob.mean()), "counterfactual_answer_prob": float(b.cf_prob.mean()),
                "logit_diff": float(b.logit_diff.mean()),
            }
        paper = metrics.get("relative_logit") or next(iter(metrics.values()))
        out.update({
            "metric": "relative_logit", "head_effects": paper["head_effects"], "mlp_effects": paper["mlp_effects"],
            "metrics": metrics, "key_rule": rule.to_json(),
            "key_heads": [[l, h, e] for (l, h), e in key_heads],
            "key_mlps": [[c.layer, e] for c, e in ranked.key(rule, "mlps")],
            "fraction_key_heads": len(key_heads) / n_heads,
            "ranked_heads": [[l, h, e] for (l, h), e in ranked.ranked(part="heads")],
            "seconds": self.seconds,
            "config": self.config_json(),
        })
        if "fraction" in metrics:  # how many heads the rule's threshold decides (issue 43)
            from circuits.identify.sensitivity import threshold_counts

            out["key_rule_sensitivity"] = threshold_counts(
                self.scores("fraction"), self.scores("relative_logit") if "relative_logit" in metrics else None)
        unsure_heads, unsure_mlps = self.uncertain()
        if self.intervals() is not None:
            out["uncertain_key_heads"] = [list(h) for h in unsure_heads]
            out["uncertain_key_mlps"] = unsure_mlps
        if self.edges is not None:
            out["edges"] = edge_summary(self.edges, rule.metric)
        if self.per_task is not None:
            out["per_task"] = self.per_task
        out["validity"] = self.validity().to_json()
        out["warnings"] = self.validity().lines()
        return out

    def figure(self, metric: str | Metric | None = None):
        """Figure 2 for this task: every head and MLP by ``metric`` (default: the key rule's), key heads boxed; red
        is important whatever the metric's sign, and the hover also shows the key rule's metric when it differs."""
        from circuits.viz.figures import head_heatmap, model_label

        m = self.metric(metric)
        s = self.scores(m)
        rule = self.metric(self.key_rule.metric)
        ci = self.intervals(m)
        unsure = self.uncertain()[0]
        return head_heatmap(
            s.heads, s.mlps, metric=m,
            title=(f"{self.task}: {self.config.mode} patching at END on {model_label(self.model_name)} ({len(self.pairs)} "
                   f"pairs), {m.name}; boxed: key heads by {self.key_rule}"
                   + (f", dashed: uncertain (the {ci.level:.0%} interval crosses the threshold)" if unsure else "")),
            key_heads=[h for h, _ in self.key_heads()],
            head_ci=(ci.head_low, ci.head_high) if ci is not None else None,
            mlp_ci=(ci.mlp_low, ci.mlp_high) if ci is not None else None,
            uncertain=unsure,
            also={rule.name: (self.scores(rule).heads, self.scores(rule).mlps)} if rule.name != m.name else None,
        )

    def _write(self, folder: Path) -> None:
        from circuits.viz.figures import write_figure

        # Numbers lists one per line in float32's shortest digits (the effects are float32): about half the text
        write_json(folder / "summary.json", {**self.summary_json(), "pair_stats": self.pair_stats, "weights": self.weights},
                   compact_numbers=True)
        from circuits.identify.pooled import write_pooled

        if not (self.pooled_from and write_pooled(folder, self.pooled_from, self.pairs, self.sweep)):
            write_pairs(folder / "pairs.jsonl", self.pairs)
            if self.sweep is not None:
                from circuits.patching.engines.end_sweep_files import pack_unmeasured

                save_torch(pack_unmeasured(self.sweep.tensors()), folder / "sweep.pt")
        write_figure(self.figure(), folder / "heads.html", validity=self.validity())
        if self.edges is not None:
            save_torch(self.edges.tensors(), folder / "edges.pt")
            metric = self.key_rule.metric
            write_figure(circuit_figure(self.edges, receiver_effects_of(self, self.edges.receivers, metric), metric,
                                        f"{self.task}: senders -> receivers -> logits"), folder / "circuit.html")

    @classmethod
    def _read(cls, folder: Path, config: IdentifyConfig) -> IdentifyResult:
        from circuits.identify.pooled import FILE as POOLED, read_pooled, read_sweep

        summary = read_json(folder / "summary.json")
        pairs = read_pairs(folder / "pairs.jsonl") if (folder / "pairs.jsonl").is_file() else []
        sweep, saved = None, {}
        if (folder / "sweep.pt").is_file():
            sweep = read_sweep(folder / "sweep.pt", len(pairs), summary, config.mode)
        elif (folder / POOLED).is_file():  # --task all's pooled result: read from its sibling folders
            pairs, sweep = read_pooled(folder, summary, config.mode)
        else:
            saved = {k: (torch.tensor(v["head_effects"]), torch.tensor(v["mlp_effects"]))
                     for k, v in summary.get("metrics", {}).items()} or {
                "relative_logit": (torch.tensor(summary["head_effects"]), torch.tensor(summary["mlp_effects"]))}
        stats = summary["pair_stats"] if "pair_stats" in summary else {k: summary[k] for k in PAIR_STAT_FIELDS if k in summary}
        edges = None
        if (folder / "edges.pt").is_file():
            from circuits.patching.engines.edge_sweep import EdgeSweep

            edges = EdgeSweep.from_tensors(load_torch(folder / "edges.pt", "edge sweep"), folder / "edges.pt")
        out = cls(config, pairs, sweep, stats, number(summary, "seconds", folder / "summary.json", 0.0), summary.get("per_task"), saved, edges,
                  summary.get("weights", ""))
        if "validity" in summary:  # older results: measured again from what was saved
            try:
                out._validity = Validity.from_json(summary["validity"])
            except (TypeError, ValueError) as err:
                raise ResultError(f"{folder / 'summary.json'}: field 'validity': {err}") from None
        return out



def load_identify(folder: str | Path) -> IdentifyResult:
    """The identify result in ``folder``; a folder of one result per task (``--task all``) gets an error
    that names the task folders."""
    folder = Path(folder)
    try:
        return IdentifyResult.load(folder)
    except (ResultError, FileNotFoundError):
        if (folder / MARKER).is_file():
            raise  # a result that cannot be read as an identify result: its own line says why
        below = results_below(folder)
        tasks = [name for name, kind in below.items() if kind == "identify"]
        if tasks:
            raise ResultError(f"{folder} holds one identify result per task ({', '.join(tasks)}); pass one of them, "
                              f"e.g. {folder / tasks[0]}") from None
        others = f" (the results below it are {', '.join(f'{n}: {k}' for n, k in below.items())})" if below else ""
        raise ResultError(f"{folder} holds no identify result{others}; pass the output folder of `circuits identify`"
                          ) from None


@dataclass(frozen=True)
class PerOperationConfig(KeyHeadSource):
    """What decides Figure 15: the identify runs (one per operation) and how many key heads each compares."""

    operations: tuple[str, ...] = option(OPERATIONS)
    top: int = count(10)


@dataclass(eq=False, repr=False)
class PerOperation(Result[PerOperationConfig]):
    """Figure 15: the key heads of each operation and how many each pair of operations shares."""

    kind = "per_operation"

    operations: list[str]
    head_effects: dict[str, list[list[float]]]  # operation -> [layer][head], by ``metric``
    key_heads: dict[str, list[Head]]
    metric: str = DEFAULT_METRIC
    pairs: dict[str, dict[str, Any]] = field(default_factory=dict)  # operation -> accuracy, n_pairs

    @property
    def overlap(self) -> list[list[int]]:
        sets = {op: set(map(tuple, self.key_heads[op])) for op in self.operations}
        return [[len(sets[a] & sets[b]) for b in self.operations] for a in self.operations]

    @classmethod
    def from_identify(cls, config: PerOperationConfig, results: dict[str, IdentifyResult], top: int) -> PerOperation:
        ops = list(results)
        metric = next(iter(results.values())).metric().name
        return cls(config, ops, {op: r.scores(metric).heads.tolist() for op, r in results.items()},
                   {op: r.top_heads(top) for op, r in results.items()}, metric,
                   {op: {"accuracy": r.pair_stats.get("accuracy"), "n_pairs": len(r.pairs)} for op, r in results.items()})

    def _write(self, folder: Path) -> None:
        write_json(folder / "data.json", {
            "operations": self.operations, "head_effects": self.head_effects, "metric": self.metric,
            "key_heads": {op: [list(h) for h in hs] for op, hs in self.key_heads.items()},
            "overlap": self.overlap, "pairs": self.pairs})

    @classmethod
    def _read(cls, folder: Path, config: PerOperationConfig) -> PerOperation:
        d = read_json(folder / "data.json")
        try:
            key = {op: [Head.parse(h) for h in hs] for op, hs in d["key_heads"].items()}
        except ValueError as err:
            raise ResultError(f"{folder / 'data.json'}: field 'key_heads': {err}") from None
        # a data.json without "metric" predates the field (experiments/fig15 before 1325d0e): the paper's relative_logit
        return cls(config, d["operations"], d["head_effects"], key,
                   d.get("metric", "relative_logit"), d.get("pairs", {}))
