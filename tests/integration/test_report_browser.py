"""The report in a real browser: headless Chromium (Debian's ``chromium``) driven by Playwright.

Asserts that the page loads without console errors, that the heatmaps (plotly SVG) and a circuitsvis
view render, and that hovering a heatmap cell shows its layer and head. Screenshots are saved under
``test-artifacts/``; with ``CIRCUITS_README_PNG=1`` the README picture ``docs/img/report.png`` is
rewritten too (from ``results/report.html`` when ``make demo`` made one, else from the tiny experiment outputs).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from experiment_runs import run_all

from circuits.viz.report import write_report

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "test-artifacts"
CHROMIUM = "/usr/bin/chromium"
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
def browser(chromium):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        # Playwright gives every launch a fresh temporary profile (it refuses --user-data-dir here).
        b = p.chromium.launch(executable_path=chromium, args=FLAGS)
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
    page.wait_for_selector("#fig-1 .main-svg", timeout=30_000)
    if page.locator(".cv-view").count():  # circuitsvis renders with React after load
        page.wait_for_function("document.querySelector('#cv-1').children.length > 0", timeout=30_000)
    return page, errors, requests


def hover_cell(page, fig_id: str, layer: int, head: int) -> str:
    """Move the mouse over cell (layer, head) of the first heatmap in ``fig_id``; the hover label's text."""
    page.evaluate("id => document.getElementById(id).scrollIntoView()", fig_id)  # the mouse reaches only what is in view
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
    page.wait_for_selector(f"#{fig_id} .hoverlayer .hovertext", timeout=10_000)
    return page.text_content(f"#{fig_id} .hoverlayer .hovertext") or ""


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
        assert "effect" in text
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
        # hover the strongest head: the (layer, head) of the smallest effect in the drawn heatmap
        layer, head = page.evaluate("""() => { const z = document.getElementById('fig-1').calcdata[0][0].z; let best = [0, 0];
            z.forEach((row, l) => row.forEach((v, h) => { if (v < z[best[0]][best[1]]) best = [l, h]; })); return best; }""")
        assert f"layer {layer}, head {head}" in hover_cell(page, "fig-1", layer=layer, head=head)
        out = ROOT / "docs" / "img" / "report.png"
        out.parent.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(out))
        assert out.stat().st_size < 500_000
    finally:
        page.close()
