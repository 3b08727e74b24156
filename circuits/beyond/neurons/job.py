"""Neurons at END as a job and a saved result: ``circuits neurons`` (the shape of Nikankin et al. 2025's finding).

For each chosen MLP (by default the key MLPs of an identify result) every neuron is patched at END exactly
(:func:`~circuits.patching.neurons.sweep_neurons`); the result says what share of each layer's neurons carries
most of its neurons' summed effect, and compares knocking out only the top neurons of the key MLPs (mean
ablation, per template position) with knocking out the whole MLPs and as many random neurons -- accuracy, as the
paper's Figure 3 compares key and random heads.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from transformer_lens import HookedTransformer

from circuits.config import option
from circuits.data.pairs import PromptPair
from circuits.patching.engine import sweep
from circuits.patching.metrics import METRIC_NAMES, get_metric
from circuits.patching.neurons import NeuronSweep, effect_shares, sweep_neurons, top_neurons
from circuits.data.source import PairSource
from circuits.io import read_json, read_jsonl, save_torch, write_json, write_jsonl
from circuits.results import Result, ResultError, read_config
from circuits.types import MODES, Component, parse_layers
from circuits.validate.knockout import knockout, replacement_values
from circuits.validate.neurons import knockout_neurons, neuron_means


@dataclass(frozen=True)
class NeuronConfig(PairSource):
    """What decides a neuron sweep."""

    layers: tuple[int, ...] = option((), parse=lambda t: parse_layers(t), help="MLP layers whose every neuron is "
                                     "patched; default: the key MLPs of --pairs-from (at most --top-mlps)")
    top_mlps: int = option(3, help="key MLPs taken from --pairs-from when --layers is not given")
    mode: str = option("path", choices=MODES, help="path patching (the paper's) or activation patching")
    metric: str = option("fraction", choices=METRIC_NAMES, help="what ranks the neurons")
    shares: tuple[float, ...] = option((0.005, 0.01, 0.02, 0.05, 0.1), help="shares of each key MLP's neurons knocked out")
    knockout_seed: int = option(0, help="seed of the random neurons")

    def __post_init__(self) -> None:
        super().__post_init__()
        get_metric(self.metric)
        if any(not 0 < s <= 1 for s in self.shares):
            raise ValueError(f"shares must lie in (0, 1], got {self.shares}")


@dataclass
class NeuronResult(Result):
    """Every neuron of some MLPs patched at END, their concentration, and the neuron knockout."""

    kind = "neurons"

    config: Any
    pairs: list[PromptPair]
    sweep: NeuronSweep
    metric: str
    mlp_effects: dict[int, float]  # the whole MLP's exact END effect
    knockout: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0

    def layer_effects(self) -> dict[int, torch.Tensor]:
        return self.sweep.by_layer(self.metric)

    def shares(self) -> dict[int, dict[str, float]]:
        sign = get_metric(self.metric).sign
        out = {}
        for l, e in self.layer_effects().items():
            d = effect_shares(e, sign)
            d["sum_of_neuron_effects"] = float(e.nansum())
            d["whole_mlp_effect"] = self.mlp_effects.get(l, float("nan"))
            out[l] = d
        return out

    def curves(self) -> dict[str, list[float]]:
        sign = get_metric(self.metric).sign
        out = {}
        for l, e in self.layer_effects().items():
            c = torch.nan_to_num(e * sign, nan=0.0).clamp_min(0).sort(descending=True).values
            out[f"MLP{l}"] = (c.cumsum(0) / c.sum().clamp_min(1e-12)).tolist()
        return out

    def summary(self) -> dict[str, Any]:
        return {"model": getattr(self.config, "model", ""), "task": getattr(self.config, "task", ""),
                "mode": self.sweep.mode, "metric": self.metric, "n_pairs": len(self.pairs),
                "layers": sorted(self.mlp_effects), "shares": {f"MLP{l}": v for l, v in self.shares().items()},
                "knockout": self.knockout, "seconds": self.seconds}

    def figure(self):
        from plotly.subplots import make_subplots

        from circuits.viz.analysis_figures import neuron_knockout_figure, neuron_share_figure

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
            for y, text, color in ((k["whole_accuracy"], "whole MLPs", "black"), (k["none_accuracy"], "none", "green")):
                fig.add_hline(y=y, line={"dash": "dash", "color": color}, annotation_text=text, row=1, col=2)
            fig.update_xaxes(type="log", title_text="% of each key MLP's neurons knocked out", row=1, col=2)
        fig.update_layout(title=f"Neurons of MLPs {', '.join(map(str, sorted(self.mlp_effects)))} at END "
                                f"({self.sweep.mode} patching, {self.metric}; Nikankin et al.)", height=480)
        return fig

    def _write(self, folder: Path) -> None:
        from circuits.viz.figures import write_figure

        write_json(folder / "summary.json", self.summary())
        write_jsonl(folder / "pairs.jsonl", [p.to_json() for p in self.pairs])
        save_torch(self.sweep.tensors(), folder / "neurons.pt")
        write_figure(self.figure(), folder / "figure.html")

    @classmethod
    def _read(cls, folder: Path) -> NeuronResult:
        s = read_json(folder / "summary.json")
        try:
            t = torch.load(folder / "neurons.pt", map_location="cpu", weights_only=True)
        except Exception as err:  # torch raises several types for truncated files
            raise ResultError(f"{folder / 'neurons.pt'} cannot be read ({type(err).__name__}: {err})") from None
        pairs = [PromptPair.from_json(r) for r in read_jsonl(folder / "pairs.jsonl")]
        mlps = {int(k[3:]): v["whole_mlp_effect"] for k, v in s.get("shares", {}).items()}
        return cls(NeuronConfig.from_json(read_config(folder)), pairs, NeuronSweep.from_tensors(t), s["metric"], mlps,
                   s.get("knockout", {}), float(s.get("seconds", 0.0)))


def neuron_knockout(model: HookedTransformer, pairs: list[PromptPair], effects: dict[int, torch.Tensor], sign: int,
                    shares: tuple[float, ...], seed: int = 0) -> dict[str, Any]:
    """Accuracy with the top ``share`` of each layer's neurons (by ``effects``) mean-ablated, with as many random
    neurons, with the whole MLPs, and with nothing."""
    layers = sorted(effects)
    means = neuron_means(model, pairs, layers)
    rng = random.Random(seed)
    d_mlp = model.cfg.d_mlp
    none = knockout(model, pairs, [], means=replacement_values(model, pairs))
    whole = knockout(model, pairs, [], layers, means=replacement_values(model, pairs))
    out: dict[str, Any] = {"layers": layers, "shares": list(shares), "none_accuracy": none.accuracy,
                           "whole_accuracy": whole.accuracy, "whole_answer_prob": whole.answer_prob,
                           "top_accuracy": [], "top_answer_prob": [], "random_accuracy": [], "n_neurons": []}
    for share in shares:
        top = {l: top_neurons(effects[l], sign, share) for l in layers}
        rnd = {l: rng.sample(range(d_mlp), len(top[l])) for l in layers}
        t = knockout_neurons(model, pairs, top, means)
        r = knockout_neurons(model, pairs, rnd, means)
        out["top_accuracy"].append(t.accuracy)
        out["top_answer_prob"].append(t.answer_prob)
        out["random_accuracy"].append(r.accuracy)
        out["n_neurons"].append(sum(len(v) for v in top.values()))
    return out


def run_neurons(config: NeuronConfig, out: str | Path, model: HookedTransformer | None = None,
                progress: bool = True) -> NeuronResult:
    """The ``circuits neurons`` job."""
    from circuits.identify.result import load_identify
    from circuits.models.loading import load_model

    layers = list(config.layers)
    if not layers:
        if not config.pairs_from:
            raise ValueError("Give --layers (e.g. 19,24) or --pairs-from an identify result whose key MLPs are taken")
        layers = load_identify(config.pairs_from).top_mlps(config.top_mlps)
    model = model or load_model(config.model, dtype=config.dtype)
    for l in layers:
        if not 0 <= l < model.cfg.n_layers:
            raise ValueError(f"MLP layer {l} is outside this model (layers 0..{model.cfg.n_layers - 1})")
    pairs, _ = config.load_pairs(model)
    start = time.perf_counter()
    m = get_metric(config.metric)
    ns = sweep_neurons(model, pairs, config.mode, layers=layers, memory_mb=config.memory_mb,  # type: ignore[arg-type]
                       prob=m.name == "prob", progress=progress)
    whole = sweep(model, pairs, config.mode, components=[Component.mlp(l) for l in layers],  # type: ignore[arg-type]
                  memory_mb=config.memory_mb, progress=False).effects(m)[1]
    result = NeuronResult(config, pairs, ns, m.name, {l: float(whole[l]) for l in layers})
    if config.shares:
        result.knockout = neuron_knockout(model, pairs, result.layer_effects(), m.sign, config.shares, config.knockout_seed)
    result.seconds = time.perf_counter() - start
    result.save(out)
    return result
