"""Figures and the report: plotting functions that take tensors and return figures, and one offline HTML page
drawn from saved results.

- :mod:`~circuits.viz.figures`: every figure of the method (Figures 2-7, 15).
- :mod:`~circuits.viz.report`, :mod:`~circuits.viz.sections`, :mod:`~circuits.viz.page`: ``circuits report``.
"""

from circuits.viz.figures import head_heatmap, write_figure
from circuits.viz.report import build_report, write_report

__all__ = ["build_report", "head_heatmap", "write_figure", "write_report"]
