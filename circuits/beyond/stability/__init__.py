"""Key heads across seeds, templates and pair counts (docs/beyond.md)."""

from circuits.beyond.stability.config import StabilityConfig
from circuits.beyond.stability.result import StabilityResult
from circuits.beyond.stability.job import run_stability

__all__ = ["StabilityConfig", "StabilityResult", "run_stability"]
