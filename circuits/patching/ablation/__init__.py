"""Ablation in the mechanism: what an ablated component becomes (:mod:`~circuits.patching.ablation.values`:
:class:`~circuits.patching.ablation.values.AblationValues`, the template mean, END-aligned mean, zero, resample and
counterfactual values of heads, MLPs and neurons) and the one executor that runs a masked forward over batched sets
of ablated components with prefix sharing (:mod:`~circuits.patching.ablation.executor`). Knockout
(:mod:`circuits.validate.knockout`) and faithfulness (:mod:`circuits.patching.faithfulness`) both call it."""
