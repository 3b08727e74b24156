"""What decides an edge result (saved as its ``config.json``): the identify run whose pairs and receiver effects it
uses (every field of :class:`~circuits.identify.config.IdentifyConfig`; ``circuits edges --heads-from`` reads them
from the saved result), and ``receivers`` (``topK``: the K most important components, or e.g. ``20.8,MLP19``), what
the edges go into. ``circuits identify --receivers`` measures the same edges inside the identify run. Imports no
torch."""

from __future__ import annotations

from dataclasses import dataclass

from circuits.config import redefault
from circuits.identify.config import FromIdentify, IdentifyConfig


@dataclass(frozen=True)
class EdgesConfig(FromIdentify):
    """The identify run (``heads_from``: its saved result) and the receivers the edges go into."""

    receivers: str = redefault(IdentifyConfig, "receivers", "top5")
