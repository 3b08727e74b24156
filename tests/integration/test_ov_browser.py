"""The OV-circuit figure in headless Chromium at 1000 and 1600 px: panels wide enough, titles apart, every cell
hoverable with its value (the last column included)."""

from __future__ import annotations

import pytest
import torch

from circuits.explain.head_circuits import HeadCircuits
from circuits.types import Head

CHROMIUM = "/usr/bin/chromium"
FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"]


@pytest.fixture(scope="module")
def page_of(tmp_path_factory):
    from pathlib import Path

    pytest.importorskip("playwright.sync_api", reason="playwright is not installed (pip install -e '.[dev]')")
    if not Path(CHROMIUM).exists():
        pytest.skip(f"{CHROMIUM} is missing: `apt-get install chromium`")
    from playwright.sync_api import sync_playwright

    torch.manual_seed(0)
    digits = [str(d) for d in range(10)]
    hc = HeadCircuits([Head(20, 8), Head(14, 2), Head(20, 5), Head(23, 3)], digits, digits, ["="],
                      torch.randn(4, 10, 10) * 20, torch.randn(4, 1, 10))
    path = tmp_path_factory.mktemp("ov") / "ov.html"
    hc.figure().write_html(path, include_plotlyjs=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)

        def page_of(width: int):
            page = browser.new_page(viewport={"width": width, "height": 800})
            page.goto(path.as_uri())
            page.wait_for_selector(".nsewdrag")
            return page

        yield page_of
        browser.close()


@pytest.mark.parametrize("width", [1000, 1600])
def test_ov_figure_reads_and_hovers(page_of, width):
    page = page_of(width)
    panels = page.evaluate("""() => [...document.querySelectorAll('.nsewdrag')].map(e => {
        const r = e.getBoundingClientRect(); return [e.dataset.subplot, r.left, r.top, r.width, r.height]})""")
    assert len(panels) == 4 and all(w >= 150 and h >= 150 for _, _, _, w, h in panels)
    titles = page.evaluate("""() => [...document.querySelectorAll('.gtitle, .annotation-text')].map(e => {
        const r = e.getBoundingClientRect(); return [r.left, r.top, r.right, r.bottom]})""")
    for i, a in enumerate(titles):
        for b in titles[i + 1:]:
            assert a[2] <= b[0] or b[2] <= a[0] or a[3] <= b[1] or b[3] <= a[1], f"titles overlap: {a} {b}"
    for name, left, top, w, h in panels:
        for row in (0, 9):
            for col in (0, 9):  # corners: the last column and row included
                x, y = left + (col + 0.5) * w / 10, top + (row + 0.5) * h / 10
                hit = page.evaluate(f"() => document.elementFromPoint({x}, {y}).dataset.subplot || ''")
                assert hit == name, f"cell ({row}, {col}) of {name} at {width}px is covered by {hit!r}"
                page.mouse.move(x, y)
                want = f"source {row} -> target {col}"
                page.wait_for_function("w => (document.querySelector('.hoverlayer') || {}).textContent?.includes(w)",
                                       arg=want, timeout=3000)  # raises when the hover never says it
