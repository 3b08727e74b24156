"""The saved position sweep and its information-flow figure."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from circuits.models.backend import Model
from circuits.data.pairs import PromptPair, read_pairs
from circuits.patching.core.metrics import METRICS
from circuits.patching.engines.position_sweep import PositionSweep
from circuits.io import load_torch, read_json
from circuits.results import Result, number, write_parts
from circuits.beyond.positions.align import Alignment, align, aligned_effects, check_alignable
from circuits.beyond.positions.config import PositionConfig


@dataclass(eq=False, repr=False)
class PositionResult(Result[PositionConfig]):
    """A per-position sweep with the pairs and config that made it."""

    kind = "positions"

    pairs: list[PromptPair]
    sweep: PositionSweep
    seconds: float = 0.0
    tokens: list[str] | None = None  # the representative pair's tokens (figure labels)

    @property
    def metric(self) -> str:
        return self.config.metric

    def representative(self) -> PromptPair:
        """The pair whose tokens label the figure: one of the most common template and length."""
        key = Counter((p.template_id, len(p.reference_token_ids)) for p in self.pairs).most_common(1)[0][0]
        return next(p for p in self.pairs if (p.template_id, len(p.reference_token_ids)) == key)

    def validity(self):
        """The checks of :mod:`circuits.identify.validity` this sweep's unpatched runs give (no key components here, so
        no share of uncertain ones)."""
        from circuits.identify.validity import Validity, baseline_checks, forced

        return Validity.measure(len(self.pairs), forced=forced(getattr(self.config, "force", False)),
                                **baseline_checks(self.sweep.baseline))

    def alignment(self) -> Alignment | None:
        """The view's columns by token role (:func:`~circuits.beyond.positions.align.align`), or None when some pair
        marks no role (a result saved before pairs had roles, or made by hand: the figure then aligns from END)."""
        try:
            check_alignable(self.pairs)
        except ValueError:
            return None
        return align(self.pairs) if self.pairs else None

    def summary(self) -> dict[str, Any]:
        metrics = {}
        for name in METRICS:
            s = self.sweep.scores(name)
            metrics[name] = {"head_effects": s.heads.tolist(), "mlp_effects": s.mlps.tolist()}
        out = {"model": getattr(self.config, "model", ""), "task": getattr(self.config, "task", ""),
               "n_pairs": len(self.pairs), "offsets": "counted back from END (0 is END)",
               "ends": self.sweep.ends.tolist(), "first_difference": self.sweep.first_diff.tolist(),
               "metrics": metrics, "seconds": self.seconds, "tokens": self.tokens,
               "validity": self.validity().to_json(), "warnings": self.validity().lines()}
        al = self.alignment()
        if al is not None:  # the columns by token role, each pair's offset in each, and the effects per column
            out["aligned"] = al.to_json()
            out["aligned"]["metrics"] = {}
            for name in METRICS:
                h, m = aligned_effects(self.sweep, al, self.sweep.metric(name))
                out["aligned"]["metrics"][name] = {"head_effects": h.tolist(), "mlp_effects": m.tolist()}
        return out

    def figure(self, metric: str | None = None):
        from circuits.viz.analysis_figures import flow_figure
        from circuits.viz.figures import model_label

        metric = metric or self.metric
        sign = METRICS[metric].sign
        al = self.alignment()
        what = (f"{getattr(self.config, 'task', '')}: activation patching at each position on "
                f"{model_label(getattr(self.config, 'model', ''))} ({len(self.pairs)} pairs), {metric}; ")
        if al is not None and al.by_role:
            heads, mlps = aligned_effects(self.sweep, al, self.sweep.metric(metric))
            best = (heads * sign).nan_to_num(-float("inf")).argmax(1)  # [layer, column]
            head_best = heads.gather(1, best[:, None]).squeeze(1)
            n = len(self.pairs)
            templates = len({p.template_id for p in self.pairs})
            notes = [f"{k} of {n} pairs" for k in al.n_pairs()]
            return flow_figure(head_best, mlps, al.labels, al.role_columns(),
                               what + f"columns aligned by token role across {templates} templates (each pair read at "
                               "its own offset; positions between roles counted from the nearest one)", metric,
                               best.tolist(), x_labels=al.labels, notes=notes)
        s = self.sweep.scores(metric)
        heads, mlps = s.heads, s.mlps
        p = self.representative()
        end = p.end
        lo = max(0, min(int(f) for f in self.sweep.first_diff) - 4) if len(self.pairs) else 0
        shown = [k for k in range(min(end, heads.shape[-1] - 1), -1, -1) if end - k >= min(lo, end)]
        best = (heads * sign).nan_to_num(-float("inf")).argmax(1)  # [layer, offset]
        head_best = heads.gather(1, best[:, None]).squeeze(1)
        tokens = self.tokens if self.tokens and len(self.tokens) == len(p.reference_token_ids) else [
            str(t) for t in p.reference_token_ids]
        pos = [end - k for k in shown]
        roles = {r: [pos.index(x) for x in v if x in pos] for r, v in p.roles.items()}
        how = ("every pair has the same token layout, so positions align from END token for token (labelled with "
               "one prompt)" if al is not None else
               "no roles given: positions aligned from END only, labelled with one prompt")
        return flow_figure(head_best[:, shown], mlps[:, shown], [tokens[x] for x in pos], roles, what + how, metric,
                           best[:, shown].tolist(), positions=pos)  # numbered by the prompt's positions, as the attention views are

    def _write(self, folder: Path) -> None:
        from circuits.viz.figures import write_figure

        write_parts(folder, self.summary_json(), self.pairs, {"positions.pt": self.sweep.tensors()})
        write_figure(self.figure(), folder / "flow.html", validity=self.validity())

    @classmethod
    def _read(cls, folder: Path, config: PositionConfig) -> PositionResult:
        t = load_torch(folder / "positions.pt", "position sweep")
        s = read_json(folder / "summary.json")
        pairs = read_pairs(folder / "pairs.jsonl")
        return cls(config, pairs, PositionSweep.from_tensors(t, folder / "positions.pt"), number(s, "seconds", folder / "summary.json", 0.0),
                   s.get("tokens"))


def token_strings(model: Model, pair: PromptPair) -> list[str]:
    """The reference prompt's tokens as text (for figure labels)."""
    return [model.tokenizer.decode([t]) for t in pair.reference_token_ids] if model.tokenizer is not None else []
