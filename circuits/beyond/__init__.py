"""The analyses beyond the paper's heads at END (docs/beyond.md), each a job over :mod:`circuits.patching`:

- :mod:`~circuits.beyond.screen`: the audited attribution screen (AtP*, GradDrop) checked against exact patching.
- :mod:`~circuits.beyond.positions`: exact patching at every token position (the information flow).
- :mod:`~circuits.beyond.neurons`: the key MLPs' neurons at END, and their knockout.
- :mod:`~circuits.beyond.edges`: sender -> receiver edges at END (the circuit graph).
- :mod:`~circuits.beyond.stability`: key heads across seeds, templates and pair counts.
"""
