"""The engines, one module each, with the plain one-forward-per-component loop each is tested against beside it,
and :data:`~circuits.patching.engines.registry.ENGINES`, the table of them (:mod:`~circuits.patching.engines.registry`).

- :mod:`~circuits.patching.engines.end_sweep`: :func:`sweep`, every head and MLP at END (path and activation
  patching); its plain loop :mod:`~circuits.patching.engines.end_sweep_plain`, its file
  :mod:`~circuits.patching.engines.end_sweep_files`.
- :mod:`~circuits.patching.engines.position_sweep`, :mod:`~circuits.patching.engines.neuron_sweep`,
  :mod:`~circuits.patching.engines.edge_sweep`: exact patching at every position, of MLP neurons at END, and of
  sender -> receiver edges at END.
- :mod:`~circuits.patching.engines.attribution`: attribution patching (AtP*, GradDrop), a gradient screen.
- :mod:`~circuits.patching.engines.eap_ig`: EAP-IG (inputs variant; node and edge level).
- :mod:`~circuits.patching.engines.plain`: the plain loops of the engines other than the END sweep, and of the
  circuit curves' ablations.
"""
