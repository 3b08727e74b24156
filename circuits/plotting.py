"""Figures for the identify step: plotting functions take tensors and labels and return figures.

Nothing global is changed at import; HTML is written with plotly.js embedded so it opens offline.
"""

from __future__ import annotations

from pathlib import Path

import plotly.graph_objects as go
from jaxtyping import Float
from plotly.subplots import make_subplots
from torch import Tensor

DIVERGING = "RdBu"


def head_heatmap(
    head_effects: Float[Tensor, "layer head"],
    mlp_effects: Float[Tensor, " layer"] | None = None,
    *,
    title: str = "Effect of patching each head and MLP at END",
    metric_label: str = "relative change of the answer logit",
    percent: bool = True,
    key_heads: list[tuple[int, int]] | None = None,
) -> go.Figure:
    """Layer-by-head heatmap with an MLP column (the paper's Figure 2), diverging scale centred at 0.

    Red is a negative effect (the answer drops), blue a positive one. The MLP column has its own
    colour scale (MLP effects are several times larger than head effects, and a shared scale would
    wash the heads out); hovering any cell shows its layer, head and exact effect.
    """
    n_layers, n_heads = head_effects.shape
    z = head_effects.detach().float().cpu().numpy()
    peak = float(abs(z).max()) or 1.0
    fmt = ".2%" if percent else ".4g"
    cols = 2 if mlp_effects is not None else 1
    fig = make_subplots(rows=1, cols=cols, column_widths=[0.9, 0.1][:cols] if cols == 2 else [1.0],
                        shared_yaxes=True, horizontal_spacing=0.02,
                        subplot_titles=("heads", "MLP (own scale)")[:cols])
    fig.add_trace(
        go.Heatmap(
            z=z,
            x=list(range(n_heads)),
            y=list(range(n_layers)),
            colorscale=DIVERGING,
            zmid=0,
            zmin=-peak,
            zmax=peak,
            colorbar=dict(title=metric_label, tickformat=fmt),
            hovertemplate="layer %{y}, head %{x}<br>effect %{z:" + fmt + "}<extra></extra>",
            name="heads",
        ),
        row=1,
        col=1,
    )
    if mlp_effects is not None:
        m = mlp_effects.detach().float().cpu().numpy()[:, None]
        mlp_peak = float(abs(m).max()) or 1.0
        fig.add_trace(
            go.Heatmap(
                z=m,
                x=["MLP"],
                y=list(range(n_layers)),
                colorscale=DIVERGING,
                zmid=0,
                zmin=-mlp_peak,
                zmax=mlp_peak,
                showscale=False,
                hovertemplate="layer %{y}, MLP<br>effect %{z:" + fmt + "}<extra></extra>",
                name="MLPs",
            ),
            row=1,
            col=2,
        )
    for layer, head in key_heads or []:
        fig.add_shape(type="rect", x0=head - 0.5, x1=head + 0.5, y0=layer - 0.5, y1=layer + 0.5,
                      line=dict(color="black", width=2), row=1, col=1)
    fig.update_xaxes(title_text="head", dtick=1 if n_heads <= 16 else 4, row=1, col=1)
    fig.update_yaxes(title_text="layer", autorange="reversed", row=1, col=1)
    fig.update_layout(title=title, height=max(400, 22 * n_layers + 150), width=max(500, 40 * n_heads + 300))
    return fig


def write_html(fig: go.Figure, path: str | Path) -> Path:
    """Write a self-contained HTML file (plotly.js embedded: opens offline)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.write_html(path, include_plotlyjs=True, full_html=True)
    return path
