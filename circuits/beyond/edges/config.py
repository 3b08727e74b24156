"""What decides an edge result (saved as its ``config.json``)."""

from __future__ import annotations

from dataclasses import dataclass

from circuits.config import option
from circuits.identify.config import KeyHeadSource


@dataclass(frozen=True)
class EdgesConfig(KeyHeadSource):
    """The identify run whose pairs and ranking the edges are measured on, and the receivers (``topK``: the K most
    important components, or e.g. ``20.8,MLP19``)."""

    receivers: str = option("top5")
