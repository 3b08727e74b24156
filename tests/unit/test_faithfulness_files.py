"""What the faithfulness job writes says what it holds (issue 29): ``summary.json``'s ``sizes_percent`` is in percent
(``sizes``: the fractions MIB's sizes are), and the standalone ``figure.html`` draws every setting the result
measured (nodes@end, nodes@all, edges), not only the first, with the table of all of them."""

from __future__ import annotations

import json

import pytest

from circuits.beyond.faithfulness.config import FaithfulnessConfig
from test_faithfulness_job import hand_result


def test_sizes_percent_is_in_percent_and_sizes_are_the_fractions(tmp_path):
    r = hand_result()
    r.save(tmp_path / "f")
    s = json.loads((tmp_path / "f" / "summary.json").read_text())
    fractions = list(FaithfulnessConfig().sizes)
    assert s["sizes"] == fractions and s["sizes_percent"] == pytest.approx([100 * f for f in fractions])
    assert s["sizes_percent"][0] == 0.1 and s["sizes_percent"][-1] == 50  # MIB's 0.001 .. 0.5


def test_the_standalone_figure_draws_every_setting_and_the_table(tmp_path):
    r = hand_result()
    assert r.settings == ["nodes@end", "edges@end"]
    r.save(tmp_path / "f")
    page = (tmp_path / "f" / "figure.html").read_text()
    assert page.count('class="plotly-graph-div"') == len(r.settings) + 1
    from circuits.beyond.faithfulness.result import SETTING_TEXT

    for setting in r.settings:
        assert f"faithfulness of each ranking's circuit, {SETTING_TEXT[setting]}" in page
    assert "CPR (higher is better), CMD (lower is better)" in page
    assert page.count("src='_assets/plotly-") == 1  # plotly.js loaded once
