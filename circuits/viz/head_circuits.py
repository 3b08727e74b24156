"""The OV-circuit figure of key heads: one heatmap per head, operand tokens (rows) onto answer tokens (columns)."""

from __future__ import annotations

from collections.abc import Sequence

import plotly.graph_objects as go
from jaxtyping import Float
from plotly.subplots import make_subplots
from torch import Tensor

from circuits.viz.colours import SIGNED


def ov_figure(ov: Float[Tensor, "head source target"], heads: Sequence[str], sources: Sequence[str],
              targets: Sequence[str], title: str, colorbar: str = "direct logit") -> go.Figure:
    """Heatmaps of ``ov[head, source, target]`` side by side, one diverging scale centred at 0 shared by all heads
    (teal: the head raises the target's logit when it attends to the source, brown: lowers it; a logit, not importance,
    so not the red of the importance figures); hover gives head, source, target and value."""
    n = len(heads)
    if ov.ndim != 3 or ov.shape != (n, len(sources), len(targets)):
        raise ValueError(f"ov must be [head, source, target] = [{n}, {len(sources)}, {len(targets)}], got {tuple(ov.shape)}")
    cols = min(n, 4)
    rows = (n + cols - 1) // cols
    fig = make_subplots(rows=rows, cols=cols, subplot_titles=[f"head {h}" for h in heads], horizontal_spacing=0.06,
                        vertical_spacing=0.12)
    m = float(ov.abs().max()) or 1.0
    show = lambda s: repr(s)[1:-1] if s.strip() != s else s  # noqa: E731  a leading space stays visible
    x, y = [show(t) for t in targets], [show(s) for s in sources]
    for i, h in enumerate(heads):
        fig.add_trace(go.Heatmap(
            z=ov[i].tolist(), x=x, y=y, colorscale=SIGNED, zmid=0, zmin=-m, zmax=m,
            showscale=i == 0, colorbar={"title": {"text": colorbar, "side": "right"}, "len": 0.8},
            hovertemplate=f"head {h}<br>source %{{y}} -> target %{{x}}<br>%{{z:+.3f}}<extra></extra>"),
            i // cols + 1, i % cols + 1)
    fig.update_xaxes(title_text="answer token", type="category", tickangle=0)
    fig.update_yaxes(type="category", autorange="reversed")
    for r in range(rows):  # the row title once per row of panels
        fig.update_yaxes(title_text="operand token", row=r + 1, col=1)
    # Panels about as tall as they are wide at 1000-1600 px (160-290 px wide for four columns).
    fig.update_layout(title={"text": title, "x": 0, "xanchor": "left"}, height=170 + 250 * rows,
                      margin={"t": 90, "l": 70, "r": 40, "b": 60})
    return fig
