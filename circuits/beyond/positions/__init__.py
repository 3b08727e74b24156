"""Exact patching at every token position: the information flow into END (docs/beyond.md)."""

from circuits.beyond.positions.config import PositionConfig
from circuits.beyond.positions.result import PositionResult
from circuits.beyond.positions.job import run_positions

__all__ = ["PositionConfig", "PositionResult", "run_positions"]
