"""The mechanism, cut by what it is. The jobs (:mod:`circuits.identify`, :mod:`circuits.beyond`) use these; nothing
here imports a job.

- :mod:`~circuits.patching.core`: what every engine returns and reads (scores, metrics, the one ranking, readouts,
  bootstrap intervals, the END-only forward pieces).
- :mod:`~circuits.patching.engines`: the engines, one module each with its plain reference loop beside it, and
  :data:`~circuits.patching.engines.registry.ENGINES`.
- :mod:`~circuits.patching.ablation`: what an ablated component becomes and the one ablation executor.
- :mod:`~circuits.patching.circuit_curves`: faithfulness of the circuits a ranking yields (MIB's f, CPR and CMD).
- :mod:`~circuits.patching.interchange`: MIB's graph JSON and TransformerLens-style ``patch``.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from circuits.lazy import lazy_package

if TYPE_CHECKING:  # the package's names, imported on first use (circuits.lazy.lazy_package), so that a torch-free
    # module of the mechanism (the engine registry, the metric names) imports without the engines
    from circuits.patching.engines.attribution import Attribution, attribute
    from circuits.patching.engines.eap_ig import EAPIGScores, eap_ig
    from circuits.patching.engines.edge_sweep import EdgeSweep, sweep_edges
    from circuits.patching.engines.end_sweep import PreparedRuns, SweepResult, all_components, prepare, sweep
    from circuits.patching.core.metrics import DEFAULT_METRIC, METRICS, Baseline, Metric, get_metric, logits_metric
    from circuits.patching.engines.neuron_sweep import NeuronSweep, sweep_neurons
    from circuits.patching.engines.position_sweep import PositionSweep, sweep_positions
    from circuits.patching.core.ranking import DEFAULT_KEY_RULE, KeyRule, order, rank, rank_mlps
    from circuits.patching.core.readouts import Readouts
    from circuits.patching.core.scores import Scores

__getattr__, __dir__, __all__ = lazy_package(__name__, __file__)
