"""Faithfulness of the circuits each ranking yields, as MIB scores circuit discovery (issue 24; docs/beyond.md).

``run(config, out)`` is the job's one entry point; :func:`~circuits.beyond.faithfulness.job.faithfulness` the same on
a loaded model and pairs (``cc.faithfulness``). Names are imported on first use, so the config is importable without
torch."""

from __future__ import annotations

from typing import TYPE_CHECKING

from circuits.lazy import lazy_package

if TYPE_CHECKING:  # the package's names (editors read them; circuits.lazy.lazy_package makes the lazy table of them)
    from circuits.beyond.faithfulness.config import FaithfulnessConfig, RANKINGS
    from circuits.beyond.faithfulness.job import faithfulness, rank, run
    from circuits.beyond.faithfulness.result import FaithfulnessResult

__getattr__, __dir__, __all__ = lazy_package(__name__, __file__)
