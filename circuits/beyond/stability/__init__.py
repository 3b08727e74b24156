"""Key heads across seeds, templates and pair counts (docs/beyond.md)."""

from circuits.beyond.stability.job import StabilityConfig, StabilityResult, run_stability

__all__ = ["StabilityConfig", "StabilityResult", "run_stability"]
