"""The report from synthetic result folders (no model): what it finds, what it draws, that it is offline."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from circuits.cli import main as cli_main
from circuits.report import SECTIONS, build_report, collect, parse_views
from report_fixtures import ALL_BUILDERS, attention_page, write_everything, write_identify, write_identify_all


@pytest.fixture(scope="module")
def everything(tmp_path_factory) -> Path:
    return write_everything(tmp_path_factory.mktemp("results"))


@pytest.fixture(scope="module")
def full_report(everything) -> str:
    return build_report([everything])


@pytest.mark.parametrize("kind", list(ALL_BUILDERS))
def test_collect_recognises_each_result(tmp_path, kind):
    path = ALL_BUILDERS[kind](tmp_path)
    found, unknown = collect([tmp_path])
    assert [f.kind for f in found] == [kind]
    assert found[0].path == path
    assert unknown == []


def test_collect_walks_identify_all_and_dedupes(tmp_path):
    out = write_identify_all(tmp_path)
    found, _ = collect([out, out / "addition", out / "addition" / "summary.json"])
    assert sorted(f.data["task"] for f in found) == sorted(["addition", "subtraction", "multiplication", "division", "all"])


def test_every_section_drawn(full_report):
    for s in SECTIONS:
        assert f"<section id='{s.anchor}'>" in full_report
    assert "Not in the inputs" not in full_report
    # one heatmap per identify task (4 operations + all), Figure 2 and Figure 15
    assert full_report.count("layer %{y}, head %{x}") >= 6
    assert "Shared key heads" in full_report
    assert "Precise SFT (top-8 heads)" in full_report and "1.20M" in full_report


def test_scripts_inlined_once_and_offline(full_report):
    assert full_report.count("var CircuitsVis=") == 1  # the circuitsvis bundle, once for all views
    assert len(re.findall(r"plotly\.js v\d", full_report)) == 1  # plotly.js, once for all figures
    assert full_report.count("CircuitsVis.render(") == 2  # the two prompts of the fixture
    assert re.search(r"<script[^>]+src=", full_report) is None
    assert "sourceMappingURL" not in full_report  # (the browser test checks that nothing is fetched)
    assert len(full_report) < 9_000_000


def test_absent_sections_get_a_note(tmp_path):
    write_identify(tmp_path, "addition")
    page = build_report([tmp_path])
    assert page.count("Not in the inputs") == len(SECTIONS) - 1
    assert "experiments/fig3_knockout.py" in page
    assert "var CircuitsVis=" not in page  # no views: no bundle


def test_config_shown_with_each_result(tmp_path):
    write_identify(tmp_path, "addition")
    page = build_report([tmp_path])
    assert "made by <code>" in page and "key_rule=fraction&gt;=0.05" in page


def test_unknown_results_listed(tmp_path):
    write_identify(tmp_path, "addition")
    (tmp_path / "table4_gsm8k").mkdir()
    (tmp_path / "table4_gsm8k" / "config.json").write_text("{}")
    (tmp_path / "table4_gsm8k" / "data.json").write_text('{"datasets": {}}')
    assert "table4_gsm8k" in build_report([tmp_path])


def test_parse_views_reads_attention_pages():
    views = parse_views(attention_page(["1 + 2 = 3", "5 - 1 = 4"], [(0, 1)]))
    assert [c for c, _, _ in views] == ["1 + 2 = 3", "5 - 1 = 4"]
    assert all(comp == "AttentionHeads" for _, comp, _ in views)
    assert views[0][2]["tokens"] == ["1", "+", "2", "=", "3"] and views[0][2]["attentionHeadNames"] == ["L0H1"]


def test_no_results_is_an_error(tmp_path, capsys):
    with pytest.raises(ValueError, match="no results found"):
        build_report([tmp_path])
    assert cli_main(["report", str(tmp_path), "--out", str(tmp_path / "r.html")]) == 2
    assert "no results found" in capsys.readouterr().err


def test_cli_writes_the_report(tmp_path, capsys):
    write_identify(tmp_path / "res", "addition")
    out = tmp_path / "out" / "report.html"
    assert cli_main(["report", str(tmp_path / "res"), "--out", str(out)]) == 0
    assert out.is_file() and str(out.resolve()) in capsys.readouterr().out
