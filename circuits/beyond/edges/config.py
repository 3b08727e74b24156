"""What decides an edge result (saved as its ``config.json``): the identify run that measured the edges, whose
``receivers`` field (``topK``: the K most important components, or e.g. ``20.8,MLP19``) names what they go into."""

from __future__ import annotations

from circuits.identify.config import IdentifyConfig

EdgesConfig = IdentifyConfig  # edges are measured by `circuits identify --receivers`: its config is theirs
