"""Heuristic neurons of the key MLPs over the operand grid, classified and knocked out (docs/beyond.md).

``run(config, out)`` is the job's one entry point; names are imported on first use, so the config is importable
without torch."""

from __future__ import annotations

from typing import TYPE_CHECKING

from circuits.lazy import lazy_package

if TYPE_CHECKING:  # the package's names (editors read them; circuits.lazy.lazy_package makes the lazy table of them)
    from circuits.beyond.heuristics.config import HeuristicsConfig
    from circuits.beyond.heuristics.job import run
    from circuits.beyond.heuristics.result import HeuristicsResult

__getattr__, __dir__, __all__ = lazy_package(__name__, __file__)
