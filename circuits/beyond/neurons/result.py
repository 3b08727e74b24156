"""The saved neuron sweep, its shares and its knockout."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from circuits.data.pairs import PromptPair, read_pairs
from circuits.identify.validity import CheckedPairs, validity_from_summary, validity_json
from circuits.patching.core.metrics import get_metric
from circuits.patching.engines.neuron_sweep import NeuronSweep, effect_shares
from circuits.patching.core.ranking import contributions
from circuits.io import load_torch, read_json
from circuits.results import Result, number, write_parts
from circuits.beyond.neurons.config import NeuronConfig


@dataclass(eq=False, repr=False)
class NeuronResult(CheckedPairs, Result[NeuronConfig]):
    """Every neuron of some MLPs patched at END, their concentration, and the neuron knockout."""

    kind = "neurons"

    pairs: list[PromptPair]
    sweep: NeuronSweep
    metric: str
    mlp_effects: dict[int, float]  # the whole MLP's exact END effect
    knockout: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0

    def shares(self) -> dict[int, dict[str, float]]:
        sign = get_metric(self.metric).sign
        out = {}
        for l, e in self.sweep.scores(self.metric).by_layer().items():
            d = effect_shares(e, sign)
            d["sum_of_neuron_effects"] = float(e.nansum())
            d["whole_mlp_effect"] = self.mlp_effects.get(l, float("nan"))
            out[l] = d
        return out

    def curves(self) -> dict[str, list[float]]:
        sign = get_metric(self.metric).sign
        out = {}
        for l, e in self.sweep.scores(self.metric).by_layer().items():
            c = contributions(e, sign)
            out[f"MLP{l}"] = (c.cumsum(0) / c.sum().clamp_min(1e-12)).tolist()
        return out

    def summary(self) -> dict[str, Any]:
        return {"model": getattr(self.config, "model", ""), "task": getattr(self.config, "task", ""),
                "mode": self.sweep.mode, "metric": self.metric, "n_pairs": len(self.pairs),
                "layers": sorted(self.mlp_effects), "shares": {f"MLP{l}": v for l, v in self.shares().items()},
                "knockout": self.knockout, "seconds": self.seconds, **validity_json(self._validity)}

    def figure(self):
        from plotly.subplots import make_subplots

        from circuits.viz.analysis_figures import neuron_knockout_figure, neuron_share_figure
        from circuits.viz.colours import BEFORE

        a = neuron_share_figure(self.curves(), "")
        fig = make_subplots(rows=1, cols=2, subplot_titles=("cumulative share of each MLP's neuron effect",
                                                            "accuracy after knocking out neurons of the key MLPs"))
        for tr in a.data:
            fig.add_trace(tr, 1, 1)
        fig.update_xaxes(type="log", title_text="share of neurons (largest effects first)", row=1, col=1)
        k = self.knockout
        if k:
            b = neuron_knockout_figure(k["shares"], k["top_accuracy"], k["random_accuracy"], k["whole_accuracy"],
                                       k["none_accuracy"], "")
            for tr in b.data:
                fig.add_trace(tr, 1, 2)
            # Labels at opposite ends of their lines: they stay apart when the two accuracies are close.
            for y, text, color, at in ((k["whole_accuracy"], "whole MLPs", "black", "bottom left"),
                                       (k["none_accuracy"], "none", BEFORE, "top right")):
                fig.add_hline(y=y, line={"dash": "dash", "color": color}, annotation_text=text, annotation_position=at,
                              row=1, col=2)
            fig.update_xaxes(type="log", title_text="% of each key MLP's neurons knocked out", row=1, col=2)
        fig.update_layout(title=f"Neurons of MLPs {', '.join(map(str, sorted(self.mlp_effects)))} at END "
                                f"({self.sweep.mode} patching, {self.metric}; Nikankin et al.)", height=480)
        return fig

    def _write(self, folder: Path) -> None:
        from circuits.viz.figures import write_figure

        write_parts(folder, self.summary_json(), self.pairs, {"neurons.pt": self.sweep.tensors()})
        write_figure(self.figure(), folder / "figure.html", validity=self.validity())

    @classmethod
    def _read(cls, folder: Path, config: NeuronConfig) -> NeuronResult:
        s = read_json(folder / "summary.json")
        t = load_torch(folder / "neurons.pt", "neuron sweep")
        pairs = read_pairs(folder / "pairs.jsonl")
        mlps = {int(k[3:]): v["whole_mlp_effect"] for k, v in s.get("shares", {}).items()}
        return cls(config, pairs, NeuronSweep.from_tensors(t, folder / "neurons.pt"), s["metric"], mlps, s.get("knockout", {}),
                   number(s, "seconds", folder / "summary.json", 0.0), _validity=validity_from_summary(s, folder / "summary.json"))
