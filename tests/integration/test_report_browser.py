"""The report in a real browser: headless Chromium (Debian's ``chromium``; ``CIRCUITS_CHROMIUM`` names another copy of
it, e.g. one unpacked from its package where /usr/bin/chromium is missing) driven by Playwright.

Asserts that the page loads without console errors or network requests, that the heatmaps (plotly SVG) and a
circuitsvis view render, that hovering a heatmap cell shows its layer, head and metric, and that every figure reads
right at 1000 and 1600 px (:func:`geometry`): titles inside the figure and apart from the subplot titles, legends off
the colour bars, Figure 2's cells square-ish and wide enough to read, and every heatmap cell, the last column
included, reachable by the mouse (``elementFromPoint`` gives its own subplot's drag layer, not a neighbour's); and
that a figure page (the faithfulness job's) fits its window, scrollbars shown, at 1000-1600 px. Screenshots are saved under ``test-artifacts/``; with ``CIRCUITS_README_PNG=1`` the README picture
``docs/img/report.png`` is rewritten too (from ``results/report.html`` when ``make demo`` made one, else from the
tiny experiment outputs).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from experiment_runs import run_all

from circuits.viz.report import write_report

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "test-artifacts"
CHROMIUM = os.environ.get("CIRCUITS_CHROMIUM", "/usr/bin/chromium")
# How long the page may take to draw or answer a hover before the test fails: a limit for a page that never draws,
# not a speed check, so a loaded machine (the suite beside other CPU-bound jobs) never fails a good page.
WAIT_MS = 180_000
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]


@pytest.fixture(scope="session")
def chromium() -> str:
    """Debian's chromium (``make test`` installs it with apt when missing; never Playwright's own download)."""
    pytest.importorskip("playwright.sync_api", reason="playwright is not installed (pip install -e '.[dev]')")
    if not Path(CHROMIUM).exists():
        pytest.skip(f"{CHROMIUM} is missing: `apt-get install chromium` (make test does it where apt works)")
    return CHROMIUM


@pytest.fixture(scope="module")
def pw(chromium):
    """One Playwright per module: a second ``sync_playwright()`` inside a running one refuses to start."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        yield p


@pytest.fixture(scope="module")
def browser(pw, chromium):
    # Playwright gives every launch a fresh temporary profile (it refuses --user-data-dir here).
    b = pw.chromium.launch(executable_path=chromium, args=FLAGS)
    yield b
    b.close()


@pytest.fixture(scope="module")
def browser_with_scrollbars(pw, chromium):
    """As :func:`browser`, with the scrollbars a user sees (Playwright hides them in headless Chromium by default)."""
    b = pw.chromium.launch(executable_path=chromium, args=FLAGS, ignore_default_args=["--hide-scrollbars"])
    yield b
    b.close()


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> Path:
    """The report of what the experiment scripts write (a tiny model at a tiny size)."""
    root = run_all()
    return write_report([root], tmp_path_factory.mktemp("report") / "report.html")


def open_page(browser, path: Path, width: int = 1280, height: int = 900):
    """A page showing ``path``, with the console errors and uncaught exceptions it logged."""
    page = browser.new_page(viewport={"width": width, "height": height})
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    # Offline: a request leaving the file would be a CDN the page depends on.
    requests: list[str] = []
    page.on("request", lambda r: requests.append(r.url) if not r.url.startswith(("file:", "data:", "blob:", "about:")) else None)
    page.goto(path.as_uri(), wait_until="load")
    page.wait_for_selector("#fig-1 .main-svg", timeout=WAIT_MS)
    if page.locator(".cv-view").count():  # circuitsvis renders with React after load
        page.wait_for_function("document.querySelector('#cv-1').children.length > 0", timeout=WAIT_MS)
    return page, errors, requests


def hover_cell(page, fig_id: str, layer: int, head: int) -> str:
    """Move the mouse over cell (layer, head) of the first heatmap in ``fig_id``; the hover label's text."""
    page.evaluate("id => document.getElementById(id).scrollIntoView()", fig_id)  # the mouse reaches only what is in view
    page.mouse.move(1, 1)  # off the figure: the previous label goes, so the one read below is this cell's
    page.wait_for_selector(f"#{fig_id} .hoverlayer .hovertext", state="detached", timeout=WAIT_MS)
    xy = page.evaluate(
        """([id, head, layer]) => {
            const gd = document.getElementById(id); const L = gd._fullLayout;
            const r = gd.getBoundingClientRect();
            return [r.left + L.xaxis._offset + L.xaxis.l2p(head), r.top + L.yaxis._offset + L.yaxis.l2p(layer)];
        }""",
        [fig_id, head, layer],
    )
    page.mouse.move(xy[0] - 5, xy[1] - 5)
    page.mouse.move(xy[0], xy[1])
    page.wait_for_selector(f"#{fig_id} .hoverlayer .hovertext", timeout=WAIT_MS)
    return page.text_content(f"#{fig_id} .hoverlayer .hovertext") or ""


GEOMETRY = """() => {
  const boxes = (a, b) => !(a.right <= b.left + 1 || b.right <= a.left + 1 || a.bottom <= b.top + 1 || b.bottom <= a.top + 1);
  const out = [];
  for (const gd of document.querySelectorAll('.js-plotly-plot')) {
    const id = gd.id, L = gd._fullLayout, svg = gd.querySelector('.main-svg').getBoundingClientRect();
    const title = gd.querySelector('.infolayer .gtitle');
    const subs = [...gd.querySelectorAll('.infolayer .annotation')].filter(a => a.textContent.trim());
    const tb = title && title.textContent.trim() ? title.getBoundingClientRect() : null;
    if (tb && (tb.left < svg.left - 1 || tb.right > svg.right + 1 || tb.top < svg.top - 1))
      out.push(`${id}: title cut (${Math.round(tb.left - svg.left)}..${Math.round(tb.right - svg.left)} of ${Math.round(svg.width)} px)`);
    for (let i = 0; i < subs.length; i++) {
      const a = subs[i].getBoundingClientRect();
      if (tb && boxes(a, tb)) out.push(`${id}: subplot title '${subs[i].textContent}' overlaps the title`);
      for (let j = i + 1; j < subs.length; j++)
        if (boxes(a, subs[j].getBoundingClientRect())) out.push(`${id}: subplot titles '${subs[i].textContent}' and '${subs[j].textContent}' overlap`);
    }
    const legend = gd.querySelector('.legend');
    for (const cb of gd.querySelectorAll('.colorbar'))
      if (legend && boxes(legend.getBoundingClientRect(), cb.getBoundingClientRect())) out.push(`${id}: the legend covers a colour bar`);
    // an axis title over another subplot's plot area (the knockout's 'answer probability' over the accuracy curve),
    // or under the legend
    const drags = [...gd.querySelectorAll('.draglayer .nsewdrag')];
    for (const t of gd.querySelectorAll('.infolayer [class*="title"]')) {
      const axis = ((t.getAttribute('class') || '').match(/^g-([xy]\\d*)title$/) || [])[1];
      if (!axis || !t.textContent.trim()) continue;
      const a = t.getBoundingClientRect();
      if (legend && boxes(a, legend.getBoundingClientRect())) out.push(`${id}: the legend covers the ${axis} title`);
      for (const d of drags) {
        const sub = d.getAttribute('data-subplot') || '';
        const own = axis[0] === 'y' ? sub.slice(sub.indexOf('y')) : sub.slice(0, sub.indexOf('y'));
        if (own !== axis && boxes(a, d.getBoundingClientRect()))
          out.push(`${id}: the ${axis} title '${t.textContent.trim()}' lies over subplot ${sub}`);
      }
    }
    gd.data.forEach((t, k) => {
      if (t.type !== 'heatmap' || t.visible === false) return;
      const xa = L[(t.xaxis || 'x').replace('x', 'xaxis')], ya = L[(t.yaxis || 'y').replace('y', 'yaxis')];
      const cd = gd.calcdata[k][0], sub = (t.xaxis || 'x') + (t.yaxis || 'y');
      const nx = cd.z[0].length, ny = cd.z.length;
      const cw = xa._length / nx, ch = ya._length / ny;
      if (t.name === 'heads') {
        if (cw < 12) out.push(`${id}: head columns ${cw.toFixed(1)} px wide`);
        if (cw / ch < 0.5 || cw / ch > 2) out.push(`${id}: head cells ${cw.toFixed(0)}x${ch.toFixed(0)} px, not square-ish`);
      }
      gd.scrollIntoView();
      const r = gd.getBoundingClientRect();
      let missed = [];
      for (let yi = 0; yi < ny; yi++) for (let xi = 0; xi < nx; xi++) {
        const x = r.left + xa._offset + (xi + 0.5) * cw, y = r.top + ya._offset + (yi + 0.5) * ch;
        if (x < 0 || x >= innerWidth || y < 0 || y >= innerHeight) continue;  // off screen: checked when scrolled
        const e = document.elementFromPoint(x, y);
        if (!e || !e.classList.contains('nsewdrag') || e.getAttribute('data-subplot') !== sub)
          missed.push(`[${yi},${xi}] under ${e ? e.getAttribute('class') + ' ' + e.getAttribute('data-subplot') : 'nothing'}`);
      }
      if (missed.length) out.push(`${id} trace ${k}: ${missed.length} cells not hoverable, e.g. ${missed.slice(0, 3).join('; ')}`);
    });
  }
  return out;
}"""


# Each figure read as data (issue 29): an axis of a rate (accuracy, probability, a share) starts at 0 and holds its
# data; every other axis holds its data; every colour scale has its bar (a heatmap without one shares the range and
# scale of one that has it); titles are unique within a section.
FIGURE_DATA = """() => {
  const out = [];
  const RATE = /accuracy|probability|share|attention from END/i;
  const text = t => (t && (t.text !== undefined ? t.text : t)) || '';
  for (const section of document.querySelectorAll('section')) {
    const titles = {};
    for (const gd of section.querySelectorAll('.js-plotly-plot')) {
      const id = gd.id, L = gd._fullLayout;
      const title = text(L.title).replace(/<[^>]+>/g, ' ').trim();
      if (title) { if (titles[title]) out.push(`${section.id}: ${titles[title]} and ${id} share the title '${title}'`);
                   titles[title] = id; }
      const bars = gd._fullData.filter(t => t.type === 'heatmap' && t.showscale);
      gd._fullData.forEach((t, k) => {
        if (t.type === 'heatmap' && !t.showscale && !bars.some(b => b.zmin === t.zmin && b.zmax === t.zmax
            && JSON.stringify(b.colorscale) === JSON.stringify(t.colorscale)))
          out.push(`${id} trace ${k} (${t.name || 'heatmap'}): a colour scale without its colour bar`);
        if (t.type !== 'scatter' || t.visible === false || t.hoverinfo === 'skip') return;  // bands may be clipped
        const ya = L[(t.yaxis || 'y').replace('y', 'yaxis')];
        const ys = (t.y || []).filter(v => v !== null && Number.isFinite(+v)).map(Number);
        if (!ys.length || ya.type !== 'linear') return;
        const [lo, hi] = ya.range, min = Math.min(...ys), max = Math.max(...ys), eps = 1e-9 + 1e-6 * (hi - lo);
        if (min < lo - eps || max > hi + eps) out.push(`${id} trace ${k}: data ${min}..${max} outside its axis ${lo}..${hi}`);
        if (RATE.test(text(ya.title)) && min >= 0 && Math.abs(lo) > eps)
          out.push(`${id}: the rate axis '${text(ya.title)}' starts at ${lo.toFixed(3)}, not 0`);
      });
    }
  }
  return out;
}"""


def figures_as_data(page) -> list[str]:
    """What a figure of the page says that its data does not (empty when every figure is right)."""
    return page.evaluate(FIGURE_DATA)


# The figures drawn from a sample of pairs, prompts or items (issue 40): each bar and each curve a reader reads a
# number from carries its interval -- error bars, or (knockout) a band around it.
SAMPLED = """() => {
  const out = [], SAMPLED = ['transfer', 'attention-roles', 'logit-lens', 'knockout'];
  for (const id of SAMPLED) {
    const section = document.getElementById(id);
    if (!section) { out.push(`no section ${id}`); continue; }
    for (const gd of section.querySelectorAll('.js-plotly-plot')) {
      const bands = gd._fullData.filter(t => t.fill === 'tonexty' && t.visible !== false).length;
      gd._fullData.forEach((t, k) => {
        if (t.visible === false || t.hoverinfo === 'skip' || t.fill === 'tonexty' || !(t.y || []).length) return;
        if (t.type !== 'bar' && !(t.type === 'scatter' && /markers|lines/.test(t.mode || ''))) return;
        const bars = t.error_y && t.error_y.visible && (t.error_y.array || []).length;
        if (!bars && !bands) out.push(`${id}: ${gd.id} trace ${k} '${t.name}' has no interval`);
      });
    }
  }
  return out;
}"""


def test_every_figure_says_what_its_data_says(browser, report):
    page, errors, _ = open_page(browser, report, width=1280, height=1400)
    try:
        assert errors == []
        problems = figures_as_data(page) + page.evaluate(SAMPLED)
        assert problems == [], "\n".join(problems)
    finally:
        page.close()


def geometry(page) -> list[str]:
    """What reads wrong in every plotly figure of the page, at its current width (empty when all is right)."""
    return page.evaluate(GEOMETRY)


@pytest.mark.parametrize("width", [1000, 1600])
def test_every_figure_reads_right(browser, report, width):
    page, errors, _ = open_page(browser, report, width=width, height=1400)
    try:
        assert errors == []
        problems = geometry(page)
        assert problems == [], "\n".join(problems)
        ARTIFACTS.mkdir(exist_ok=True)
        page.locator("#fig-1").scroll_into_view_if_needed()
        page.screenshot(path=str(ARTIFACTS / f"report-{width}.png"))
    finally:
        page.close()


def test_figure2_last_column_is_hoverable(browser, report):
    """The strongest head sits in the last column on SmolLM2 (20.8): its cell must answer the mouse, not the MLP
    column's drag layer."""
    page, errors, _ = open_page(browser, report, width=1000)
    try:
        n_layers, n_heads = page.evaluate("() => { const z = document.getElementById('fig-1').calcdata[0][0].z; "
                                          "return [z.length, z[0].length]; }")
        for layer in range(n_layers):
            text = hover_cell(page, "fig-1", layer=layer, head=n_heads - 1)
            assert f"layer {layer}, head {n_heads - 1}" in text, text
    finally:
        page.close()


def test_report_in_chromium(browser, report):
    page, errors, requests = open_page(browser, report)
    try:
        assert errors == [], f"console errors: {errors}"
        assert requests == [], f"the page fetched from the network: {requests}"
        n_svg = page.locator(".js-plotly-plot .main-svg").count()
        assert n_svg >= 2 * 5, "plotly figures did not render"  # every figure has two svg layers
        assert page.locator("#fig-1 .heatmaplayer image, #fig-1 .heatmaplayer .hm").count() >= 1, "heatmap not drawn"
        # circuitsvis draws its React view into the placeholder div.
        assert page.locator(".cv-view").count() == 4
        assert page.inner_text("#cv-1").strip(), "the circuitsvis view is empty"
        text = hover_cell(page, "fig-1", layer=2, head=1)
        assert "layer 2, head 1" in text, text
        assert "fraction" in text  # the metric that colours and boxes, by name
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "report-hover.png"))
        page.screenshot(path=str(ARTIFACTS / "report-full.png"), full_page=True)
        page.locator("#attention-views").scroll_into_view_if_needed()
        page.screenshot(path=str(ARTIFACTS / "report-attention-views.png"))
    finally:
        page.close()


def test_readme_picture(browser, report):
    """With ``CIRCUITS_README_PNG=1``: redraw ``docs/img/report.png`` (top of the report, a cell hovered)."""
    if os.environ.get("CIRCUITS_README_PNG") != "1":
        pytest.skip("set CIRCUITS_README_PNG=1 to rewrite docs/img/report.png")
    demo = ROOT / "results" / "report.html"
    page, errors, _ = open_page(browser, demo if demo.exists() else report, width=1100, height=760)
    try:
        assert errors == []
        page.evaluate("document.getElementById('fig-1').scrollIntoView()")
        page.evaluate("window.scrollBy(0, -90)")
        # hover the strongest head: the (layer, head) of the largest fraction in the drawn heatmap (red: important)
        layer, head = page.evaluate("""() => { const z = document.getElementById('fig-1').calcdata[0][0].z; let best = [0, 0];
            z.forEach((row, l) => row.forEach((v, h) => { if (v > z[best[0]][best[1]]) best = [l, h]; })); return best; }""")
        assert f"layer {layer}, head {head}" in hover_cell(page, "fig-1", layer=layer, head=head)
        out = ROOT / "docs" / "img" / "report.png"
        out.parent.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(out))
        assert out.stat().st_size < 500_000
    finally:
        page.close()


def test_the_knockout_panels_read_right_at_the_tours_png_size(browser, tmp_path):
    """The tour's static knockout PNG is drawn at kaleido's default 700 x 500 px: there the right panel's y title lay
    over the left panel's curve (issue 40), the legend beside the panels squeezing them together."""
    from circuits.viz.figures import knockout_panels

    curve = {"ks": [0, 2, 4], "effect_accuracy": [1, .62, .31], "random_accuracy": [[1, 1, 1]],
             "effect_prob": [.58, .36, .26], "random_prob": [[.58, .555, .55]]}
    band = {"key": [[.9, 1], [.44, .87], [.12, .56]], "random": [[.9, 1], [.9, 1], [.9, 1]], "level": 0.95}
    fig = knockout_panels(curve, "Knockout: effect-rank vs random-rank heads (Figure 3)",
                          intervals={"accuracy": band, "answer_prob": band})
    path = tmp_path / "knockout.html"
    fig.write_html(path, include_plotlyjs=True, full_html=True, default_width=700, default_height=500)
    page = browser.new_page(viewport={"width": 720, "height": 520})
    try:
        page.goto(path.as_uri(), wait_until="load")
        page.wait_for_selector(".js-plotly-plot .main-svg", timeout=WAIT_MS)
        problems = geometry(page)
        assert problems == [], "\n".join(problems)
    finally:
        page.close()


# The importance red, as a colour test reads it: a saturated hue within 20 degrees of red (circuitsvis's own first
# head colour hsla(0, 70%, 50%) = rgb(217, 38, 38), the heat maps' red end #b2182b, crimson), never a brown (#8c564b:
# hue 10, saturation 0.30) or an orange (#ff7f0e: hue 28).
def is_importance_red(r: int, g: int, b: int) -> bool:
    import colorsys

    h, l, s = colorsys.rgb_to_hls(r / 255, g / 255, b / 255)
    return (h * 360 <= 20 or h * 360 >= 340) and s >= 0.4 and 0.2 <= l <= 0.8


_DRAWN = """() => {
  const css = new Set(), heads = {};
  for (const el of document.querySelectorAll('.cv-view *')) {
    const st = getComputedStyle(el);
    for (const c of [st.backgroundColor, st.borderTopColor, st.color, ...(st.boxShadow.match(/rgba?\\([^)]*\\)/g) || [])])
      if (c && !/rgba\\(0, 0, 0, 0\\)/.test(c)) css.add(c);
    if (el.tagName === 'H4') heads[el.textContent] = st.backgroundColor;
  }
  const pixels = new Set();
  for (const cv of document.querySelectorAll('.cv-view canvas')) {
    const d = cv.getContext('2d').getImageData(0, 0, cv.width, cv.height).data;
    for (let i = 0; i < d.length; i += 4 * 7) if (d[i + 3] > 0) pixels.add(`${d[i]},${d[i + 1]},${d[i + 2]}`);
  }
  return {css: [...css], heads, pixels: [...pixels]};
}"""


def _rgb(text: str) -> tuple[int, int, int]:
    import re

    return tuple(int(float(x)) for x in re.findall(r"[\d.]+", text)[:3])  # type: ignore[return-value]


def test_the_attention_views_draw_no_head_in_the_importance_red(browser, tmp_path):
    """Issue 40: circuitsvis colours each head itself, its first head in the importance red (hue 0); the bundle the
    toolkit loads takes them from the categorical palette, and a cell's colour is its weight in blues. Every colour
    drawn in the views (each element's CSS colours, every sampled pixel of the attention canvases) is read back from
    Chromium: none is the importance red, and the head names carry the palette's colours, in order."""
    from helpers import tiny_model

    from circuits.explain.attention import attention_html
    from circuits.viz.colours import HEAD_COLOURS

    assert is_importance_red(217, 38, 38) and is_importance_red(178, 24, 43) and is_importance_red(220, 20, 60)
    assert not any(is_importance_red(*_rgb(f"rgb({int(c[1:3], 16)},{int(c[3:5], 16)},{int(c[5:], 16)})"))
                   for c in HEAD_COLOURS)
    model = tiny_model("llama")
    heads = [(l, h) for l in range(model.cfg.n_layers) for h in range(model.cfg.n_heads)][:10]  # the palette cycles
    path = tmp_path / "views.html"
    attention_html(model, ["3 + 4 = 7\n2 + 5 = "], heads, path=path)
    page = browser.new_page(viewport={"width": 1280, "height": 2000})
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    try:
        page.goto(path.as_uri(), wait_until="load")
        page.wait_for_function("document.querySelectorAll('#cv-1 h4').length > 0 && "
                               "document.querySelectorAll('#cv-1 canvas').length > 0", timeout=WAIT_MS)
        page.wait_for_function("""() => [...document.querySelectorAll('#cv-1 canvas')].some(c => {
            const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
            for (let i = 3; i < d.length; i += 4 * 97) if (d[i] > 0) return true; return false; })""", timeout=WAIT_MS)
        assert errors == [], errors
        drawn = page.evaluate(_DRAWN)
        red = [c for c in drawn["css"] if is_importance_red(*_rgb(c))]
        red += [c for c in drawn["pixels"] if is_importance_red(*_rgb(c))]
        assert red == [], f"drawn in the importance red: {red[:5]}"
        names = [f"L{l}H{h}" for l, h in heads]
        assert list(drawn["heads"]) == names
        want = [_rgb(f"rgb({int(c[1:3], 16)},{int(c[3:5], 16)},{int(c[5:], 16)})") for c in HEAD_COLOURS]
        assert [_rgb(drawn["heads"][n]) for n in names] == [want[i % len(want)] for i in range(len(names))]
        assert len(drawn["pixels"]) > 3, drawn["pixels"]  # the canvas was read: white, blues, the masked grey
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "attention-views-colours.png"), full_page=True)
    finally:
        page.close()


@pytest.mark.parametrize("width", [1000, 1280, 1600])
def test_a_figure_page_never_scrolls_sideways(browser_with_scrollbars, tmp_path, width):
    """A figure page (write_figures: the faithfulness job's figure.html, four curve figures and a table) fits its
    window with the scrollbars shown: plotly sized the first figures to the window before the page grew tall enough to
    scroll, and the vertical scrollbar then pushed them 15 px past it (a horizontal scrollbar at 1280 px)."""
    from circuits.beyond.faithfulness.config import MIB_SIZES
    from circuits.viz.analysis_figures import faithfulness_figure, faithfulness_table
    from circuits.viz.figures import write_figures

    sizes = torch.tensor(MIB_SIZES, dtype=torch.float64)
    f = {"exact-path": torch.linspace(0.1, 0.9, len(MIB_SIZES)), "eap-ig": torch.linspace(0.0, 0.8, len(MIB_SIZES))}
    low, high = {k: v - 0.05 for k, v in f.items()}, {k: v + 0.05 for k, v in f.items()}
    figs = [faithfulness_figure(sizes, f, low, high, f"addition: {s}") for s in ("nodes@end", "nodes@all", "edges@end",
                                                                                 "edges@all")]
    row = {"cpr": 0.5, "cmd": 0.4, "ranking_seconds": 1.0, "curve_seconds": 0.5}
    figs.append(faithfulness_table([{"ranking": "eap-ig", "setting": "nodes@end", **row}], "addition"))
    path = write_figures(figs, tmp_path / "figure.html")
    page = browser_with_scrollbars.new_page(viewport={"width": width, "height": 1400})
    try:
        page.goto(path.as_uri(), wait_until="load")
        page.wait_for_function(f"document.querySelectorAll('.main-svg').length >= {len(figs)}", timeout=WAIT_MS)
        seen = page.evaluate("""() => ({doc: document.documentElement.scrollWidth, view: innerWidth,
            client: document.documentElement.clientWidth,
            figs: [...document.querySelectorAll('.plotly-graph-div')].map(d => [
                d.querySelector('.main-svg').getBoundingClientRect().width, d.parentElement.clientWidth])})""")
        assert seen["client"] < seen["view"], seen  # the scrollbar takes room (the case at issue)
        assert seen["doc"] <= seen["client"], seen
        assert all(svg <= box for svg, box in seen["figs"]) and len(seen["figs"]) == len(figs), seen
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / f"figure-page-{width}.png"))
    finally:
        page.close()
