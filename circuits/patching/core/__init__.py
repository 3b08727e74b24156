"""The shared core of the mechanism: what every engine and circuit curve reads or returns. Nothing here imports an
engine.

- :mod:`~circuits.patching.core.scores`: :class:`~circuits.patching.core.scores.Scores`, importance over heads, MLPs,
  neurons, positions or edges, larger is more important.
- :mod:`~circuits.patching.core.metrics`: the baseline and the metrics (relative logit, fraction, ...; callables).
- :mod:`~circuits.patching.core.ranking`: key rules (``fraction>=0.05``, ``top10``) and :func:`order`, the one ranking.
- :mod:`~circuits.patching.core.readouts`: the patched END readouts every engine returns, and the senders.
- :mod:`~circuits.patching.core.uncertainty`: bootstrap intervals over pairs.
- :mod:`~circuits.patching.core.end_layers`: the END-only pieces of a forward pass that the engines and the circuit
  curves run.
"""
