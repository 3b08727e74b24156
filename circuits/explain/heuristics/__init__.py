"""How the key MLPs compute: heuristic neurons (Nikankin et al., ICLR 2025, "Arithmetic Without Algorithms").

- :mod:`~circuits.explain.heuristics.rules`: the heuristic classes (range, modulo, pattern, identity of the answer)
  fitted to a neuron's activation over the operand grid, with a rule and a score, or ``none``.
- :mod:`~circuits.explain.heuristics.activations`: the neurons' ``hook_post`` over the grid, and which answers their
  output promotes.
- :mod:`~circuits.explain.heuristics.causal_check`: the causal check, a class's neurons knocked out against covered and
  uncovered prompts and random neurons.

The job is ``circuits heuristics`` (:mod:`circuits.beyond.heuristics`).
"""
