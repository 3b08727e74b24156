"""The report from folders written before results had kinds and from hand-built results: every section, absent
sections noted, the command line (the report from what the scripts really write: tests/integration/
test_script_results.py)."""

from __future__ import annotations


import pytest
from legacy_results import ALL_BUILDERS, KIND, attention_page, write_everything, write_identify, write_identify_all

from circuits.cli import main as cli_main
from circuits.viz.page import parse_views
from circuits.viz.report import build_report, collect
from circuits.viz.sections import SECTIONS


@pytest.mark.parametrize("builder", list(ALL_BUILDERS))
def test_folders_from_before_kinds_are_still_read(tmp_path, builder):
    path = ALL_BUILDERS[builder](tmp_path)
    found, unknown, broken = collect([tmp_path])
    assert [f.kind for f in found] == [KIND[builder]] and found[0].path == path
    assert unknown == [] and broken == []


def test_legacy_report_draws_every_section(tmp_path):
    page = build_report([write_everything(tmp_path)])
    assert "Not in the inputs" in page  # Table 4, the cross-model comparison and the analyses beyond END did not exist
    assert page.count("Not in the inputs") == 2 + 3  # Table 4, cross-model; the screen, every position, neurons
    assert "Precise SFT (top-8 heads)" in page and "1.20M" in page


def test_collect_walks_identify_all_and_dedupes(tmp_path):
    out = write_identify_all(tmp_path)
    found, _, _ = collect([out, out / "addition", out / "addition" / "summary.json"])
    assert sorted(f.result.task for f in found) == sorted(["addition", "subtraction", "multiplication", "division", "all"])


def test_absent_sections_get_a_note(tmp_path):
    write_identify(tmp_path, "addition")
    page = build_report([tmp_path])
    # Key heads, and the edges and intervals sections (drawn from identify results too) are present.
    assert page.count("Not in the inputs") == len(SECTIONS) - 3
    assert "experiments/fig3_knockout.py" in page
    assert "var CircuitsVis=" not in page  # no views: no bundle
    assert "made by <code>" in page and "key_rule=fraction&gt;=0.05" in page


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
