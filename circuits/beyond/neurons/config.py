"""What decides a neuron sweep (saved as its ``config.json``)."""

from __future__ import annotations

from dataclasses import dataclass

from circuits.config import count, option
from circuits.data.source import PairSource, check_metric
from circuits.identify.validity import force_option
from circuits.types import DEFAULT_METRIC, METRIC_NAMES, MODES, parse_layers


@dataclass(frozen=True)
class NeuronConfig(PairSource):
    """What decides a neuron sweep.

    Writes, atomically, into ``--out``: ``summary.json`` (per MLP the share of neurons that carries 50/80/90% of its
    neurons' summed effect, the whole MLP's effect, and knockout accuracies), ``neurons.pt`` (per-neuron per-pair
    patched values), ``pairs.jsonl``, ``figure.html``, ``config.json`` and ``circuits.json``. Before the sweep, the pairs' validity checks (docs/identify.md): past a
    hard threshold the job is refused without ``--force``; ``summary.json`` keeps ``validity``.
    """

    layers: tuple[int, ...] = option((), minimum=0, maximum=10_000, unique=True, parse=lambda t: parse_layers(t), help="MLP layers whose every neuron is "
                                     "patched; default: the key MLPs of --pairs-from (at most --top-mlps)")
    top_mlps: int = count(3, help="key MLPs taken from --pairs-from when --layers is not given")
    mode: str = option("path", choices=MODES, help="path patching (the paper's) or activation patching")
    metric: str = option(DEFAULT_METRIC, choices=METRIC_NAMES, help="what ranks the neurons")
    shares: tuple[float, ...] = option((0.005, 0.01, 0.02, 0.05, 0.1), nonempty=True, unique=True, help="shares of each key MLP's neurons knocked out")
    knockout_seed: int = option(0, minimum=0, help="seed of the random neurons")
    force: bool = force_option()

    def __post_init__(self) -> None:
        super().__post_init__()
        check_metric(self.metric)
        if any(not 0 < s <= 1 for s in self.shares):
            raise ValueError(f"shares must lie in (0, 1], got {self.shares}")
