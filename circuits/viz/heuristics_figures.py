"""Figures of heuristic neurons (Nikankin et al., ICLR 2025): a neuron's activation over the operand grid beside the
pattern of its fitted rule, and the class knockout's drops with their intervals. Each takes tensors and labels and
returns a ``go.Figure``; nothing global is changed."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from circuits.viz import colours

# drop on covered prompts (the class, the random draws), on uncovered ones: the class's own in a category colour, random neurons grey
KNOCKOUT_BARS = (("covered_drop", "class knocked out, covered prompts", colours.category(3)),
                 ("uncovered_drop", "class knocked out, uncovered prompts", "#c5b0d5"),
                 ("random_covered_drop", "random neurons, covered prompts", colours.RANDOM),
                 ("random_uncovered_drop", "random neurons, uncovered prompts", "#c7c7c7"))


def grid_heatmaps(acts: Sequence[Any], rules: Sequence[Any], titles: Sequence[str], values: Sequence[int],
                  operation_symbol: str = "+") -> go.Figure:
    """One row per neuron: its activation over the operand grid (``acts[i]``: ``[a, b]``, NaN where no prompt; a
    diverging scale centred at 0, its own colour bar) beside its rule's pattern (``rules[i]``: ``[a, b]`` booleans,
    coloured where the rule holds). ``titles[i]`` names the neuron and its rule."""
    n = len(acts)
    if n == 0:
        return go.Figure().update_layout(title="No classified neurons to draw")
    subtitles = []
    for t in titles:
        subtitles += [f"{t}: activation", "where its rule holds"]
    fig = make_subplots(rows=n, cols=2, subplot_titles=subtitles, horizontal_spacing=0.16,
                        vertical_spacing=min(0.3 / max(n - 1, 1), 0.08) if n > 1 else 0.1)
    v = [str(x) for x in values]
    for i, (act, rule) in enumerate(zip(acts, rules)):
        a = np.asarray(act, dtype=float)
        lim = float(np.nanmax(np.abs(a))) if np.isfinite(a).any() else 1.0
        bar_y = 1 - (i + 0.5) / n
        fig.add_trace(go.Heatmap(z=a, x=v, y=v, colorscale=colours.SIGNED, zmid=0, zmin=-lim, zmax=lim,
                                 colorbar={"title": "activation<br>(hook_post)", "len": 0.9 / n, "y": bar_y, "x": 0.43, "thickness": 12},
                                 hovertemplate="a=%{y}, b=%{x}<br>activation %{z:.3f}<extra></extra>"), i + 1, 1)
        r = np.asarray(rule, dtype=float)
        fig.add_trace(go.Heatmap(z=r, x=v, y=v, colorscale=[[0, "#f0f0f0"], [0.5, "#f0f0f0"], [0.5, colours.category(0)], [1, colours.category(0)]], zmin=0, zmax=1,
                                 colorbar={"title": "rule", "tickvals": [0, 1], "ticktext": ["fails", "holds"],
                                           "len": 0.9 / n, "y": bar_y, "thickness": 12},
                                 hovertemplate="a=%{y}, b=%{x}<br>rule holds: %{z}<extra></extra>"), i + 1, 2)
        for c in (1, 2):
            fig.update_xaxes(title_text="b", row=i + 1, col=c, dtick=max(1, len(v) // 10))
            fig.update_yaxes(title_text="a", row=i + 1, col=c, autorange="reversed", dtick=max(1, len(v) // 10))
    fig.update_layout(title=f"Neuron activation over the operand grid (a {operation_symbol} b, at END) beside its "
                            "fitted heuristic", height=max(420, 330 * n), width=1100)
    return fig



def _interval_bars(groups: list[Mapping[str, Any]], labels: list[str], bars: tuple, value: str) -> go.Figure:
    """Grouped bars, one trace per ``(key, label, colour)`` of ``bars``: each group's ``[key]["mean"]`` with its
    ``low``-``high`` interval as error bars; ``value`` formats the hover's number."""
    fig = go.Figure()
    for key, label, color in bars:
        mean = [g[key]["mean"] for g in groups]
        fig.add_trace(go.Bar(x=labels, y=mean, name=label, marker_color=color,
                             error_y={"type": "data", "array": [g[key]["high"] - m for g, m in zip(groups, mean)],
                                      "arrayminus": [m - g[key]["low"] for g, m in zip(groups, mean)],
                                      "visible": True},
                             hovertemplate="%{x}<br>" + label + ": " + value + "<extra></extra>"))
    return fig

def knockout_bars(classes: Mapping[str, Mapping[str, Any]], metric: str) -> go.Figure:
    """Per class, the mean drop of the answer's probability when its neurons are knocked out, on the prompts its rule
    covers and on the rest, and for as many random neurons of the same MLPs, with 95% bootstrap intervals over
    prompts (drawn from 0: a drop is positive)."""
    names = list(classes)
    labels = [f"{n}<br>({classes[n]['n_neurons']} neurons)" for n in names]
    fig = _interval_bars([classes[n] for n in names], labels, KNOCKOUT_BARS, "%{y:.4f}")
    fig.add_hline(y=0, line={"color": "black", "width": 1})
    fig.update_layout(barmode="group", title="Knocking out one heuristic class: drop of the answer's probability "
                                             "(95% bootstrap intervals over prompts)",
                      yaxis_title=metric, xaxis_title="class (the neurons' shared rule)", height=520, width=1100,
                      xaxis={"tickangle": 0}, legend={"orientation": "h", "y": -0.3, "x": 0})
    return fig


# before, the prompt's associated neurons knocked out, as many random ones (Nikankin et al.'s Figure 8, as bars)
PROMPT_BARS = (("before", "nothing knocked out", colours.BEFORE),
               ("associated", "the prompt's associated heuristic neurons", colours.category(3)),
               ("random", "as many random neurons", colours.RANDOM))


def prompt_knockout_bars(table: Mapping[str, Mapping[str, Any]], ablation: str = "zero", prompts: str = "correct"
                         ) -> go.Figure:
    """Per limit (neurons per MLP), the accuracy before, with each prompt's associated heuristic neurons knocked out,
    and with as many random neurons, 95% bootstrap intervals over prompts; the axis is accuracy, 0 to 1."""
    limits = list(table)
    labels = [f"up to {k} per MLP<br>({table[k]['mean_ablated']:.1f} per prompt)" for k in limits]
    fig = _interval_bars([table[k] for k in limits], labels, PROMPT_BARS, "accuracy %{y:.3f}")
    n = next(iter(table.values()))["n_prompts"] if table else 0
    which = f"all {n} grid prompts" if prompts == "all" else f"the {n} grid prompts answered correctly"
    fig.update_layout(barmode="group", title=f"Knocking out each prompt's heuristic neurons (Nikankin et al.): accuracy "
                                             f"on {which}, {ablation} ablation (95% bootstrap intervals over prompts)",
                      yaxis={"title": "accuracy (top token = answer)", "range": [0, 1.05]},
                      xaxis_title="neurons knocked out per MLP (most associated first)", height=480, width=1100,
                      legend={"orientation": "h", "y": -0.3, "x": 0}, title_font_size=14)
    return fig
