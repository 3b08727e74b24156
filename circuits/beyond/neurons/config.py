"""What decides a neuron sweep (saved as its ``config.json``)."""

from __future__ import annotations

from dataclasses import dataclass

from circuits.config import option
from circuits.data.source import PairSource, check_metric
from circuits.types import DEFAULT_METRIC, METRIC_NAMES, MODES, parse_layers


@dataclass(frozen=True)
class NeuronConfig(PairSource):
    """What decides a neuron sweep."""

    layers: tuple[int, ...] = option((), parse=lambda t: parse_layers(t), help="MLP layers whose every neuron is "
                                     "patched; default: the key MLPs of --pairs-from (at most --top-mlps)")
    top_mlps: int = option(3, help="key MLPs taken from --pairs-from when --layers is not given")
    mode: str = option("path", choices=MODES, help="path patching (the paper's) or activation patching")
    metric: str = option(DEFAULT_METRIC, choices=METRIC_NAMES, help="what ranks the neurons")
    shares: tuple[float, ...] = option((0.005, 0.01, 0.02, 0.05, 0.1), help="shares of each key MLP's neurons knocked out")
    knockout_seed: int = option(0, help="seed of the random neurons")

    def __post_init__(self) -> None:
        super().__post_init__()
        check_metric(self.metric)
        if any(not 0 < s <= 1 for s in self.shares):
            raise ValueError(f"shares must lie in (0, 1], got {self.shares}")
