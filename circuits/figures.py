"""Figures of the validate and explain steps (Figures 2-7, 15): each function takes tensors or lists
and labels and returns a ``go.Figure``; nothing global is changed. Diverging scales are centred at 0.
Save with :func:`write_figure` (plotly.js inlined, so the page opens offline)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots


def write_figure(fig: go.Figure, path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.write_html(path, include_plotlyjs=True)
    return path


def _arr(x) -> np.ndarray:
    return np.asarray(x.tolist() if hasattr(x, "tolist") else x, dtype=float)


def head_heatmap(effects, title: str = "Effect of each head", scale: float = 100.0, unit: str = "%") -> go.Figure:
    """``effects[layer][head]`` as a layer-by-head heatmap (Figure 2), diverging around 0."""
    z = _arr(effects) * scale
    m = float(np.nanmax(np.abs(z))) or 1.0
    fig = go.Figure(go.Heatmap(z=z, colorscale="RdBu", zmid=0, zmin=-m, zmax=m, colorbar={"title": unit},
                               hovertemplate="layer %{y}, head %{x}: %{z:.2f}" + unit + "<extra></extra>"))
    fig.update_layout(title=title, xaxis_title="head", yaxis_title="layer")
    return fig


def effects_figure(head_effects, mlp_effects, title: str) -> go.Figure:
    """Figure 2: head heatmap beside the per-layer MLP effects."""
    heads = _arr(head_effects) * 100
    mlps = _arr(mlp_effects) * 100
    m = float(np.nanmax(np.abs(np.concatenate([heads.ravel(), mlps])))) or 1.0
    fig = make_subplots(rows=1, cols=2, column_widths=[0.8, 0.2], subplot_titles=("heads", "MLPs"), shared_yaxes=True)
    fig.add_trace(go.Heatmap(z=heads, colorscale="RdBu", zmid=0, zmin=-m, zmax=m, colorbar={"title": "%"}), 1, 1)
    fig.add_trace(go.Heatmap(z=mlps[:, None], colorscale="RdBu", zmid=0, zmin=-m, zmax=m, showscale=False), 1, 2)
    fig.update_layout(title=title, yaxis_title="layer")
    fig.update_xaxes(title_text="head", row=1, col=1)
    return fig


def knockout_figure(ks: Sequence[int], effect: Sequence[float], random: Sequence[Sequence[float]], ylabel: str, title: str) -> go.Figure:
    """Figure 3: knocking out the top-k heads by effect vs. k random heads (mean and min-max over seeds)."""
    r = _arr(random)
    fig = go.Figure()
    fig.add_trace(go.Scatter(x=list(ks), y=r.max(0), mode="lines", line={"width": 0}, showlegend=False, hoverinfo="skip"))
    fig.add_trace(go.Scatter(x=list(ks), y=r.min(0), mode="lines", line={"width": 0}, fill="tonexty",
                             fillcolor="rgba(120,120,120,0.25)", name="random-rank (min-max)"))
    fig.add_trace(go.Scatter(x=list(ks), y=r.mean(0), mode="lines+markers", name="random-rank (mean)", line={"color": "gray"}))
    fig.add_trace(go.Scatter(x=list(ks), y=list(effect), mode="lines+markers", name="effect-rank", line={"color": "crimson"}))
    fig.update_layout(title=title, xaxis_title="k heads knocked out", yaxis_title=ylabel)
    return fig


def before_after_figure(names: Sequence[str], before: Sequence[float], after: Sequence[float], title: str,
                        control: Sequence[float] | None = None, ylabel: str = "accuracy") -> go.Figure:
    """Figure 4: accuracy per data set before and after the knockout (and a random-heads control)."""
    fig = go.Figure([go.Bar(x=list(names), y=list(before), name="before knockout"),
                     go.Bar(x=list(names), y=list(after), name="key heads knocked out")])
    if control is not None:
        fig.add_trace(go.Bar(x=list(names), y=list(control), name="random heads knocked out"))
    fig.update_layout(title=title, barmode="group", yaxis_title=ylabel)
    return fig


def roles_figure(head_labels: Sequence[str], roles: Sequence[str], mean, title: str) -> go.Figure:
    """Figure 5: END-row attention per role (stacked, sums to 1) for each head."""
    m = _arr(mean)
    fig = go.Figure([go.Bar(x=list(head_labels), y=m[:, j], name=r) for j, r in enumerate(roles)])
    fig.update_layout(title=title, barmode="stack", yaxis_title="mean attention from END", xaxis_title="head")
    return fig


def lines_figure(series: dict[str, Sequence[float]], title: str, xlabel: str = "layer", ylabel: str = "cosine") -> go.Figure:
    """Figure 6a/6b: one line per series over layers."""
    fig = go.Figure([go.Scatter(y=list(v), mode="lines+markers", name=k) for k, v in series.items()])
    fig.add_hline(y=0, line={"color": "black", "width": 1})
    fig.update_layout(title=title, xaxis_title=xlabel, yaxis_title=ylabel)
    return fig


def top_tokens_figure(top: Sequence[Sequence[tuple[str, float]]], title: str) -> go.Figure:
    """Figure 6c: per layer, the top number tokens of ``MLP_out - MLP_in`` (cell text) and their cosine (colour)."""
    z = _arr([[c for _, c in row] for row in top])
    text = [[repr(t) for t, _ in row] for row in top]
    m = float(np.abs(z).max()) or 1.0
    fig = go.Figure(go.Heatmap(z=z, text=text, texttemplate="%{text}", colorscale="RdBu", zmid=0, zmin=-m, zmax=m,
                               colorbar={"title": "cosine"}))
    fig.update_layout(title=title, xaxis_title="rank", yaxis_title="layer", height=max(400, 22 * len(top)))
    return fig


def overlap_figure(labels: Sequence[str], matrix, title: str) -> go.Figure:
    """Figure 15 (right): number of shared key heads between tasks."""
    z = _arr(matrix)
    fig = go.Figure(go.Heatmap(z=z, x=list(labels), y=list(labels), text=z.astype(int).tolist(), texttemplate="%{text}",
                               colorscale="Blues", zmin=0))
    fig.update_layout(title=title)
    return fig


def heatmap_grid(panels: dict[str, object], title: str) -> go.Figure:
    """Figure 15 (left): one layer-by-head effect heatmap per task, on a shared scale centred at 0."""
    arrs = {k: _arr(v) * 100 for k, v in panels.items()}
    m = max(float(np.nanmax(np.abs(a))) for a in arrs.values()) or 1.0
    fig = make_subplots(rows=1, cols=len(arrs), subplot_titles=list(arrs), shared_yaxes=True)
    for i, a in enumerate(arrs.values()):
        fig.add_trace(go.Heatmap(z=a, colorscale="RdBu", zmid=0, zmin=-m, zmax=m, showscale=i == 0, colorbar={"title": "%"}), 1, i + 1)
    fig.update_layout(title=title)
    return fig


def knockout_panels(curve: dict, title: str = "Knockout: effect-rank vs random-rank heads (Figure 3)") -> go.Figure:
    """Figure 3 from a saved :class:`circuits.ablation.KnockoutCurve` (``to_json``): accuracy and answer probability."""
    a = knockout_figure(curve["ks"], curve["effect_accuracy"], curve["random_accuracy"], "accuracy", "")
    p = knockout_figure(curve["ks"], curve["effect_prob"], curve["random_prob"], "answer probability", "")
    fig = make_subplots(rows=1, cols=2, subplot_titles=("accuracy", "answer probability"))
    for tr in a.data:
        fig.add_trace(tr, 1, 1)
    for tr in p.data:
        tr.showlegend = False
        fig.add_trace(tr, 1, 2)
    fig.update_layout(title=title)
    fig.update_xaxes(title_text="k heads knocked out")
    return fig


def roles_panels(by_operation: dict[str, dict], title: str = "END-row attention of the key heads by token role (Figure 5)") -> go.Figure:
    """Figure 5 from saved :class:`circuits.attention.RoleAttention` (``to_json``) per operation, one row each."""
    ops = list(by_operation)
    fig = make_subplots(rows=len(ops), cols=1, subplot_titles=ops, shared_xaxes=True)
    for i, op in enumerate(ops):
        r = by_operation[op]
        sub = roles_figure([f"{l}.{h}" for l, h in r["heads"]], r["roles"], r["mean"], op)
        for tr in sub.data:
            tr.showlegend = i == 0
            tr.legendgroup = tr.name
            fig.add_trace(tr, i + 1, 1)
    fig.update_layout(barmode="stack", title=title, height=300 * len(ops))
    return fig


def lens_panels(means: dict[str, Sequence[float]], title: str = "MLP logit lens (Figure 6)") -> go.Figure:
    """Figures 6a and 6b from the saved per-layer means of :func:`circuits.logit_lens.mlp_lens`."""
    a = lines_figure({"cos(MLP_in, W_U[A])": means["in_A"], "cos(MLP_in, W_U[B])": means["in_B"]}, "")
    b = lines_figure({"cos(MLP_out - MLP_in, W_U[C])": means["delta_C"], "mean over other numbers": means["delta_other"]}, "")
    fig = make_subplots(rows=2, cols=1, subplot_titles=("6a: MLP input vs operands", "6b: MLP output vs answer"))
    for tr in a.data:
        fig.add_trace(tr, 1, 1)
    for tr in b.data:
        fig.add_trace(tr, 2, 1)
    fig.add_hline(y=0, line={"color": "black", "width": 1})
    fig.update_xaxes(title_text="layer")
    fig.update_layout(title=title, height=800)
    return fig
