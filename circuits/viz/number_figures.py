"""Figures of ``circuits numbers``: the key components' direct effect over the number line and its Fourier spectrum
(energy share by period), and the digit map of the key MLPs' neurons (units vs tens). Tensors and labels in, a
``go.Figure`` out; nothing global changes at import."""

from __future__ import annotations

from collections.abc import Sequence

import plotly.graph_objects as go
from jaxtyping import Float
from plotly.subplots import make_subplots
from torch import Tensor

from circuits.viz import colours


def _period(p: float) -> str:
    return f"{p:.3g}"


def fourier_figure(aligned: Float[Tensor, "component offset"], shares: Float[Tensor, "component period"],
                   components: Sequence[str], numbers: Sequence[int], periods: Sequence[float],
                   title: str) -> go.Figure:
    """Left: each component's direct effect on the number tokens' logits at END, centred over the numbers and laid
    out relative to each pair's answer (offset 0), mean over pairs; each row scaled by its own largest value (the
    hover gives logits), teal raising the number; right: each period's share of the component's energy over the
    number line (the mean left out), 0..100%."""
    rows = list(components)
    n = len(numbers)
    fig = make_subplots(rows=1, cols=2, column_widths=[0.5, 0.5], horizontal_spacing=0.16,
                        subplot_titles=("direct effect around the answer (each row scaled to its largest)",
                                        "share of the energy by period"))
    scale = aligned.abs().amax(-1, keepdim=True).clamp_min(1e-12)
    offsets = ["answer", *[f"+{k}" for k in range(1, n)]]
    fig.add_trace(go.Heatmap(z=(aligned / scale).tolist(), x=offsets, y=rows, zmid=0, zmin=-1, zmax=1,
                             colorscale=colours.SIGNED, customdata=aligned.tolist(),
                             colorbar=dict(x=0.42, thickness=12, len=0.9,
                                           title=dict(text="of the row's<br>largest<br><sup>teal: raises</sup>",
                                                      side="top")),
                             hovertemplate="%{y}, answer %{x}: %{customdata:+.3f} logits (centred)<extra></extra>"),
                  1, 1)
    labels = [_period(p) for p in periods]
    fig.add_trace(go.Heatmap(z=shares.tolist(), x=labels, y=rows, zmin=0, zmax=1, colorscale=colours.SHARE,
                             colorbar=dict(x=1.0, thickness=12, len=0.9, tickformat=".0%",
                                           title=dict(text="share of energy", side="top")),
                             text=[[f"{v:.0%}" for v in r] for r in shares.tolist()], texttemplate="%{text}",
                             hovertemplate="%{y}, period %{x}: %{z:.1%} of the energy<extra></extra>"), 1, 2)
    fig.update_xaxes(title_text=f"number minus the pair's answer (mod {n})", type="category", row=1, col=1)
    fig.update_xaxes(title_text="period (numbers per cycle)", type="category", row=1, col=2)
    for c in (1, 2):
        fig.update_yaxes(autorange="reversed", type="category", row=1, col=c)
    fig.update_layout(title=title, height=max(380, 80 + 26 * len(rows)), margin=dict(l=80, r=40, t=110, b=60))
    return fig


def digit_map_figure(units: Float[Tensor, " neuron"], tens: Float[Tensor, " neuron"], neurons: Sequence[str],
                     labels: Sequence[str], title: str) -> go.Figure:
    """Neurons x {units, tens}: how much patching the operands' units digit moves the answer's units-digit logit, and
    their tens digit the tens-digit logit (mean |change|, logits; 0 up), each row labelled with its class."""
    rows = [f"{n} ({lab})" for n, lab in zip(neurons, labels)]
    z = [[float(u), float(t)] for u, t in zip(units, tens)]
    top = max((max(r) for r in z), default=1.0) or 1.0
    fig = go.Figure(go.Heatmap(z=z, x=["units digit", "tens digit"], y=rows, zmin=0, zmax=top, colorscale=colours.SHARE,
                               colorbar=dict(thickness=12, title=dict(text="mean |change|<br>of the digit's logit",
                                                                      side="top")),
                               text=[[f"{v:.3g}" for v in r] for r in z], texttemplate="%{text}",
                               hovertemplate="%{y}: the %{x} of the answer moves by %{z:.3f} logits<extra></extra>"))
    fig.update_yaxes(autorange="reversed", type="category")
    fig.update_xaxes(title_text="the operand digit changed, and the answer digit read")
    fig.update_layout(title=title, height=max(360, 100 + 22 * len(rows)), width=760,
                      margin=dict(l=160, r=40, t=90, b=60))
    return fig


__all__ = ["digit_map_figure", "fourier_figure"]
