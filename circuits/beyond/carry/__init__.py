"""The carry study (issue 42): is the first answer token of a two-digit sum (the carry, "1") computed by other
components than the units digit at the next position? (docs/beyond.md, docs/results.md)

``run(config, out)`` is the job's one entry point; names are imported on first use, so the config is importable
without torch."""

from __future__ import annotations

from typing import TYPE_CHECKING

from circuits.lazy import lazy_package

if TYPE_CHECKING:  # the package's names (editors read them; circuits.lazy.lazy_package makes the lazy table of them)
    from circuits.beyond.carry.config import CarryConfig
    from circuits.beyond.carry.job import run
    from circuits.beyond.carry.result import CarryResult

__getattr__, __dir__, __all__ = lazy_package(__name__, __file__)
