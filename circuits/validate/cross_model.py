"""The paper's claims measured side by side on several models, as it sets LLaMA2-7B beside 13B and Mistral-7B
(Sections 5.1-5.2, Figures 2-6, Appendix D).

For each model :class:`CrossModelResult` holds, from the model's own identify results and the validate and explain
steps run on them (``experiments/cross_model.py`` computes them):

- ``operations``: per operation, accuracy before filtering, the key heads by the rule and their share of all heads
  (the paper: fewer than 5% of the heads matter), and the full counterfactual's relative answer-logit change;
- ``knockout``: accuracy after mean-ablating the first k heads of the addition ranking against k random heads
  (Figure 3; the paper: about -70% against about -2%);
- ``transfer``: accuracy on multi-digit sums, decimals and time spans before and after knocking out the addition
  key heads, and after knocking out as many random heads (Figure 4);
- ``roles``: where the top addition heads attend from END, by token role (Figure 5: operand and operator heads);
- ``logit_lens``: ``cos(MLP_out - MLP_in, W_U[C])`` minus the other numbers, per layer, and the layer from which
  the MLPs write the answer (Figure 6b; the paper: from layer 17 of 32).

Depths are compared as a share of the model's layers, since the models differ in depth.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from circuits.config import Config, count, option
from circuits.data.templates import OPERATIONS
from circuits.identify.config import IdentifyConfig
from circuits.io import read_json, write_json
from circuits.results import Result

# What the paper reports on LLaMA2-7B (32 layers x 32 heads), for the table beside ours.
PAPER = {
    "share_key_heads": "< 5% of 1024",
    "key_head_depth": "layers 11-15 of 32 (0.34-0.47)",
    "knockout": "about -70% (top heads) vs about -2% (random)",
    "transfer": "SVAMP 34.7 -> 11.8; other formats drop",
    "roles": "operand heads (13.11, 12.22) and operator heads",
    "writing_start": "layer 17 of 32 (0.53)",
}


def relative_depth(layer: float, n_layers: int) -> float:
    """A layer's position as a share of the model's depth (0: first layer, 1: last)."""
    return layer / max(1, n_layers - 1)


@dataclass(frozen=True)
class CrossModelConfig(Config):
    """What decides a comparison across models: the models, the operations, each model's identify runs (one nested
    identify config, its model and task set per run), and the knockout's sizes."""

    models: tuple[str, ...] = option(("smollm2", "gemma3-270m"),
                                     help="models to compare: embedded names, .gguf files or local Hugging Face folders")
    operations: tuple[str, ...] = option(OPERATIONS, help="operations whose key heads are counted")
    identify: IdentifyConfig = option(IdentifyConfig(), skip=("model", "task", "receivers"),
                                      help="each model's identify runs (its flags: --pairs, --seed, --key-rule, ...)")
    ks: tuple[int, ...] = count((0, 1, 2, 3, 5, 10), minimum=0, nonempty=True, unique=True, help="numbers of heads knocked out (Figure 3; 0: none, the baseline)")
    seeds: tuple[int, ...] = option((0, 1, 2), minimum=0, nonempty=True, unique=True, help="seeds of the random head orders")


@dataclass(eq=False, repr=False)
class CrossModelResult(Result[CrossModelConfig]):
    """The paper's claims on each model: ``models`` maps a model name to its measurements (see the module
    docstring for the keys)."""

    kind = "cross_model"
    paper = PAPER  # what the paper reports for each row (the report shows it beside each model)

    models: dict[str, dict[str, Any]]

    def names(self) -> list[str]:
        return list(self.models)

    def knockout_drop(self, model: str, k: int) -> tuple[float, float] | None:
        """Relative accuracy change with ``k`` heads knocked out: (effect-rank, mean of random-rank)."""
        ko = self.models[model]["knockout"]
        if k not in ko["ks"] or 0 not in ko["ks"]:
            return None
        i, i0 = ko["ks"].index(k), ko["ks"].index(0)
        base = ko["effect_accuracy"][i0]
        if not base:
            return None
        rnd = sum(r[i] for r in ko["random_accuracy"]) / len(ko["random_accuracy"])
        return ko["effect_accuracy"][i] / base - 1, rnd / base - 1

    def key_head_depth(self, model: str, operation: str = "addition") -> tuple[float, float] | None:
        """The relative depth of the shallowest and deepest key head of ``operation``."""
        d = self.models[model]
        heads = d["operations"].get(operation, {}).get("key_heads", [])
        if not heads:
            return None
        layers = [h[0] for h in heads]
        return relative_depth(min(layers), d["n_layers"]), relative_depth(max(layers), d["n_layers"])

    def writing_start(self, model: str) -> tuple[int, float] | None:
        """The layer from which the MLPs write the answer, and its relative depth."""
        d = self.models[model]
        layer = d["logit_lens"].get("writing_start")
        return None if layer is None else (layer, relative_depth(layer, d["n_layers"]))

    def figure(self):
        from circuits.validate.transfer import ACCURACIES, accuracy_intervals
        from circuits.viz.figures import cross_model_figure

        # each transfer bar's Wilson interval over its set's items (where the set's n was recorded)
        ci = {name: [accuracy_intervals(row).get(k) for row in d["transfer"].values() for k in ACCURACIES]
              for name, d in self.models.items()}
        return cross_model_figure(self.models, transfer_intervals=ci)

    def _write(self, folder: Path) -> None:
        write_json(folder / "data.json", {"models": self.models})

    @classmethod
    def _read(cls, folder: Path, config: CrossModelConfig) -> CrossModelResult:
        return cls(config, read_json(folder / "data.json")["models"])
