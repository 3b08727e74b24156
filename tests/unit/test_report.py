"""The report: drawn from what the experiment scripts and jobs really write (a tiny model at a tiny size), and
from folders written before results had kinds; every section, offline, scripts inlined once."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
from experiment_runs import run_all
from legacy_results import ALL_BUILDERS, KIND, attention_page, write_everything, write_identify, write_identify_all

from circuits.cli import main as cli_main
from circuits.viz.page import parse_views
from circuits.viz.report import build_report, collect
from circuits.viz.sections import SECTIONS


@pytest.fixture(scope="module")
def real_results() -> Path:
    return run_all()


@pytest.fixture(scope="module")
def real_report(real_results) -> str:
    return build_report([real_results])


def test_every_section_drawn_from_real_results(real_report, real_results):
    for s in SECTIONS:
        assert f"<section id='{s.anchor}'>" in real_report, s.anchor
    assert "Not in the inputs" not in real_report and "could not be read" not in real_report
    found, unknown, broken = collect([real_results])
    assert broken == [] and unknown == []
    kinds = sorted(f.kind for f in found)
    assert kinds.count("identify") == 7  # four operations, the pooled 'all', exponentiation, addition's seed 1
    assert {"knockout", "transfer", "attention_roles", "attention_views", "logit_lens", "per_operation",
            "word_problem_heads", "sft_table", "cross_model", "screen", "positions", "neurons", "edges", "stability",
            "ablation_kinds"} <= set(kinds)
    assert "Shared key heads" in real_report and "Precise SFT (top-2 heads)" in real_report


def test_scripts_inlined_once_and_offline(real_report):
    assert real_report.count("var CircuitsVis=") == 1  # the circuitsvis bundle, once for all views
    assert len(re.findall(r"plotly\.js v\d", real_report)) == 1  # plotly.js, once for all figures
    assert real_report.count("CircuitsVis.render(") == 4  # one view per operation
    assert re.search(r"<script[^>]+src=", real_report) is None
    assert "sourceMappingURL" not in real_report


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


def test_unreadable_results_are_named(tmp_path, real_results, capsys):
    shutil.copytree(real_results / "identify" / "addition", tmp_path / "good")
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "summary.json").write_text('{"head_effects": [[0.1]], "key_heads": [')
    page = build_report([tmp_path])
    assert "Results that could not be read" in page and "summary.json is not valid JSON" in page
    shutil.rmtree(tmp_path / "good")
    assert cli_main(["report", str(tmp_path), "--out", str(tmp_path / "r.html")]) == 2
    err = capsys.readouterr().err
    assert "no results found" in err and "bad" in err and "not valid JSON" in err
    assert not (tmp_path / "r.html").exists()


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
