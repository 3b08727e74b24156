"""How the key components compute the answer's number (issue 32): the Fourier view of their direct effect on the
number tokens, and which neurons of the key MLPs move the units and which the tens digit of a two-digit sum
(``circuits numbers``).

``run(config, out)`` is the job's one entry point; names are imported on first use, so the config is importable
without torch."""

from __future__ import annotations

from typing import TYPE_CHECKING

from circuits.lazy import lazy_package

if TYPE_CHECKING:  # the package's names (editors read them; circuits.lazy.lazy_package makes the lazy table of them)
    from circuits.explain.numbers.config import NumbersConfig
    from circuits.explain.numbers.job import numbers, run
    from circuits.explain.numbers.result import NumbersResult

__getattr__, __dir__, __all__ = lazy_package(__name__, __file__)
