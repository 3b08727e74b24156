"""Exact patching at every token position: the information flow into END (docs/beyond.md)."""

from circuits.beyond.positions.job import PositionConfig, PositionResult, run_positions

__all__ = ["PositionConfig", "PositionResult", "run_positions"]
