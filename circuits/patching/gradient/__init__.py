"""The gradient engines: attribution patching with AtP*'s corrections and GradDrop
(:mod:`~circuits.patching.gradient.attribution`), and EAP-IG, node and edge level
(:mod:`~circuits.patching.gradient.eap_ig`). Each estimates what the exact engines measure, from one or a few
forward and backward passes, and is checked against a plain loop in :mod:`circuits.patching.plain`."""
