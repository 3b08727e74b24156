"""Figures of the analyses beyond heads at END: the screen against the exact engine, the information flow over
positions (Stolfo et al. 2023), neuron concentration and knockout (Nikankin et al. 2025), the circuit graph of
edges, ablation kinds side by side, key-head stability and the faithfulness curves of each ranking (MIB). Like :mod:`circuits.viz.figures`, each takes tensors or
lists and returns a ``go.Figure``; diverging scales are centred at 0 and nothing global is changed."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import plotly.colors
import plotly.graph_objects as go
from jaxtyping import Float
from plotly.subplots import make_subplots
from torch import Tensor

from circuits.types import DEFAULT_METRIC
from circuits.viz.colours import BEFORE, CATEGORICAL, IMPORTANT, RANDOM, ROLE_COLOURS, category, important_trace
from circuits.viz.figures import LEGEND, _arr, _rate_top, colorbar_title, importance_scale, knockout_figure, metric_info, wrap

ROLE_COLORS = {r: ROLE_COLOURS[r] for r in ("A", "B", "operator", "equals")}  # the roles the information flow marks


def screen_scatter(screen: Sequence[float], exact: Sequence[float], labels: Sequence[str], kinds: Sequence[str],
                   title: str, metric: str) -> go.Figure:
    """Screen estimate (x) against the exact effect (y) of every head and MLP at END, with the diagonal."""
    s, e = _arr(screen), _arr(exact)
    fig = go.Figure()
    for kind, color in (("head", category(2)), ("mlp", category(1))):  # kinds, not importance: neither red nor blue
        idx = [i for i, k in enumerate(kinds) if k == kind]
        fig.add_trace(go.Scatter(x=s[idx], y=e[idx], mode="markers", name=kind + "s", text=[labels[i] for i in idx],
                                 marker={"color": color, "size": 6, "opacity": 0.7},
                                 hovertemplate="%{text}<br>screen %{x:.4g}<br>exact %{y:.4g}<extra></extra>"))
    lo = float(np.nanmin(np.concatenate([s, e]))) if len(s) else 0.0
    hi = float(np.nanmax(np.concatenate([s, e]))) if len(s) else 1.0
    fig.add_trace(go.Scatter(x=[lo, hi], y=[lo, hi], mode="lines", line={"color": "black", "dash": "dot"}, name="screen = exact"))
    fig.update_layout(title=title, xaxis_title=f"screen (attribution patching), {metric}", yaxis_title=f"exact, {metric}")
    return fig


def _own_bar(panel: int, name: str, sign: int, x: float) -> dict[str, Any]:
    """The colour bar of panel 1 (heads) or 2 (MLPs, on their own scale), one above the other at the right: every
    colour scale has its bar, so the same red never stands for two values unlabelled."""
    title = colorbar_title(name, sign) if panel == 1 else f"MLPs: {name}<br><sup>own scale;<br>{LEGEND}</sup>"
    return dict(title=dict(text=title, side="top"), thickness=12, x=x, xanchor="left", len=0.5 if panel == 1 else 0.36,
                y=1 if panel == 1 else 0.42, yanchor="top")


def screen_figure(result: Any) -> go.Figure:
    """A :class:`~circuits.beyond.screen.result.ScreenResult`: screen vs exact at END (when audited), and the screen's
    estimates by layer and offset from END (the strongest head of each layer, and each MLP)."""
    heads, mlps = result.head_effects, result.mlp_effects
    name, sign, _ = metric_info(result.metric)
    L, H, K = heads.shape
    k_show = min(K, 12)
    flat = (heads * sign).nan_to_num(-np.inf)
    best = flat.argmax(1)  # [layer, offset]
    head_best = heads.gather(1, best[:, None]).squeeze(1)
    panels = [("strongest head per layer", head_best[:, :k_show], best[:, :k_show]), ("MLP, own scale", mlps[:, :k_show], None)]
    cols = 3 if result.exact_end else 2
    titles = [p[0] + " (screen)" for p in panels] + (["screen vs exact at END"] if cols == 3 else [])
    fig = make_subplots(rows=1, cols=cols, subplot_titles=titles, horizontal_spacing=0.08)
    for c, (_, z, which) in enumerate(panels, 1):
        zz = _arr(z)
        m = float(np.nanmax(np.abs(zz))) if zz.size else 1.0
        text = [[f"head {int(which[l, k])}" for k in range(zz.shape[1])] for l in range(L)] if which is not None else None
        fig.add_trace(go.Heatmap(z=zz, x=[f"END-{k}" if k else "END" for k in range(zz.shape[1])], y=list(range(L)),
                                 colorscale=importance_scale(sign), zmid=0, zmin=-m or -1, zmax=m or 1,
                                 text=text, colorbar=_own_bar(c, name, sign, x=1.0),
                                 hovertemplate="layer %{y}, %{x}<br>" + ("%{text}<br>" if text else "") +
                                 name + " estimate %{z:.4g}<extra></extra>"), 1, c)
        fig.update_yaxes(autorange="reversed", title_text="layer" if c == 1 else None, dtick=1 if L <= 40 else 4,
                         row=1, col=c)
    if cols == 3:
        ex = result.exact_end
        labels = [f"{l}.{h}" for l in range(L) for h in range(H)] + [f"MLP{l}" for l in range(L)]
        kinds = ["head"] * (L * H) + ["mlp"] * L
        sc = screen_scatter(_arr(heads[..., 0]).ravel().tolist() + _arr(mlps[:, 0]).tolist(),
                            _arr(ex["heads"]).ravel().tolist() + _arr(ex["mlps"]).tolist(), labels, kinds, "", result.metric)
        for tr in sc.data:
            fig.add_trace(tr, 1, 3)
        fig.update_xaxes(title_text="screen", row=1, col=3)
        fig.update_yaxes(title_text="exact", row=1, col=3)
    sp = (result.audit or {}).get("spearman_end")
    title = (f"Attribution screen ({result.mode}, {result.metric})" +
             (f"; Spearman with the exact END engine {sp:.3f}" if sp is not None else ""))
    # The legend goes under the plots and the colour bar to the right of them, so neither covers the other.
    fig.update_layout(title=dict(text=wrap(title, 110)), height=max(480, 18 * L + 220), margin=dict(t=90, r=140, b=110),
                      legend=dict(orientation="h", x=0, xanchor="left", y=-0.12, yanchor="top"))
    return fig


def flow_figure(heads: Any, mlps: Any, tokens: Sequence[str], roles: dict[str, Sequence[int]], title: str,
                metric: Any = DEFAULT_METRIC, head_index: Any = None, sign: int | None = None,
                positions: Sequence[int] | None = None, x_labels: Sequence[str] | None = None,
                notes: Sequence[str] | None = None) -> go.Figure:
    """The information flow of Stolfo et al. (2023): activation-patching effect by layer (rows) and position
    (columns, the prompt's tokens up to END), for attention (the strongest head of each layer) and for the MLPs;
    the operand and operator positions (from the template roles, indices into ``tokens``) are marked. ``positions``:
    each column's position in the prompt, its label's number (``29:␣``, as the attention views number tokens; default
    the column's index). ``x_labels``: the columns' names instead (the view aligned by token role: ``operator``,
    ``B+1``); ``notes``: a line per column for the hover (how many pairs it averages)."""
    name, sign, _ = metric_info(metric, sign)
    fig = make_subplots(rows=1, cols=2, subplot_titles=("attention (strongest head per layer)", "MLP (own scale, hover)"),
                        horizontal_spacing=0.08)
    n_layers = _arr(mlps).shape[0]
    x = list(x_labels) if x_labels is not None else [
        f"{i if positions is None else positions[i]}:{visible_token(t)}" for i, t in enumerate(tokens)]
    for c, z in enumerate((heads, mlps), 1):
        zz = _arr(z)
        m = float(np.nanmax(np.abs(zz))) or 1.0
        text = ([[f"head {int(head_index[l][k])}" for k in range(zz.shape[1])] for l in range(n_layers)]
                if c == 1 and head_index is not None else None)
        if notes is not None:  # a line per column (how many pairs it averages)
            text = [[(f"{text[l][k]}<br>" if text else "") + notes[k] for k in range(zz.shape[1])]
                    for l in range(n_layers)]
        fig.add_trace(go.Heatmap(z=zz, x=x, y=list(range(n_layers)), colorscale=importance_scale(sign), zmid=0,
                                 zmin=-m, zmax=m, text=text, colorbar=_own_bar(c, name, sign, x=1.01),
                                 hovertemplate="layer %{y}, token %{x}<br>" + ("%{text}<br>" if text else "") +
                                 name + " %{z:.4g}<extra></extra>"), 1, c)
        for role, positions in roles.items():
            for p in positions:
                if 0 <= p < len(tokens):
                    fig.add_vline(x=p, line={"color": ROLE_COLORS.get(role, "black"), "width": 1, "dash": "dot"}, row=1, col=c)
        fig.update_yaxes(autorange="reversed", title_text="layer" if c == 1 else None,
                         dtick=1 if n_layers <= 40 else 4, row=1, col=c)
    for role, color in ROLE_COLORS.items():
        fig.add_trace(go.Scatter(x=[None], y=[None], mode="lines", line={"color": color, "dash": "dot"}, name=f"{role} position"))
    width = max(900, 50 * len(tokens) + 300)  # 18 role columns fit a 1280 px window
    wrapped = wrap(title, width // 9)
    lines = wrapped.count("<br>") + 1  # room for every line of the title above the subplot titles
    fig.update_layout(title=dict(text=wrapped), height=max(480, 18 * n_layers + 260) + 36 * max(0, lines - 2),
                      width=width, margin=dict(t=64 + 36 * lines, r=140, b=160), xaxis_tickangle=-60,
                      xaxis2_tickangle=-60,
                      legend=dict(orientation="h", x=0, xanchor="left", y=-0.25, yanchor="top"))
    return fig


def visible_token(t: str) -> str:
    """A token as a label: spaces as '␣', newlines as '↵', tabs as '⇥' (a space-only token is not blank)."""
    return str(t).replace(" ", "␣").replace("\n", "↵").replace("\t", "⇥")


def neuron_share_figure(curves: dict[str, Sequence[float]], title: str) -> go.Figure:
    """For each MLP, the cumulative share of its neurons' important-direction effect against the share of neurons
    taken, largest first (Nikankin et al.: ~1% of neurons carry most of it)."""
    fig = go.Figure()
    for i, (name, cum) in enumerate(curves.items()):
        c = _arr(cum)
        fig.add_trace(go.Scatter(x=np.arange(1, len(c) + 1) / len(c), y=c, mode="lines", name=name,
                                 line={"color": category(i)}))
    fig.add_vline(x=0.01, line={"color": "gray", "dash": "dot"})
    fig.update_layout(title=title, xaxis_title="share of the layer's neurons (largest effects first)", xaxis_type="log",
                      yaxis_title="share of the summed neuron effect")
    return fig


def neuron_knockout_figure(shares: Sequence[float], top: Sequence[float], random: Sequence[float], whole: float,
                           none: float, title: str) -> go.Figure:
    """Accuracy after mean-ablating the top share of neurons of the key MLPs, as many random neurons, and the
    whole MLPs (as the paper's Figure 3 compares key and random heads)."""
    x = [100 * s for s in shares]
    fig = go.Figure([important_trace(go.Scatter(x=x, y=list(top), mode="lines+markers", name="top neurons by effect",
                                                line={"color": IMPORTANT})),
                     go.Scatter(x=x, y=list(random), mode="lines+markers", name="random neurons", line={"color": RANDOM})])
    fig.add_hline(y=whole, line={"color": "black", "dash": "dash"}, annotation_text="whole MLPs knocked out",
                  annotation_position="bottom left")  # opposite ends: apart when the two accuracies are close
    fig.add_hline(y=none, line={"color": BEFORE, "dash": "dot"}, annotation_text="nothing knocked out",
                  annotation_position="top right")
    fig.update_layout(title=title, xaxis_title="% of each key MLP's neurons knocked out", yaxis_title="accuracy", xaxis_type="log")
    return fig


_PORT = {"q": 0.22, "k": 0.0, "v": -0.22}  # where a head receiver's query, key and value inputs enter its node


def _node_xy(name: str, last_layer: float, mid: float, first_layer: float = 0.0) -> tuple[float, float]:
    """A node's place: x = its layer (the input one before the first layer drawn, the logits one past the last), y =
    its head index, the layer's MLP one row below head 0 (``MLP19`` at (19, -1.5), ``20.8`` at (20, 8))."""
    if name == "input":
        return first_layer - 1.0, mid
    if name == "logits":
        return last_layer + 1.0, mid
    if name.startswith("MLP"):
        return float(name[3:]), -1.5
    layer, head = name.split(".")[:2]
    return float(layer), float(head)


def _curve(x0: float, y0: float, x1: float, y1: float, bend: float, n: int = 24) -> tuple[list[float], list[float]]:
    """A quadratic Bezier from (x0, y0) to (x1, y1) whose middle lifts ``bend`` off the straight line: edges along one
    row (MLP to MLP) or between the same two layers arc apart instead of lying on each other."""
    dx, dy = x1 - x0, y1 - y0
    length = max((dx * dx + dy * dy) ** 0.5, 1e-9)
    cx, cy = (x0 + x1) / 2 - bend * dy / length, (y0 + y1) / 2 + bend * dx / length
    t = np.linspace(0, 1, n)
    return (list((1 - t) ** 2 * x0 + 2 * (1 - t) * t * cx + t * t * x1),
            list((1 - t) ** 2 * y0 + 2 * (1 - t) * t * cy + t * t * y1))


def circuit_graph(edges: Sequence[tuple], title: str, metric: Any = DEFAULT_METRIC, sign: int | None = None,
                  n_pairs: int | None = None) -> go.Figure:
    """A circuit as a layered graph: x = layer (the input on the left, the logits on the right), the heads of a layer
    stacked by head index and its MLP below them; receivers (edges measured into them) are diamonds, senders circles.

    ``edges``: ``(sender, receiver, value[, (low, high)])``; a receiver is a component, a head's input
    (``20.8.q``: drawn into the q, k or v port of the head's node) or ``"logits"`` (a receiver's own effect). Each edge
    is its own trace named ``"sender → receiver"``; its colour is ``value`` on the metric's diverging scale (red =
    important, the colour bar at the right, symmetric about 0) and its width grows with ``|value|`` (the width key in
    the legend); hover anywhere on an edge for its value and interval."""
    name, sign, _ = metric_info(metric, sign)
    edges = [(str(e[0]), str(e[1]), float(e[2]), e[3] if len(e) > 3 else None) for e in edges]
    comp = lambda n: n if n == "logits" else (n.rsplit(".", 1)[0] if n.count(".") == 2 else n)  # noqa: E731
    receivers = {comp(e[1]) for e in edges if e[1] != "logits"}
    nodes = list(dict.fromkeys([comp(e[0]) for e in edges] + [comp(e[1]) for e in edges]))
    layers = [_node_xy(n, 0, 0)[0] for n in nodes if n not in ("logits", "input")]
    heads_y = [_node_xy(n, 0, 0)[1] for n in nodes if n not in ("logits", "input")]
    first, last, mid = min(layers, default=0.0), max(layers, default=0.0), (max(heads_y, default=0.0) - 1.5) / 2
    pos = {n: _node_xy(n, last, mid, first) for n in nodes + ["input"]}
    peak = max((abs(e[2]) for e in edges if e[2] == e[2]), default=1.0) or 1.0
    scale = plotly.colors.get_colorscale(importance_scale(sign))
    fig = go.Figure()
    pair_count: dict[tuple[str, str], int] = {}
    for a, b, v, ci in sorted(edges, key=lambda e: abs(e[2]) if e[2] == e[2] else 0):  # strongest drawn on top
        x0, y0 = pos[a]
        target = comp(b)
        x1, y1 = pos[target]
        channel = b.rsplit(".", 1)[1] if b != target else ""
        y1 += _PORT.get(channel, 0.0)
        k = pair_count[(a, target)] = pair_count.get((a, target), 0) + 1
        side = -1 if y0 == y1 == -1.5 else (1 if k % 2 else -1)  # along the MLP row: arcs below it, nested by length
        span = abs(x1 - x0) + 0.4 * abs(y1 - y0) * (x0 == x1)  # a head into its own layer's MLP: arcs nest by height
        xs, ys = _curve(x0, y0, x1, y1, side * (0.25 * span ** 0.75 + 0.15 * (k // 2)))
        what = {"q": "its query", "k": "its key", "v": "its value"}.get(channel, "the MLP's input" if b.startswith("MLP") else "")
        text = (f"{a} → {b}<br>{name} {v:+.4g}" + (f"<br>95% interval [{ci[0]:+.4g}, {ci[1]:+.4g}]"
                                                   + (f" over {n_pairs} pairs" if n_pairs else "") if ci else "")
                + (f"<br>into {target}'s {what.removeprefix('its ')}" if channel else "")
                + ("<br>the receiver's own effect on the answer (path patching to the logits)" if b == "logits" else ""))
        frac = 0.5 + 0.5 * max(-1.0, min(1.0, v / peak)) if v == v else 0.5
        width = 1 + 7 * abs(v) / peak if v == v else 1
        fig.add_trace(go.Scatter(x=xs, y=ys, mode="lines", showlegend=False, hoverinfo="skip",  # a grey rim: an edge
                                 line={"width": width + 1.5, "color": "#8c8c8c"}))  # near 0 (white) stays visible
        fig.add_trace(go.Scatter(x=xs, y=ys, mode="lines", name=f"{a} → {b}", showlegend=False, text=[text] * len(xs),
                                 hovertemplate="%{text}<extra></extra>", hoveron="points",
                                 line={"width": width, "color": plotly.colors.sample_colorscale(scale, [frac])[0]}))
    for w in (1.0, 0.5, 0.1):  # the width key
        fig.add_trace(go.Scatter(x=[None], y=[None], mode="lines", name=f"|{name}| = {w * peak:.3g}",
                                 line={"width": 1 + 7 * w, "color": "#555"}, legendgroup="width",
                                 legendgrouptitle_text="edge width" if w == 1.0 else None))
    fig.add_trace(go.Scatter(x=[None], y=[None], mode="markers", showlegend=False, hoverinfo="skip",
                             marker={"color": [-peak, peak], "cmin": -peak, "cmax": peak, "colorscale": scale,
                                     "showscale": True, "colorbar": {"title": {"text": colorbar_title(name, sign), "side": "top"},
                                                                     "thickness": 12, "x": 1.02, "len": 0.6, "y": 0.3,
                                                                     "yanchor": "middle"}}))
    kinds = [("receiver (edges measured into it;<br>a head's q, k, v enter high, mid, low)", [n for n in nodes if n in receivers], "diamond", 18, 3),
             ("sender", [n for n in nodes if n not in receivers and n != "logits"], "circle", 12, 1),
             ("input / logits", ["input", "logits"], "square", 14, 1)]
    for label, group, symbol, size, outline in kinds:
        boxed = symbol == "diamond"  # a receiver's name on a white box above every edge: the edges it sends to the
        for n in group if boxed else ():  # logits leave under its name, which they covered
            fig.add_annotation(x=pos[n][0], y=pos[n][1], yshift=17, text=n, showarrow=False, font={"size": 10},
                               bgcolor="rgba(255,255,255,0.9)", borderpad=1)
        fig.add_trace(go.Scatter(x=[pos[n][0] for n in group], y=[pos[n][1] for n in group],
                                 mode="markers" if boxed else "markers+text",
                                 name=label, text=group, textposition="top center", legendgroup="nodes",
                                 textfont={"size": 10},
                                 hovertext=[("the token embeddings (not patched as a sender here)" if n == "input" else n)
                                            for n in group], hovertemplate="%{hovertext}<extra></extra>",
                                 marker={"symbol": symbol, "size": size, "color": "#f2f2f2",
                                         "line": {"color": "#222", "width": outline}}))
    top_head = int(max(heads_y, default=0.0))
    ticks = [first - 1] + list(range(int(first), int(last) + 1)) + [last + 1]
    fig.update_layout(title=wrap(title + f" ({name}; {LEGEND}, blue: the other way)", 110), height=620,
                      plot_bgcolor="white",
                      xaxis={"title": "layer", "zeroline": False, "range": [first - 1.6, last + 1.6], "tickvals": ticks,
                             "ticktext": ["input"] + [str(t) for t in ticks[1:-1]] + ["logits"], "gridcolor": "#eee"},
                      yaxis={"title": "head", "zeroline": False, "tickvals": [-1.5] + list(range(top_head + 1)),
                             "ticktext": ["MLP"] + [f"h{h}" for h in range(top_head + 1)], "gridcolor": "#eee"},
                      legend={"x": 1.02, "y": 1, "yanchor": "top"}, margin={"r": 200})
    return fig


def ablation_panels(curves: dict[str, dict], title: str = "Figure 3 under each ablation kind") -> go.Figure:
    """Figure 3's accuracy curves side by side, one panel per ablation kind (mean, zero, resample)."""
    kinds = list(curves)
    fig = make_subplots(rows=1, cols=len(kinds), subplot_titles=kinds, shared_yaxes=True)
    for i, k in enumerate(kinds):
        c = curves[k]
        sub = knockout_figure(c["ks"], c["effect_accuracy"], c["random_accuracy"], "accuracy", "")
        for tr in sub.data:
            tr.showlegend = i == 0
            tr.legendgroup = tr.name
            fig.add_trace(tr, 1, i + 1)
    fig.update_xaxes(title_text="k heads knocked out")
    fig.update_yaxes(title_text="accuracy", row=1, col=1)
    fig.update_yaxes(range=[0, _rate_top(*[v for c in curves.values() for v in (c["effect_accuracy"],
                                                                                c["random_accuracy"])])])
    fig.update_layout(title=title)
    return fig


def jaccard_panels(panels: dict[str, tuple[Sequence[str], Any]], title: str) -> go.Figure:
    """Jaccard overlap of key-head sets, one matrix per panel (e.g. per operation: across seeds or template forms)."""
    fig = make_subplots(rows=1, cols=len(panels), subplot_titles=list(panels))
    for i, (labels, matrix) in enumerate(panels.values()):
        z = _arr(matrix)
        fig.add_trace(go.Heatmap(z=z, x=list(labels), y=list(labels), zmin=0, zmax=1, colorscale="Blues",
                                 text=np.round(z, 2).tolist(), texttemplate="%{text}", showscale=i == 0), 1, i + 1)
    fig.update_layout(title=title)
    return fig


def _rgba(hex_color: str, alpha: float) -> str:
    r, g, b = (int(hex_color[i:i + 2], 16) for i in (1, 3, 5))
    return f"rgba({r},{g},{b},{alpha})"


def faithfulness_figure(sizes: Float[Tensor, " size"], f: dict[str, Float[Tensor, " size"]],
                        low: dict[str, Float[Tensor, " size"]], high: dict[str, Float[Tensor, " size"]],
                        title: str, colors: dict[str, str] | None = None, dotted: Sequence[str] = ()) -> go.Figure:
    """Faithfulness f against circuit size (``sizes``: fractions kept, MIB's sizes, drawn in percent) in two views:
    left, the axis CPR and CMD are computed on -- linear, 0 to 100%, the curve closed at 100% where f = 1 by
    construction (dashed, as :func:`circuits.patching.circuit_curves.curve.area_axis` closes it) and the area under
    each curve (its CPR) shaded; right, the same curves on a log axis, where the small circuits are told apart. One
    line per ranking, its bootstrap interval as a band (``low``/``high``, where given), and the references f = 1
    (the full model) and f = 0 (everything ablated). ``colors``: one colour per ranking (the engine registry's, which
    the caller passes); others take the next of a spare palette. ``dotted``: the curves drawn dotted (the faithfulness
    job's signed rankings, beside their absolute ones in the same colour)."""
    x = 100 * _arr(sizes)
    order = np.array(sorted(range(len(x)), key=lambda i: x[i]), dtype=int)  # the size axis, not a ranking
    x = x[order]
    closed = not len(x) or x[-1] < 100.0
    fig = make_subplots(rows=1, cols=2, column_widths=[0.58, 0.42], horizontal_spacing=0.08, subplot_titles=(
        "linear, to 100%: what CPR and CMD integrate (area under f shaded)", "log: the small circuits"))
    used = set((colors or {}).values())  # a ranking the registry has no colour for: a category colour not taken, never
    palette = iter([c for c in CATEGORICAL if c not in used and c != RANDOM])  # red nor the random heads' grey
    for name, y in f.items():
        color = (colors or {}).get(name) or next(palette, "#333333")
        y = _arr(y)[order]
        for col in (1, 2):
            if name in low and name in high:
                fig.add_trace(go.Scatter(x=x, y=_arr(high[name])[order], mode="lines", line={"width": 0},
                                         showlegend=False, legendgroup=name, hoverinfo="skip", name=f"{name} high"),
                              1, col)
                fig.add_trace(go.Scatter(x=x, y=_arr(low[name])[order], mode="lines", line={"width": 0},
                                         fill="tonexty", fillcolor=_rgba(color, 0.18), showlegend=False,
                                         legendgroup=name, hoverinfo="skip", name=f"{name} low"), 1, col)
            if col == 1:  # the area CPR measures, over the axis it is measured on
                xs, ys = (np.append(x, 100.0), np.append(y, 1.0)) if closed else (x, y)
                fig.add_trace(go.Scatter(x=xs, y=ys, mode="lines", line={"width": 0}, fill="tozeroy",
                                         fillcolor=_rgba(color, 0.10), showlegend=False, legendgroup=name,
                                         hoverinfo="skip", name=f"{name} area"), 1, 1)
                if closed and len(x):
                    fig.add_trace(go.Scatter(x=[x[-1], 100.0], y=[y[-1], 1.0], mode="lines",
                                             line={"color": color, "dash": "dash"}, showlegend=False,
                                             legendgroup=name, name=f"{name} closed at 100%",
                                             hovertemplate=name + ": closed at 100%, f = 1 by construction"
                                                                  "<extra></extra>"), 1, 1)
            fig.add_trace(go.Scatter(x=x, y=y, mode="lines+markers", name=name, legendgroup=name,
                                     line={"color": color, **({"dash": "dot"} if name in dotted else {})},
                                     showlegend=col == 1,
                                     hovertemplate=name + "<br>%{x:g}% kept<br>f = %{y:.3f}<extra></extra>"), 1, col)
    for col in (1, 2):  # the references, named once (on the left)
        named = col == 1
        fig.add_hline(y=1, line={"color": "black", "dash": "dash", "width": 1}, row=1, col=col,
                      **({"annotation_text": "f = 1: the full model", "annotation_position": "top left"} if named else {}))
        fig.add_hline(y=0, line={"color": "gray", "dash": "dot", "width": 1}, row=1, col=col,
                      **({"annotation_text": "f = 0: all ablated", "annotation_position": "bottom left"} if named else {}))
    fig.update_xaxes(range=[0, 100], ticksuffix="%", title="circuit size (% kept, linear)", row=1, col=1)
    fig.update_xaxes(type="log", tickvals=list(x), ticktext=[f"{v:g}%" for v in x], title="circuit size (% kept, log)",
                     row=1, col=2)
    ys = np.concatenate([_arr(y) for y in f.values()] + [np.ones(1)]) if f else np.zeros(1)
    ys = ys[np.isfinite(ys)] if np.isfinite(ys).any() else np.zeros(1)
    # the curves decide the range (a band as wide as a few pairs allow is clipped, not allowed to flatten them)
    fig.update_yaxes(range=[min(-0.2, float(ys.min()) - 0.2), max(1.2, float(ys.max()) + 0.2)])
    fig.update_yaxes(title="faithfulness f = (m(C) - m(empty)) / (m(N) - m(empty))", row=1, col=1)
    wrapped = wrap(title, 110)  # room for every line of the title above the subplot titles
    lines = wrapped.count("<br>") + 1  # plotly puts the first line's baseline mid-margin; the others hang below it
    fig.update_layout(title=wrapped, legend_title="ranking (band: bootstrap interval)", height=520 + 36 * (lines - 2),
                      margin=dict(t=44 + 36 * lines))
    return fig


def faithfulness_table(rows: Sequence[dict[str, Any]], title: str) -> go.Figure:
    """CPR (area under f, higher is better), CMD (area between f and 1, lower is better) with their intervals, and
    the seconds of each ranking and curve, one row per ranking and setting."""
    def ci(v: Any) -> str:
        return f" [{v[0]:.3f}, {v[1]:.3f}]" if v else ""

    cols = [[r["ranking"] for r in rows], [r["setting"] for r in rows],
            [f"{r['cpr']:.3f}{ci(r.get('cpr_ci'))}" for r in rows], [f"{r['cmd']:.3f}{ci(r.get('cmd_ci'))}" for r in rows],
            [f"{r['ranking_seconds']:.1f}" for r in rows], [f"{r['curve_seconds']:.1f}" for r in rows]]
    fig = go.Figure(go.Table(header={"values": ["ranking", "circuit", "CPR (higher better)", "CMD (lower better)",
                                                "ranking s", "curve s"]}, cells={"values": cols}))
    # room for the title, the header and every row (at 120 + 28 per row the default margins left the header alone)
    fig.update_layout(title=wrap(title, 110), height=150 + 32 * (len(rows) + 1), margin=dict(t=70, b=20))
    return fig
