"""The one colour rule of every figure (issue 40), in one place; the figures read their colours from here.

- **Importance** is a diverging scale centred at 0 whose important end is red (:func:`importance_scale`), and every
  colour scale a figure draws carries a colour bar naming what it measures.
- **Other signed quantities** (a cosine, an OV circuit's score, a neuron's activation, a direct effect) use
  :data:`SIGNED`, a diverging scale without red, and shares or sizes from 0 up :data:`SHARE`, so that red never
  stands for anything but importance.
- **Categories** (token roles, engines' rankings, the arms of a comparison) take colours from :data:`CATEGORICAL`,
  none of them the importance red; a category is told by its name, never by "red".
- **The arms of a knockout** read alike in every figure: nothing knocked out :data:`BEFORE`, random heads
  :data:`RANDOM` (knockout, transfer, neuron knockout, faithfulness), and the heads the ranking called important
  :data:`IMPORTANT` -- the one categorical use of red, because these are the heads the red of the heat maps marks. A
  trace in that colour says so in its ``meta`` (:func:`important_trace`), and the figure test checks that only such
  traces are red.
"""

from __future__ import annotations

from typing import Any

DIVERGING = "RdBu"  # red (low) to blue (high); importance_scale orients it
SIGNED = "BrBG"  # a signed quantity that is not importance (a cosine, an OV score): brown (low) to teal (high), no red
SHARE = "Blues"  # a share or a size from 0 up that is not importance (energy by period, a digit map)
IMPORTANT = "crimson"  # the heads ranked important, as the heat maps' red end marks them
IMPORTANT_META = "importance"  # the ``meta`` of a trace that draws the important heads in IMPORTANT
LEGEND = "red: important"
RANDOM = "#7f7f7f"  # random heads, in every figure (a band around it: RANDOM_BAND)
RANDOM_BAND = "rgba(127,127,127,0.25)"
IMPORTANT_BAND = "rgba(220,20,60,0.18)"
BEFORE = "#1f77b4"  # nothing knocked out

# Categories: plotly's D3 palette without its red (#d62728), so that no category reads as "important".
CATEGORICAL = ("#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22", "#000000")

# One colour per token role in every figure and every panel (the operands as in the information-flow figure).
ROLE_COLOURS = {"A": "#1f77b4", "B": "#2ca02c", "operator": "#ff7f0e", "answer_prefix": "#9467bd",
                "few_shot": "#bcbd22", "other": "#c7c7c7",
                "equals": "#9467bd"}  # "=": the answer prefix's own words (attention by role counts them there)


def importance_scale(sign: int) -> str:
    """The diverging colour scale that paints a metric's important direction red: ``RdBu`` runs red (low) to blue
    (high), so a metric where a drop is important (``sign=-1``, e.g. ``relative_logit``) keeps it and one where a
    large value is important (``sign=+1``, e.g. ``fraction``) reverses it."""
    return DIVERGING if sign < 0 else DIVERGING + "_r"


def category(i: int) -> str:
    """The ``i``-th categorical colour (cycling)."""
    return CATEGORICAL[i % len(CATEGORICAL)]


def important_trace(trace: Any) -> Any:
    """``trace`` marked as drawing the heads ranked important (the one categorical trace allowed the red)."""
    trace.meta = IMPORTANT_META
    return trace


# The circuitsvis views (issue 40). circuitsvis paints each head's name tile and frame in its own hue, hsla(360 * head /
# heads), so its first head in the importance red: the bundle the pages load has that function replaced by one that
# reads HEAD_COLOURS, the categorical palette (circuits.viz.page.circuitsvis_bundle). A cell's colour is its attention
# weight, white (0) to ATTENTION_HIGH (1), a share from 0 up in SHARE's blues; weights are never negative, and the
# negative end is set too, never red (circuitsvis's defaults: red below 0, blue above).
HEAD_COLOURS = CATEGORICAL
ATTENTION_HIGH = "#08519c"  # Blues at 1
ATTENTION_PROPS = {"positiveColor": ATTENTION_HIGH, "negativeColor": "#8c510a"}  # BrBG's brown end, never drawn

# The views' colour bar (every colour scale has one): the key says it once, above the views (the page and the report).
ATTENTION_KEY = ("<div class='colour-key' style='display:flex;align-items:center;gap:.6em;margin:.3em 0 1em;"
                 "font-size:.9em;color:#333'><span>attention weight: 0</span><span style='display:inline-block;"
                 "width:220px;height:14px;border:1px solid #999;background:linear-gradient(to right,#fff,"
                 f"{ATTENTION_HIGH})'></span>"
                 "<span>1 (rows: the query token, columns: the key token it attends to; each head's name in its own "
                 "colour, a category, never the importance red)</span></div>")
