"""Ablation in the mechanism, one spec and one executor: what an ablated component becomes
(:mod:`~circuits.patching.ablation.values`: :class:`~circuits.patching.ablation.values.AblationValues`, the template
mean, END-aligned mean, zero, resample and counterfactual values of heads, MLPs and neurons), which sites each set
ablates and where (:class:`~circuits.patching.ablation.executor.AblationSpec`), and the one executor that runs it
(:func:`~circuits.patching.ablation.executor.run_ablation`: END-only layers (:mod:`~circuits.patching.ablation.end`),
the counterfactual run in the sets' own passes, or a masked forward over batched sets with prefix sharing). Knockout
(:mod:`circuits.validate.knockout`, :mod:`circuits.validate.neuron_knockout`), the heuristics' class knockout and faithfulness
(:mod:`circuits.patching.circuit_curves`) all call it."""
