"""The mechanism: patching engines, the one readout type they return, the metrics, the one ranking, and the plain
reference loops the engines are tested against. The jobs (:mod:`circuits.identify`, :mod:`circuits.beyond`) use
these; nothing here imports a job.

- :mod:`~circuits.patching.engine`: :func:`sweep`, the END-only batched engine (path and activation patching).
- :mod:`~circuits.patching.end_layers`: the END-only pieces of a forward pass that the engines run.
- :mod:`~circuits.patching.exact.positions`, :mod:`~circuits.patching.exact.neurons`, :mod:`~circuits.patching.exact.edges`:
  exact patching at every position, of MLP neurons at END, and of sender -> receiver edges at END.
- :mod:`~circuits.patching.gradient.attribution`: attribution patching (AtP*, GradDrop), a gradient screen.
- :mod:`~circuits.patching.gradient.eap_ig`: EAP-IG (inputs variant; node and edge level), MIB's attribution baseline.
- :mod:`~circuits.patching.readouts`: the readouts every engine returns (:class:`Readouts`, :class:`MetricViews`).
- :mod:`~circuits.patching.metrics`: the baseline and the metrics (relative logit, fraction, ...; callables), and
  :data:`DEFAULT_METRIC` (``fraction``), the default of every ``effects()`` / ``ranked()``.
- :mod:`~circuits.patching.ranking`: key rules (``fraction>=0.05``, ``top10``) and :func:`order`, the one ranking
  (:func:`rank` for heads, :func:`rank_mlps`).
- :mod:`~circuits.patching.scores`: :class:`Scores`, what every registered engine returns (EAP-IG's result is one;
  the readout results give one by a metric, ``result.scores(metric)``): importance over heads, MLPs, neurons,
  positions or edges with ``value()``, ``ranked()``, ``top()``, ``key(rule)``, ``to_mib()``; larger is more important.
- :mod:`~circuits.patching.registry`: :data:`ENGINES`, every engine by name as data (its scoring function, in its own
  module, and its plain reference, as ``"module:function"``), capabilities and colour; :func:`register` adds one.
- :mod:`~circuits.patching.uncertainty`: bootstrap intervals over pairs.
- :mod:`~circuits.patching.reference`, :mod:`~circuits.patching.plain`: the plain one-forward-per-component loops.
- :mod:`~circuits.patching.ablation.values`, :mod:`~circuits.patching.ablation.executor`: what an ablated component becomes
  (:class:`AblationValues`: template mean, END-aligned mean, zero, resample, counterfactual) and the one ablation
  executor (a masked forward over batched sets, prefix sharing) that knockout and faithfulness call.
- :mod:`~circuits.patching.faithfulness`: MIB's faithfulness of node and edge circuits.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from circuits.lazy import lazy_package

if TYPE_CHECKING:  # the package's names, imported on first use (circuits.lazy.lazy_package), so that a torch-free
    # module of the mechanism (the engine registry, the metric names) imports without the engines
    from circuits.patching.gradient.attribution import Attribution, attribute
    from circuits.patching.gradient.eap_ig import EAPIGScores, eap_ig
    from circuits.patching.exact.edges import EdgeSweep, sweep_edges
    from circuits.patching.engine import PreparedRuns, SweepResult, all_components, prepare, sweep
    from circuits.patching.metrics import DEFAULT_METRIC, METRICS, Baseline, Metric, get_metric, logits_metric
    from circuits.patching.exact.neurons import NeuronSweep, sweep_neurons
    from circuits.patching.exact.positions import PositionSweep, sweep_positions
    from circuits.patching.ranking import DEFAULT_KEY_RULE, KeyRule, order, rank, rank_mlps
    from circuits.patching.readouts import MetricViews, Readouts
    from circuits.patching.scores import Scores

__getattr__, __dir__, __all__ = lazy_package(__name__, __file__)
