"""The figures of every step (Figures 2-7, 15): each function takes tensors or lists and labels and returns a
``go.Figure``; nothing global is changed. Diverging scales are centred at 0, and in every effect figure **red
is important** (:func:`importance_scale` orients the scale by the metric's sign; the colour bar names the metric and
says so). The experiment scripts, the result objects and the report draw with these same functions. Save with
:func:`write_figure` (plotly.js shared once per results folder by a relative path, so the page opens offline)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import plotly.graph_objects as go
from jaxtyping import Float
from plotly.subplots import make_subplots
from torch import Tensor

from circuits.io import write_text
from circuits.types import DEFAULT_METRIC


from circuits.viz.colours import (BEFORE, DIVERGING, IMPORTANT, IMPORTANT_BAND, LEGEND, RANDOM,  # noqa: F401
                                  RANDOM_BAND, ROLE_COLOURS, SIGNED, category, important_trace, importance_scale)


def metric_info(metric: Any, sign: int | None = None, label: str | None = None) -> tuple[str, int, str]:
    """(name, important sign, meaning) of ``metric`` (a name or a :class:`~circuits.patching.core.metrics.Metric`);
    ``sign``/``label`` override. An unknown name keeps ``sign`` (default +1) and says only its name."""
    from circuits.patching.core.metrics import METRICS, Metric

    m = metric if isinstance(metric, Metric) else METRICS.get(str(metric))
    name = m.name if m is not None else str(metric)
    return name, (sign if sign is not None else m.sign if m is not None else 1), (label or (m.doc if m else name))


def colorbar_title(name: str, sign: int) -> str:
    """A colour bar's title: the metric's name and the convention, short enough not to squeeze the plot."""
    return f"{name}<br><sup>{LEGEND}<br>({'high' if sign > 0 else 'low'} = important)</sup>"


def model_label(model: str) -> str:
    """A model as a figure's title or legend shows it: a local folder's or file's last part, not its whole path
    (``/home/me/ckpt/llama-sft`` -> ``llama-sft``; a temporary folder's path once made every title three lines and
    the legend wider than the plots); an embedded or hub name (``smollm2``, ``meta-llama/Llama-2-7b-hf``) as it is.
    The full path stays in each result's config. Escaped for plotly, which draws ``<a href=...>``, ``<b>`` and alike in
    titles and legends as markup: a name read from a config is shown as the text it is (issue 41)."""
    import html

    text = str(model)
    path = Path(text).expanduser()
    if path.is_absolute() or text.startswith((".", "~")) or path.exists():
        text = path.name or text
    return html.escape(text, quote=False)


def wrap(text: str, width: int = 90) -> str:
    """``text`` broken into lines of at most ``width`` characters with ``<br>`` (plotly titles do not wrap)."""
    import textwrap

    return "<br>".join(textwrap.wrap(text, width)) or text


def write_figure(fig: go.Figure, path: str | Path, *, inline: bool = False, validity: Any = None) -> Path:
    """An HTML file of ``fig``, written atomically. plotly.js is not inlined but shared: one copy per results folder
    (:func:`circuits.viz.page.shared_asset`, a relative path, so the page still opens offline); ``inline=True``
    embeds it (a single file that can be mailed alone, 4.7 MB heavier). ``validity``: the job's
    :class:`~circuits.identify.validity.Validity`; its warnings go above the figure, as the report puts them at the top
    of the job's section."""
    return write_figures([fig], path, inline=inline, validity=validity)


def write_figures(figs: Sequence[go.Figure], path: str | Path, *, inline: bool = False, validity: Any = None) -> Path:
    """One HTML file holding every figure of ``figs`` one below the other, plotly.js loaded once (as
    :func:`write_figure` loads it), the validity warnings above them."""
    from circuits.viz.page import GUTTER_CSS, NOTE_CSS, script_tag, validity_banner

    path = Path(path)
    js = script_tag("plotly", path, inline=inline)
    banner = validity_banner(validity)
    style = f"<style>{GUTTER_CSS}{NOTE_CSS if banner else ''}</style>"
    # responsive: an autosized figure follows the window when it is resized, as the report's figures do
    body = "".join(f.to_html(include_plotlyjs=False, full_html=False, config={"displaylogo": False, "responsive": True})
                   for f in figs)
    return write_text(path, f"<!DOCTYPE html><html><head><meta charset='utf-8'>{js}{style}</head><body>{banner}{body}"
                            "</body></html>")


def _arr(x) -> np.ndarray:
    return np.asarray(x.tolist() if hasattr(x, "tolist") else x, dtype=float)


def _cell_px(n_rows: int, n_cols: int) -> int:
    """Side of a square heatmap cell in pixels: 24 for small models, down to 10 so 80 layers x 64 heads still fit."""
    return int(max(10, min(24, 900 // max(n_cols, 1), 1100 // max(n_rows, 1))))


def head_heatmap(
    head_effects: Float[Tensor, "layer head"],
    mlp_effects: Float[Tensor, " layer"] | None = None,
    *,
    metric: Any = DEFAULT_METRIC,
    title: str | None = None,
    metric_label: str | None = None,
    sign: int | None = None,
    percent: bool | None = None,
    key_heads: list[tuple[int, int]] | None = None,
    head_ci: tuple | None = None,
    mlp_ci: tuple | None = None,
    uncertain: list[tuple[int, int]] | None = None,
    also: dict[str, tuple] | None = None,
) -> go.Figure:
    """Layer-by-head heatmap with an MLP column (the paper's Figure 2), diverging scale centred at 0.

    ``metric`` names what the effects are (default ``fraction``, the default of ``scores()``; a name or a
    :class:`~circuits.patching.core.metrics.Metric`): its name labels the colour bar and the hover, and its sign orients
    the colours so that **red is important** in every figure (for ``fraction`` a large positive share, for
    ``relative_logit`` a drop of the answer logit). ``metric_label`` (the metric's meaning) is the subtitle. Cells
    are square; the MLP column has its own colour scale (MLP effects are several times larger than head effects).
    Hovering any cell shows its layer, head and effect, with ``head_ci``/``mlp_ci`` (low, high) its bootstrap
    interval, and with ``also`` (``{metric name: (head effects, mlp effects)}``) those metrics too (e.g. the one
    that boxes a head, when the colours show another); ``key_heads`` are boxed, ``uncertain`` ones dashed.
    """
    name, sign, meaning = metric_info(metric, sign, metric_label)
    if percent is None:
        percent = name in ("relative_logit", "fraction", "prob")
    n_layers, n_heads = head_effects.shape
    # The grids go to the page as float32 (the effects and intervals are float32: the same numbers in half the
    # bytes of plotly's float64 encoding; issue 44)
    z = _arr(head_effects.detach().float().cpu()).astype(np.float32)
    peak = float(np.nanmax(np.abs(z))) if np.isfinite(z).any() else 1.0
    fmt = ".2%" if percent else ".4g"
    scale = importance_scale(sign)
    cell = _cell_px(n_layers, n_heads + 1)
    heads_w, mlp_w, gap = cell * n_heads, cell * 2, max(60, cell * 2)
    margin = dict(l=70, r=150 if mlp_effects is None else 300, t=120, b=70)  # room for the MLP column's own bar
    plot_w = heads_w + (gap + mlp_w if mlp_effects is not None else 0)
    # The colour bar is at least 200 px tall (readable ticks) even for a 3-layer model: the bottom margin makes room.
    bar_px = int(min(420, max(200, cell * n_layers)))
    margin["b"] = max(70, bar_px + 20 - cell * n_layers)
    cols = 2 if mlp_effects is not None else 1

    def hover(kind: str, ci, extra: list[tuple[str, np.ndarray]]) -> tuple[np.ndarray | None, str]:
        layers = [ci[0], ci[1]] if ci is not None else []
        data = [_arr(x) for x in layers] + [a for _, a in extra]
        lines = [f"{name} %{{z:{fmt}}}"]
        k = 0
        if ci is not None:
            lines.append(f"CI [%{{customdata[0]:{fmt}}}, %{{customdata[1]:{fmt}}}]")
            k = 2
        for j, (n, _) in enumerate(extra):
            lines.append(f"{n} %{{customdata[{k + j}]:{'.2%' if n in ('relative_logit', 'fraction', 'prob') else '.4g'}}}")
        custom = np.stack(data, -1).astype(np.float32) if data else None
        return custom, "<br>".join(lines)

    extra_h = [(n, _arr(v[0])) for n, v in (also or {}).items() if n != name]
    extra_m = [(n, _arr(v[1])[:, None]) for n, v in (also or {}).items() if n != name and v[1] is not None]
    fig = make_subplots(rows=1, cols=cols, column_widths=[heads_w, mlp_w][:cols], shared_yaxes=True,
                        horizontal_spacing=gap / plot_w if cols == 2 else 0.0,
                        subplot_titles=("heads", "MLPs<br>(own scale)")[:cols])
    custom, lines = hover("head", head_ci, extra_h)
    fig.add_trace(
        go.Heatmap(
            z=z, x=list(range(n_heads)), y=list(range(n_layers)), colorscale=scale, zmid=0, zmin=-peak, zmax=peak,
            colorbar=dict(title=dict(text=colorbar_title(name, sign), side="top"), tickformat=fmt, thickness=14,
                          lenmode="pixels", len=bar_px, y=1, yanchor="top"),
            customdata=custom, hovertemplate="layer %{y}, head %{x}<br>" + lines + "<extra></extra>", name="heads",
        ),
        row=1, col=1,
    )
    if mlp_effects is not None:
        m = _arr(mlp_effects.detach().float().cpu())[:, None].astype(np.float32)
        mlp_peak = float(np.nanmax(np.abs(m))) if np.isfinite(m).any() else 1.0
        ci = (_arr(mlp_ci[0])[:, None], _arr(mlp_ci[1])[:, None]) if mlp_ci is not None else None
        custom, lines = hover("mlp", ci, extra_m)
        fig.add_trace(
            go.Heatmap(
                z=m, x=["MLP"], y=list(range(n_layers)), colorscale=scale, zmid=0, zmin=-mlp_peak, zmax=mlp_peak,
                # its own scale, so its own bar (the same red is a different value here than among the heads)
                colorbar=dict(title=dict(text=f"MLPs: {name}<br><sup>own scale;<br>{LEGEND}</sup>", side="top"), tickformat=fmt,
                              thickness=14, lenmode="pixels", len=bar_px, y=1, yanchor="top",
                              x=1 + 150 / plot_w, xref="paper"),
                customdata=custom,
                hovertemplate="layer %{y}, MLP<br>" + lines + "<extra></extra>", name="MLPs",
            ),
            row=1, col=2,
        )
        # No zoom handles on the MLP column: its drag layer would otherwise reach over the last head column.
        fig.update_xaxes(fixedrange=True, row=1, col=2)
        fig.update_yaxes(fixedrange=True, showticklabels=False, row=1, col=2)
    for layer, head in key_heads or []:
        fig.add_shape(type="rect", x0=head - 0.5, x1=head + 0.5, y0=layer - 0.5, y1=layer + 0.5,
                      line=dict(color="black", width=2), row=1, col=1)
    for layer, head in uncertain or []:
        fig.add_shape(type="rect", x0=head - 0.4, x1=head + 0.4, y0=layer - 0.4, y1=layer + 0.4,
                      line=dict(color="black", width=1, dash="dot"), row=1, col=1)
    step = 1 if n_heads * 1.0 <= plot_w / 18 else max(1, int(np.ceil(18 * n_heads / heads_w)))
    fig.update_xaxes(title_text="head", dtick=step, tickangle=0, row=1, col=1)
    fig.update_yaxes(title_text="layer", autorange="reversed", dtick=1 if n_layers <= 40 else 4, row=1, col=1)
    text = title if title is not None else f"Effect of patching each head and MLP at END ({name})"
    width = max(plot_w + margin["l"] + margin["r"], 480)
    head_text, sub_text = wrap(text, max(40, width // 8)), wrap(meaning, max(40, width // 7))
    # Room above the plot for every title line, the subtitle and the two-line subplot titles, so none overlap.
    margin["t"] = 20 * (head_text.count("<br>") + 1) + 16 * (sub_text.count("<br>") + 1) + 76
    fig.update_layout(
        title=dict(text=head_text, subtitle=dict(text=sub_text, font=dict(size=12, color="#555")),
                   x=0.01, xanchor="left", xref="container", y=1 - 26 / (cell * n_layers + margin["t"] + margin["b"]),
                   yanchor="top", yref="container",
                   font=dict(size=15)),
        height=cell * n_layers + margin["t"] + margin["b"], width=width, margin=margin,
        modebar=dict(orientation="v"),  # down the right edge: a narrow figure's title stays uncovered on hover
    )
    return fig


def knockout_figure(ks: Sequence[int], effect: Sequence[float], random: Sequence[Sequence[float]], ylabel: str, title: str,
                    bands: dict | None = None) -> go.Figure:
    """Figure 3: knocking out the top-k heads by effect vs. k random heads. ``bands``: bootstrap intervals over pairs
    (``{"key": [[low, high] per k], "random": [...], "level": 0.95}``, :meth:`KnockoutCurve.interval`), drawn around
    each curve; without them the random heads' band is the min-max over seeds and the key heads' curve has none."""
    r = _arr(random)
    ks = list(ks)
    fig = go.Figure()

    def band(lo, hi, color, name):
        fig.add_trace(go.Scatter(x=ks, y=list(hi), mode="lines", line={"width": 0, "color": color}, showlegend=False,
                                 hoverinfo="skip"))
        fig.add_trace(go.Scatter(x=ks, y=list(lo), mode="lines", line={"width": 0}, fill="tonexty", fillcolor=color,
                                 name=name, customdata=list(hi),
                                 hovertemplate=name + "<br>%{x} heads out: %{y:.1%} to %{customdata:.1%}"
                                               "<extra></extra>"))

    seeds = f"{len(r)} seed{'s' if len(r) != 1 else ''}"
    if bands:
        pct = f"{bands.get('level', 0.95):.0%}"
        band([x[0] for x in bands["random"]], [x[1] for x in bands["random"]], RANDOM_BAND,
             f"random heads: {pct} bootstrap interval over pairs")
    else:
        band(r.min(0), r.max(0), RANDOM_BAND, f"random heads: min-max over {seeds}")
    fig.add_trace(go.Scatter(x=ks, y=r.mean(0), mode="lines+markers", name=f"random heads (mean of {seeds})",
                             line={"color": RANDOM}, hovertemplate=_hover(f"random heads (mean of {seeds})", ylabel)))
    if bands:
        band([x[0] for x in bands["key"]], [x[1] for x in bands["key"]], IMPORTANT_BAND,
             f"top-k heads: {pct} bootstrap interval over pairs")
        important_trace(fig.data[-1])
    fig.add_trace(important_trace(go.Scatter(x=ks, y=list(effect), mode="lines+markers",
                                             name="top-k heads (effect rank)", line={"color": IMPORTANT},
                                             hovertemplate=_hover("top-k heads (effect rank)", ylabel))))
    fig.update_layout(title=title, xaxis_title="k heads knocked out", yaxis_title=ylabel)
    tops = [effect, r] + ([bands["key"], bands["random"]] if bands else [])
    fig.update_yaxes(range=[0, _rate_top(*tops)])  # a rate's axis starts at 0
    return fig


def _hover(name: str, ylabel: str) -> str:
    """A knockout point's hover, in words: ``top-k heads (effect rank)<br>16 heads out: accuracy 7.8%`` (plotly's
    default showed ``(16, 0.078125)`` under a name cut to 15 characters)."""
    return f"{name}<br>%{{x}} heads out: {ylabel} %{{y:.1%}}<extra></extra>"


def _rate_top(*values) -> float:
    """The top of a rate's axis: 1 (or a little above the data when it passes 1), so 0..1 rates are drawn whole."""
    top = max([float(np.nanmax(_arr(v))) for v in values if np.size(_arr(v))] or [1.0])
    return max(1.0, top) * 1.04


def _error_bars(values: Sequence[float | None], intervals: Sequence[Any] | None) -> dict | None:
    """Plotly ``error_y`` drawing ``intervals`` (``[low, high]`` or None per value) around ``values``."""
    if intervals is None or all(iv is None for iv in intervals):
        return None
    up, down = [], []
    for v, iv in zip(values, intervals):
        ok = v is not None and iv is not None and iv[0] == iv[0]
        up.append(max(0.0, float(iv[1]) - float(v)) if ok else 0.0)
        down.append(max(0.0, float(v) - float(iv[0])) if ok else 0.0)
    return dict(type="data", symmetric=False, array=up, arrayminus=down, color="#333", thickness=1.2, width=4)


def n_label(ns: Sequence[int | None], unit: str) -> str:
    """``n = 8 items`` when every group has the same n, ``n = 8-64 items`` otherwise (each group's own n is on its
    tick)."""
    known = sorted({int(n) for n in ns if n is not None})
    if not known:
        return f"n unknown ({unit})"
    return f"n = {known[0]} {unit}" if len(known) == 1 else f"n = {known[0]}-{known[-1]} {unit}"


def before_after_figure(names: Sequence[str], before: Sequence[float], after: Sequence[float], title: str,
                        control: Sequence[float] | None = None, ylabel: str = "accuracy",
                        knocked: str = "top heads", intervals: Sequence[Sequence[Any]] | None = None,
                        ns: Sequence[int | None] | None = None, level: float = 0.95) -> go.Figure:
    """Figure 4: accuracy per data set before and after the knockout (and a random-heads control), each bar with its
    interval over the set's items where ``intervals`` gives them (``[[before, after, control] per set]``, each
    ``[low, high]``); ``ns``: each set's item count (on the ticks and in the subtitle)."""
    ns = list(ns) if ns is not None else [None] * len(names)
    ticks = [f"{n}<br>(n={k})" if k is not None else str(n) for n, k in zip(names, ns)]
    arms = [("before knockout", list(before), BEFORE), (f"{knocked} knocked out", list(after), IMPORTANT)]
    if control is not None:
        arms.append(("random heads knocked out", list(control), RANDOM))
    fig = go.Figure()
    for j, (name, ys, colour) in enumerate(arms):
        errs = _error_bars(ys, [row[j] if j < len(row) else None for row in intervals] if intervals else None)
        bar = go.Bar(x=ticks, y=ys, name=name, marker_color=colour, error_y=errs,
                     hovertemplate="%{x}<br>" + name + " %{y:.0%}<extra></extra>")
        fig.add_trace(important_trace(bar) if colour == IMPORTANT else bar)
    sub = n_label(ns, "items per set") + (f"; error bars: {level:.0%} Wilson intervals over the items" if intervals
                                          else "; no intervals")
    fig.update_layout(title=dict(text=wrap(title, 100), subtitle=dict(text=sub, font=dict(size=12, color="#555"))),
                      barmode="group", yaxis_title=ylabel, margin=dict(t=110))
    fig.update_yaxes(range=[0, _rate_top(*[a[1] for a in arms], *(
        [[iv[1] for row in intervals for iv in row if iv is not None]] if intervals else []))])
    return fig


def roles_figure(head_labels: Sequence[str], roles: Sequence[str], mean, title: str,
                 low: Any = None, high: Any = None) -> go.Figure:
    """Figure 5: END-row attention per role for each head, one bar per role side by side (a head's roles sum to 1),
    with each bar's interval over prompts (``low``/``high``, ``[head, role]``) as error bars where given."""
    m = _arr(mean)
    lo, hi = (_arr(low), _arr(high)) if low is not None and high is not None else (None, None)
    bars = []
    for j, r in enumerate(roles):
        errs = _error_bars(list(m[:, j]), None if lo is None else [[lo[i, j], hi[i, j]] for i in range(len(m))])
        bars.append(go.Bar(x=list(head_labels), y=m[:, j], name=r, marker_color=ROLE_COLOURS.get(r), error_y=errs,
                           hovertemplate="head %{x}<br>" + r + " %{y:.1%}<extra></extra>"))
    fig = go.Figure(bars)
    fig.update_layout(title=title, barmode="group", yaxis_title="mean attention from END", xaxis_title="head")
    return fig


def lines_figure(series: dict[str, Sequence[float]], title: str, xlabel: str = "layer", ylabel: str = "cosine",
                 intervals: dict[str, Any] | None = None) -> go.Figure:
    """Figure 6a/6b: one line per series over layers; ``intervals[name]``: ``[[low, high] per layer]``, drawn as
    error bars."""
    intervals = intervals or {}
    fig = go.Figure([go.Scatter(y=list(v), mode="lines+markers", name=k, line={"color": category(i)},
                                error_y=_error_bars(list(v), intervals.get(k)))
                     for i, (k, v) in enumerate(series.items())])
    fig.add_hline(y=0, line={"color": "black", "width": 1})
    fig.update_layout(title=title, xaxis_title=xlabel, yaxis_title=ylabel)
    return fig


def top_tokens_figure(top: Sequence[Sequence[tuple[str, float]]], title: str) -> go.Figure:
    """Figure 6c: per layer, the top number tokens of ``MLP_out - MLP_in`` (cell text) and their cosine (colour)."""
    z = _arr([[c for _, c in row] for row in top])
    text = [[repr(t) for t, _ in row] for row in top]
    m = float(np.abs(z).max()) or 1.0
    fig = go.Figure(go.Heatmap(z=z, text=text, texttemplate="%{text}", colorscale=SIGNED, zmid=0,  # not importance
                               zmin=-m, zmax=m, colorbar={"title": {"text": "cosine<br><sup>(not importance)</sup>",
                                                                    "side": "top"}},
                               hovertemplate="layer %{y}, rank %{x}<br>token %{text}<br>cosine %{z:.3f}<extra></extra>"))
    fig.update_layout(title=wrap(title, 100), xaxis_title="rank", yaxis_title="layer", height=max(400, 22 * len(top)))
    fig.update_yaxes(autorange="reversed", dtick=1)
    fig.update_xaxes(dtick=1)
    return fig


def prompt_label(text: str, width: int = 60) -> str:
    """A prompt as a figure title shows it: its last line quoted (the few-shot lines before it as "..."), never a
    literal ``\\n``."""
    lines = text.split("\n")
    last = lines[-1] if lines[-1].strip() or len(lines) == 1 else lines[-2]
    shown = repr(last if len(last) <= width else last[-width:])
    return ("... " if len(lines) > 1 else "") + shown


def overlap_figure(labels: Sequence[str], matrix, title: str) -> go.Figure:
    """Figure 15 (right): number of shared key heads between tasks."""
    z = _arr(matrix)
    fig = go.Figure(go.Heatmap(z=z, x=list(labels), y=list(labels), text=z.astype(int).tolist(), texttemplate="%{text}",
                               colorscale="Blues", zmin=0))
    fig.update_layout(title=title)
    return fig


def heatmap_grid(panels: dict[str, object], title: str, metric: Any, sign: int | None = None) -> go.Figure:
    """Figure 15 (left): one layer-by-head effect heatmap per task, on a shared scale centred at 0, in percent of
    ``metric`` (red: important)."""
    name, sign, _ = metric_info(metric, sign)
    arrs = {k: _arr(v) * 100 for k, v in panels.items()}
    m = max(float(np.nanmax(np.abs(a))) for a in arrs.values()) or 1.0
    fig = make_subplots(rows=1, cols=len(arrs), subplot_titles=list(arrs), shared_yaxes=True)
    for i, a in enumerate(arrs.values()):
        fig.add_trace(go.Heatmap(z=a, colorscale=importance_scale(sign), zmid=0, zmin=-m, zmax=m, showscale=i == 0,
                                 colorbar={"title": {"text": colorbar_title(name + ", %", sign), "side": "top"}},
                                 hovertemplate="layer %{y}, head %{x}<br>" + name + " %{z:.2f}%<extra></extra>"), 1, i + 1)
    fig.update_yaxes(autorange="reversed", row=1, col=1)
    fig.update_layout(title=wrap(title, 110), margin=dict(r=140))
    return fig


def knockout_panels(curve: dict, title: str = "Knockout: effect-rank vs random-rank heads (Figure 3)",
                    intervals: dict | None = None) -> go.Figure:
    """Figure 3 from a saved :class:`circuits.ablation.KnockoutCurve` (``to_json``): accuracy and answer probability.
    ``intervals``: ``{"accuracy": bands, "answer_prob": bands}`` (:meth:`KnockoutCurve.interval`), drawn as bands."""
    intervals = intervals or {}
    a = knockout_figure(curve["ks"], curve["effect_accuracy"], curve["random_accuracy"], "accuracy", "",
                        intervals.get("accuracy"))
    p = knockout_figure(curve["ks"], curve["effect_prob"], curve["random_prob"], "answer probability", "",
                        intervals.get("answer_prob"))
    # apart enough that the right panel's y title never lies over the left one's curve, and the legend below the
    # panels, not beside them (its long names took 300 of the tour's static PNG's 700 px and squeezed the panels
    # together, the y title over the left panel's last point)
    fig = make_subplots(rows=1, cols=2, subplot_titles=("accuracy", "answer probability"), horizontal_spacing=0.14)
    for tr in a.data:
        fig.add_trace(tr, 1, 1)
    for tr in p.data:
        tr.showlegend = False
        fig.add_trace(tr, 1, 2)
    fig.update_layout(title=wrap(title, 100), legend=dict(orientation="h", x=0, xanchor="left", y=-0.22, yanchor="top"),
                      margin=dict(b=130))
    fig.update_xaxes(title_text="k heads knocked out", tickvals=list(curve["ks"]))
    fig.update_yaxes(range=[0, a.layout.yaxis.range[1]], title_text="accuracy", row=1, col=1)
    fig.update_yaxes(range=[0, p.layout.yaxis.range[1]], title_text="answer probability", row=1, col=2)
    return fig


def roles_panels(by_operation: dict[str, dict], title: str = "END-row attention of the top heads by token role (Figure 5)") -> go.Figure:
    """Figure 5 from saved :class:`circuits.attention.RoleAttention` (``to_json``) per operation, one row each; each
    bar's error bar is its interval over the operation's prompts where the result saved one (``ci_low``/``ci_high``),
    and each row's title says its number of prompts."""
    ops = list(by_operation)
    level = next((r["ci_level"] for r in by_operation.values() if "ci_level" in r), None)
    names = [f"{op}: no roles given ({by_operation[op].get('n_without_roles', '?')} pairs mark no operand or operator)"
             if by_operation[op].get("no_roles_given") else
             f"{op} (n = {by_operation[op].get('n_prompts', '?')} prompts"
             + (f"; {by_operation[op]['n_without_roles']} without roles left out" if by_operation[op].get(
                 "n_without_roles") else "") + ")" for op in ops]
    fig = make_subplots(rows=len(ops), cols=1, subplot_titles=names, shared_xaxes=True)
    for i, op in enumerate(ops):
        r = by_operation[op]
        if r.get("no_roles_given"):  # nothing drawn: every position would read as "other"
            fig.add_annotation(text="no roles given: the pairs mark no operand or operator (\"roles\" in the pairs "
                                    "file, docs/identify.md)", showarrow=False, font=dict(size=14),
                               xref=f"x{i + 1 if i else ''} domain", yref=f"y{i + 1 if i else ''} domain", x=0.5, y=0.5)
            continue
        sub = roles_figure([f"{l}.{h}" for l, h in r["heads"]], r["roles"], r["mean"], op, r.get("ci_low"),
                           r.get("ci_high"))
        for tr in sub.data:
            tr.showlegend = i == 0
            tr.legendgroup = tr.name
            fig.add_trace(tr, i + 1, 1)
    sub = (f"error bars: {level:.0%} bootstrap intervals over prompts" if level is not None
           else "no intervals saved with this result")
    fig.update_layout(barmode="group", height=max(480, 300 * len(ops)), margin=dict(b=140, t=110),
                      title=dict(text=wrap(title, 100), subtitle=dict(text=sub, font=dict(size=12, color="#555"))),
                      legend=dict(orientation="h", x=0, xanchor="left", y=-0.32 if len(ops) == 1 else -0.06,
                                  yanchor="top", title_text="role"))
    fig.update_xaxes(title_text="head (layer.head)", row=len(ops), col=1)
    fig.update_yaxes(title_text="attention from END", range=[0, 1])
    return fig


def lens_panels(means: dict[str, Sequence[float]], title: str = "MLP logit lens (Figure 6)",
                intervals: dict[str, Any] | None = None, n: int | None = None, level: float = 0.95) -> go.Figure:
    """Figures 6a and 6b from the saved per-layer means of :func:`circuits.logit_lens.mlp_lens`; ``intervals``
    (``{series: [[low, high] per layer]}``, over pairs) drawn as error bars, ``n`` the pairs the means are over."""
    iv = intervals or {}
    a = lines_figure({"cos(MLP_in, W_U[A])": means["in_A"], "cos(MLP_in, W_U[B])": means["in_B"]}, "",
                     intervals={"cos(MLP_in, W_U[A])": iv.get("in_A"), "cos(MLP_in, W_U[B])": iv.get("in_B")})
    b = lines_figure({"cos(MLP_out - MLP_in, W_U[C])": means["delta_C"], "mean over other numbers": means["delta_other"]},
                     "", intervals={"cos(MLP_out - MLP_in, W_U[C])": iv.get("delta_C"),
                                    "mean over other numbers": iv.get("delta_other")})
    for j, tr in enumerate(b.data):
        tr.line.color = category(j + 2)  # 6b's series are other quantities than 6a's: other colours
    fig = make_subplots(rows=2, cols=1, subplot_titles=("6a: MLP input vs operands", "6b: MLP output vs answer"))
    for tr in a.data:
        fig.add_trace(tr, 1, 1)
    for tr in b.data:
        tr.legend = "legend2"  # each panel its own legend, beside it
        fig.add_trace(tr, 2, 1)
    fig.add_hline(y=0, line={"color": "black", "width": 1})
    L = len(means["in_A"])  # layers are integers 0 .. L - 1: no tick at -1 or L from plotly's padding
    fig.update_xaxes(title_text="layer", dtick=1 if L <= 40 else None, range=[-0.5, L - 0.5])
    fig.update_yaxes(title_text="cosine")
    count = f"n = {n} pairs" if n is not None else "n unknown"
    sub = f"{count}; error bars: {level:.0%} bootstrap intervals over pairs" if iv else f"{count}; no intervals saved"
    fig.update_layout(title=dict(text=title, subtitle=dict(text=sub, font=dict(size=12, color="#555"))), height=800,
                      margin=dict(t=110),
                      legend=dict(title_text="6a", x=1.02, xanchor="left", y=1, yanchor="top"),
                      legend2=dict(title_text="6b", x=1.02, xanchor="left", y=0.44, yanchor="top"))
    return fig


def knockout_table_figure(rows: dict[str, dict], texts: dict[str, str], heads: Sequence, title: str) -> go.Figure:
    """Table 3: per template, accuracy before and after knocking out ``heads``, and after random heads."""
    shown = ", ".join(f"{h[0]}.{h[1]}" for h in heads)
    cols = [[texts.get(k, k) for k in rows], [shown] * len(rows)]
    for key in ("accuracy_before", "accuracy_after", "accuracy_random_heads"):
        cols.append([f"{r[key]:.2f}" if r.get(key) is not None else "-" for r in rows.values()])
    fig = go.Figure(go.Table(header={"values": ["template", "key heads", "accuracy", "after knockout", "random heads"]},
                             cells={"values": cols}))
    fig.update_layout(title=title)
    return fig


def word_problem_table_figure(datasets: dict[str, dict], title: str = "Word-problem key heads and knockout (Table 4)") -> go.Figure:
    """Table 4: per data set, the key heads found on word problems, their overlap with the template heads and
    the knockout accuracies."""
    keys = ("accuracy_knockout_own", "accuracy_knockout_template_heads", "accuracy_knockout_shared", "accuracy_knockout_own_only")
    cols = ["dataset", "answered", "top key heads", "shared with templates", "acc.", "KO own", "KO template", "KO shared",
            "KO own-only"]
    cells: list[list[str]] = [[] for _ in cols]
    for name, r in datasets.items():
        vals = [name, f"{r['n_correct']}/{r['n_questions']}", ", ".join(f"{l}.{h}" for l, h, *_ in r.get("key_heads", [])),
                str(len(r.get("shared_with_templates", []))), f"{r['accuracy']:.2f}"]
        vals += [f"{r[k]:.2f}" if k in r else "-" for k in keys]
        for c, v in zip(cells, vals):
            c.append(v)
    fig = go.Figure(go.Table(header={"values": cols}, cells={"values": cells}))
    fig.update_layout(title=title)
    return fig


def cross_model_figure(models: dict[str, dict], title: str = "The paper's claims on each model",
                       transfer_intervals: dict[str, list] | None = None) -> go.Figure:
    """Four panels from :class:`circuits.validate.cross_model.CrossModelResult` measurements, one colour per model:
    the share of key heads per operation, accuracy after knocking out the top-k heads (solid) against k random heads
    (dotted; Figure 3), accuracy on the transfer sets with the key heads and random heads knocked out (Figure 4; with
    ``transfer_intervals[model]``, ``[low, high]`` per bar, as error bars), and how much more the MLPs write the answer
    than other numbers, by relative depth (Figure 6b)."""
    fig = make_subplots(rows=2, cols=2, horizontal_spacing=0.16, subplot_titles=(
        "key heads (share of heads)", "knockout: top-k vs random (dotted)",
        "transfer: before, key, random out", "MLPs writing the answer"))
    colors = [category(i) for i in range(len(models))]  # models are categories: no importance red
    for i, (name, d) in enumerate(models.items()):
        c = colors[i % len(colors)]
        ops = list(d["operations"])
        fig.add_trace(go.Bar(x=ops, y=[d["operations"][o]["share_key_heads"] for o in ops], name=model_label(name),
                             marker_color=c, legendgroup=name), 1, 1)
        ko = d["knockout"]
        rnd = _arr(ko["random_accuracy"]).mean(0)
        fig.add_trace(go.Scatter(x=ko["ks"], y=ko["effect_accuracy"], mode="lines+markers", line={"color": c},
                                 name=name, legendgroup=name, showlegend=False), 1, 2)
        fig.add_trace(go.Scatter(x=ko["ks"], y=rnd, mode="lines+markers", line={"color": c, "dash": "dot"},
                                 name=f"{name} (random)", legendgroup=name, showlegend=False), 1, 2)
        sets = list(d["transfer"])
        labels = [f"{s}<br>{w}" for s in sets for w in ("before", "key out", "random out")]
        values = [d["transfer"][s][k] for s in sets for k in ("accuracy_before", "accuracy_after", "accuracy_random_heads")]
        fig.add_trace(go.Bar(x=labels, y=values, marker_color=c, name=name, legendgroup=name, showlegend=False,
                             error_y=_error_bars(values, (transfer_intervals or {}).get(name))), 2, 1)
        lens = d["logit_lens"]
        n = len(lens["delta_C"])
        depth = [l / max(1, n - 1) for l in range(n)]
        fig.add_trace(go.Scatter(x=depth, y=list(_arr(lens["delta_C"]) - _arr(lens["delta_other"])), mode="lines+markers",
                                 line={"color": c}, name=name, legendgroup=name, showlegend=False), 2, 2)
    fig.add_hline(y=0, line={"color": "black", "width": 1}, row=2, col=2)
    rates = [v for d in models.values() for v in (
        [d["operations"][o]["share_key_heads"] for o in d["operations"]], d["knockout"]["effect_accuracy"],
        d["knockout"]["random_accuracy"],
        [d["transfer"][s][k] for s in d["transfer"] for k in ("accuracy_before", "accuracy_after", "accuracy_random_heads")])]
    for row, col in ((1, 1), (1, 2), (2, 1)):  # shares and accuracies: rates, drawn from 0
        fig.update_yaxes(range=[0, _rate_top(*rates)], row=row, col=col)
    fig.update_yaxes(title_text="share of heads", row=1, col=1)
    fig.update_yaxes(title_text="accuracy", row=2, col=1)
    fig.update_xaxes(title_text="k heads knocked out", row=1, col=2)
    fig.update_xaxes(title_text="layer / (layers - 1)", row=2, col=2)
    fig.update_yaxes(title_text="accuracy", row=1, col=2)
    fig.update_layout(title=title, barmode="group", height=850)
    return fig
