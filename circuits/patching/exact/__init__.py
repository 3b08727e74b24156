"""The exact engines beyond the END sweep (each equal to a plain one-forward-per-sender loop in
:mod:`circuits.patching.plain`): every position (:mod:`~circuits.patching.exact.positions`), single MLP neurons at END
(:mod:`~circuits.patching.exact.neurons`) and sender -> receiver edges at END (:mod:`~circuits.patching.exact.edges`)."""
