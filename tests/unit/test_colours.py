"""Issue 40's colour rule, checked on every figure the tiny model's results draw: importance is a diverging scale whose
red end is important and every colour scale has a colour bar; categories (roles, rankings, arms) never take the
importance red, except the trace of the heads ranked important, which says so in its ``meta``; random heads are one
colour in knockout, transfer and the neuron knockout; the circuitsvis views carry a colour key."""

from __future__ import annotations

import colorsys

import plotly.colors
import plotly.graph_objects as go
import pytest
from result_cases import build_results

from circuits.viz import colours

# Issue 43 (Fourier and heuristic-neuron nulls) is being changed in another branch at the same time: its figures
# (circuits/viz/heuristics_figures.py, circuits/viz/number_figures.py) take the rule when that branch is merged.
PENDING: dict[str, str] = {}


def rgb(colour: str) -> tuple[float, float, float] | None:
    """A plotly colour as r, g, b in 0..1 (None for what is not one colour: a list, None, a transparent fill)."""
    if not isinstance(colour, str):
        return None
    c = colour.strip().lower()
    if c.startswith("rgba"):
        parts = [float(x) for x in c[c.index("(") + 1:-1].split(",")]
        return None if parts[3] < 0.15 else tuple(p / 255 for p in parts[:3])  # a faint band: its line says
    try:
        return tuple(v / 255 for v in plotly.colors.hex_to_rgb(plotly.colors.label_rgb(plotly.colors.unlabel_rgb(c))
                                                                if c.startswith("rgb") else _hex(c)))
    except (ValueError, KeyError):
        return None


CSS = {"crimson": "#dc143c", "red": "#ff0000", "gray": "#808080", "grey": "#808080", "green": "#008000",
       "black": "#000000", "white": "#ffffff", "darkorange": "#ff8c00", "royalblue": "#4169e1", "seagreen": "#2e8b57",
       "purple": "#800080"}  # the CSS names the figures use


def _hex(c: str) -> str:
    if c.startswith("#"):
        return c if len(c) == 7 else "#" + "".join(x * 2 for x in c[1:4])
    if c not in CSS:
        raise AssertionError(f"a colour this test cannot read: {c!r} (add it to CSS)")
    return CSS[c]


def is_red(colour: str) -> bool:
    """Within 15 degrees of red, saturated and not dark: the importance red (crimson, #d62728, plotly's #EF553B)."""
    c = rgb(colour)
    if c is None:
        return False
    h, s, v = colorsys.rgb_to_hsv(*c)
    return min(h, 1 - h) * 360 <= 15 and s >= 0.5 and v >= 0.4


def trace_colours(tr) -> list[str]:
    """The categorical colours a trace is drawn in (its line, marker, fill, error bars)."""
    out = []
    for path in (("line", "color"), ("marker", "color"), ("fillcolor",), ("error_y", "color")):
        v = tr
        for p in path:
            v = getattr(v, p, None)
            if v is None:
                break
        if isinstance(v, str):
            out.append(v)
    return out


def scale_key(tr) -> tuple:
    """A colour scale and its range: traces with the same key share one colour bar."""
    if isinstance(tr, go.Heatmap):
        return str(tr.colorscale), tr.zmin, tr.zmax
    return str(tr.marker.colorscale), tr.marker.cmin, tr.marker.cmax


def _scale(cs) -> tuple:
    """A colour scale as ((stop, colour), ...), whichever way plotly holds it."""
    return tuple((round(float(a), 6), str(b).replace(" ", "")) for a, b in cs)


def _bar(tr):
    return tr.colorbar if isinstance(tr, go.Heatmap) else tr.marker.colorbar


def _shows(tr) -> bool:
    return tr.showscale is not False if isinstance(tr, go.Heatmap) else bool(tr.marker.showscale)


def check(fig: go.Figure, what: str) -> list[str]:
    """What in ``fig`` breaks the rule."""
    bad = []
    default = iter(fig.layout.colorway or plotly.io.templates[plotly.io.templates.default].layout.colorway or ())
    scaled = [tr for tr in fig.data if isinstance(tr, go.Heatmap) or (getattr(tr, "marker", None) is not None
                                                                      and tr.marker.colorscale is not None)]
    shown = {scale_key(tr) for tr in scaled if _shows(tr)}
    reds = {_scale(plotly.colors.get_colorscale(s)) for s in ("RdBu", "RdBu_r", "Reds")}
    for tr in fig.data:
        if tr in scaled:
            if scale_key(tr) not in shown:
                bad.append(f"{what}: a colour scale without a colour bar ({tr.name or type(tr).__name__})")
            cs = tr.colorscale if isinstance(tr, go.Heatmap) else tr.marker.colorscale
            titles = [str(_bar(t).title.text) for t in scaled if scale_key(t) == scale_key(tr) and _shows(t)]
            if _scale(cs) in reds and not any("important" in t for t in titles):
                bad.append(f"{what}: a red scale whose colour bar does not say red is important ({titles})")
            continue
        if isinstance(tr, go.Table):
            continue
        if getattr(tr, "line", None) is not None and tr.line.width == 0 and not tr.fill:
            continue  # an invisible edge of a band (the band is the next trace's fill)
        cols = trace_colours(tr)
        if not cols and isinstance(tr, (go.Bar, go.Scatter)) and tr.x is not None and any(
                x is not None for x in tr.x):
            cols = [next(default, "#000000")]  # plotly's colourway picks it
        for c in cols:
            if is_red(c) and tr.meta != colours.IMPORTANT_META:
                bad.append(f"{what}: trace {tr.name!r} is drawn in the importance red {c}")
    return bad


@pytest.fixture(scope="module")
def figures(tiny_llama, tmp_path_factory):
    results = build_results(tiny_llama, tmp_path_factory.mktemp("jobs"))
    out = {}
    for kind, r in results.items():
        if kind in PENDING or not hasattr(r, "figure"):
            continue
        figs = r.figure()
        for i, f in enumerate(figs if isinstance(figs, (list, tuple)) else [figs]):
            out[f"{kind}[{i}]"] = f
    from circuits.viz.figures import top_tokens_figure

    out["lens 6c"] = top_tokens_figure(results["lens"].top_tokens, "6c")
    import torch

    from circuits.viz.head_circuits import ov_figure

    out["OV circuits"] = ov_figure(torch.randn(2, 3, 4), ["1.0", "2.1"], ["1", "2", "3"], ["1", "2", "3", "4"], "OV")
    return out, results


def test_the_checker_sees_a_red_category_and_a_missing_colour_bar():
    fig = go.Figure([go.Bar(x=[1], y=[1], name="operator", marker_color="crimson"),
                     go.Heatmap(z=[[0, 1]], colorscale="Viridis", showscale=False)])
    assert len(check(fig, "toy")) == 2
    fig = go.Figure([go.Bar(x=[1], y=[1]), go.Bar(x=[1], y=[2])])  # plotly's default colours: the second is red
    assert any("importance red" in b for b in check(fig, "toy"))
    fig = go.Figure([go.Heatmap(z=[[0, 1]], colorscale="RdBu", colorbar={"title": {"text": "cosine"}})])
    assert any("does not say red is important" in b for b in check(fig, "toy"))
    assert not is_red(colours.ROLE_COLOURS["operator"]) and is_red(colours.IMPORTANT)
    assert not any(is_red(c) for c in colours.CATEGORICAL) and not is_red(colours.RANDOM)


def test_every_figure_keeps_the_colour_rule(figures):
    figs, _ = figures
    assert len(figs) >= 15
    bad = [b for what, fig in figs.items() for b in check(fig, what)]
    assert not bad, "\n".join(bad)


def test_random_heads_are_one_colour_in_every_figure(figures):
    figs, _ = figures
    seen = {}
    for what, fig in figs.items():
        for tr in fig.data:
            name = tr.name or ""
            if name in ("random heads knocked out", "random neurons") or name.startswith("random heads (mean"):
                seen[f"{what}: {tr.name}"] = (tr.marker.color if isinstance(tr, go.Bar) else tr.line.color)
    kinds = {k.split("[")[0] for k in seen}
    assert {"knockout", "transfer", "neurons"} <= kinds, seen
    assert set(seen.values()) == {colours.RANDOM}, seen


def test_the_attention_views_carry_a_colour_key(figures):
    _, results = figures
    page = results["attention-views"].page
    assert page.count("class='colour-key'") == 1 and "attention weight" in page


def test_the_circuitsvis_bundle_colours_heads_from_the_palette():
    """circuitsvis paints head i of n at hue 360 i / n (head 0 red) and takes no colour argument: the bundle the pages
    load has that function replaced (:func:`circuits.viz.page.head_colours`), run here on circuitsvis's own text; an
    attention view's cells get the toolkit's blues, not circuitsvis's red/blue defaults."""
    import json
    import re

    from circuits.viz.page import Page, _HEAD_HUE, circuitsvis_bundle, head_colours

    original = 'function Zv(e,t,r="100%"){return`hsla(${Math.round(e/t*360)}, 70%, 50%,  ${r})`}function eJ(){}'
    patched = head_colours(original)
    assert "hsla(" not in patched and patched.endswith("function eJ(){}")
    rgb = json.loads(re.search(r"var c=(\[.*?\])", patched).group(1))
    assert rgb == [",".join(str(int(c[k:k + 2], 16)) for k in (1, 3, 5)) for c in colours.HEAD_COLOURS]
    assert colours.IMPORTANT not in colours.HEAD_COLOURS and "#d62728" not in colours.HEAD_COLOURS
    bundle = circuitsvis_bundle()
    assert _HEAD_HUE.search(bundle) is None and 'var c=["31,119,180"' in bundle  # the installed one, replaced
    with pytest.warns(UserWarning, match="head colour function was not found"):
        assert head_colours("function other(){}") == "function other(){}"
    view = Page("t").view("AttentionHeads", {"attention": [[[1.0]]], "tokens": ["x"]})
    assert f'"positiveColor": "{colours.ATTENTION_HIGH}"' in view and '"negativeColor": "#8c510a"' in view
