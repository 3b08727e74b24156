"""Sender -> receiver edges at END and the circuit graph (docs/beyond.md)."""

from circuits.beyond.edges.job import EdgeResult, resolve_receivers

__all__ = ["EdgeResult", "resolve_receivers"]
