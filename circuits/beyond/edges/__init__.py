"""Sender -> receiver edges at END and the circuit graph (docs/beyond.md)."""

from circuits.beyond.edges.result import EdgeResult
from circuits.beyond.edges.job import resolve_receivers

__all__ = ["EdgeResult", "resolve_receivers"]
