"""The saved position sweep and its information-flow figure."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from circuits.models.backend import Model
from circuits.data.pairs import PromptPair, read_pairs, write_pairs
from circuits.patching.core.metrics import METRICS
from circuits.patching.engines.position_sweep import PositionSweep
from circuits.io import load_torch, read_json, save_torch, write_json
from circuits.results import Result, number
from circuits.beyond.positions.config import PositionConfig


@dataclass(eq=False, repr=False)
class PositionResult(Result):
    """A per-position sweep with the pairs and config that made it."""

    kind = "positions"
    config_type = PositionConfig

    config: PositionConfig
    pairs: list[PromptPair]
    sweep: PositionSweep
    seconds: float = 0.0
    tokens: list[str] | None = None  # the representative pair's tokens (figure labels)

    @property
    def metric(self) -> str:
        return getattr(self.config, "metric", None) or "logit_diff"

    def representative(self) -> PromptPair:
        """The pair whose tokens label the figure: one of the most common template and length."""
        key = Counter((p.template_id, len(p.reference_token_ids)) for p in self.pairs).most_common(1)[0][0]
        return next(p for p in self.pairs if (p.template_id, len(p.reference_token_ids)) == key)

    def validity(self):
        """The checks of :mod:`circuits.identify.validity` this sweep's unpatched runs give (no key components here, so
        no share of uncertain ones)."""
        from circuits.identify.validity import Validity, baseline_checks

        return Validity.measure(len(self.pairs), **baseline_checks(self.sweep.baseline))

    def summary(self) -> dict[str, Any]:
        metrics = {}
        for name in METRICS:
            h, m = self.sweep.effects(name)
            metrics[name] = {"head_effects": h.tolist(), "mlp_effects": m.tolist()}
        return {"model": getattr(self.config, "model", ""), "task": getattr(self.config, "task", ""),
                "n_pairs": len(self.pairs), "offsets": "counted back from END (0 is END)",
                "ends": self.sweep.ends.tolist(), "first_difference": self.sweep.first_diff.tolist(),
                "metrics": metrics, "seconds": self.seconds, "tokens": self.tokens,
                "validity": self.validity().to_json(), "warnings": self.validity().lines()}

    def figure(self, metric: str | None = None):
        from circuits.viz.analysis_figures import flow_figure
        from circuits.viz.figures import model_label

        metric = metric or self.metric
        heads, mlps = self.sweep.effects(metric)
        sign = METRICS[metric].sign
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
        return flow_figure(head_best[:, shown], mlps[:, shown], [tokens[x] for x in pos], roles,
                           f"{getattr(self.config, 'task', '')}: activation patching at each position on "
                           f"{model_label(getattr(self.config, 'model', ''))} ({len(self.pairs)} pairs), {metric}; positions "
                           f"aligned from END, labelled with one prompt", metric, best[:, shown].tolist(),
                           positions=pos)  # numbered by the prompt's positions, as the attention views are

    def _write(self, folder: Path) -> None:
        from circuits.viz.figures import write_figure

        write_json(folder / "summary.json", self.summary())
        write_pairs(folder / "pairs.jsonl", self.pairs)
        save_torch(self.sweep.tensors(), folder / "positions.pt")
        write_figure(self.figure(), folder / "flow.html")

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
