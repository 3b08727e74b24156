"""The report from saved results of every kind: every section, absent sections noted, folders that hold no result,
the command line (the report from what the scripts really write: tests/integration/test_script_results.py)."""

from __future__ import annotations

import pytest
from result_cases import attention_page, build_results, write_identify, write_identify_all

from circuits.cli import main as cli_main
from circuits.io import write_json
from circuits.results import RESULT_TYPES
from circuits.viz.page import parse_views
from circuits.viz.report import build_report, collect
from circuits.viz.sections import SECTIONS


@pytest.fixture(scope="module")
def saved(tiny_llama, tmp_path_factory):
    """One saved result of every kind under one folder (the evaluation also as a single .json file)."""
    root = tmp_path_factory.mktemp("results")
    results = build_results(tiny_llama, tmp_path_factory.mktemp("jobs"))
    for kind, r in results.items():
        r.save(root / kind)
    results["evaluation"].save(root / "eval_precise.json")
    return root


def test_every_kind_is_collected(saved):
    found, unknown, broken = collect([saved])
    assert sorted(f.kind for f in found) == sorted([*RESULT_TYPES, "evaluation"]) and unknown == [] and broken == []
    assert {f.path.name for f in found if f.kind == "evaluation"} == {"evaluation", "eval_precise.json"}


def test_report_draws_every_section(saved):
    page = build_report([saved])
    assert "Not in the inputs" not in page
    assert "Precise SFT (top-8 heads)" in page and "1.20M" in page


def test_a_folder_of_result_files_without_a_marker_is_no_result(tmp_path):
    folder = tmp_path / "fig3_knockout"
    write_json(folder / "data.json", {"curve": {}, "n_pairs": 8, "task": "addition"})
    write_json(folder / "config.json", {"model": "tiny"})
    found, unknown, broken = collect([tmp_path])
    assert found == [] and unknown == [folder] and broken == []


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
