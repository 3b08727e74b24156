"""What the experiment scripts really write (every script run once on a tiny model at a tiny size,
``experiment_runs.run_all``): the report drawn from it, every section, offline, scripts inlined once; a result
folder that cannot be read named in the report and refused by the command line; damaged result folders load or
name the problem."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from experiment_runs import run_all
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from circuits.cli import main as cli_main
from circuits.results import ResultError, load_result
from circuits.viz.report import build_report, collect
from circuits.viz.sections import SECTIONS


# Sections whose script is not yet in experiment_runs.SCRIPTS: fig_heuristics on the tiny model draws grid cells with no
# value (the browser test's hover check) and test_experiments has no entry for it yet; its section is tested on a
# result of tests/result_cases.py (test_report) and by tests/unit/test_heuristics.py. `circuits carry` is a command, not
# an experiment script, and needs a model that writes both tokens of two-digit sums: its section is drawn from a result of
# tests/result_cases.py (test_report, test_colours) and its job is run by tests/unit/test_carry.py.
NOT_YET_IN_THE_RUNS = {"heuristics", "carry"}


@pytest.fixture(scope="module")
def real_results() -> Path:
    return run_all()


@pytest.fixture(scope="module")
def real_report(real_results) -> str:
    return build_report([real_results])


def test_every_section_drawn_from_real_results(real_report, real_results):
    for s in SECTIONS:
        if s.anchor in NOT_YET_IN_THE_RUNS:
            continue
        assert f"<section id='{s.anchor}'>" in real_report, s.anchor
    missing = re.search(r"Not in the inputs \((\d+) section", real_report)
    assert missing is None or int(missing.group(1)) == len(NOT_YET_IN_THE_RUNS), missing
    assert "could not be read" not in real_report
    found, unknown, broken = collect([real_results])
    assert broken == [] and unknown == []
    kinds = sorted(f.kind for f in found)
    assert kinds.count("identify") == 7  # four operations, the pooled 'all', exponentiation, addition's seed 1
    assert {"knockout", "transfer", "attention", "attention-views", "lens", "per_operation",
            "word_problems", "sft_table", "cross_model", "screen", "positions", "neurons", "edges", "stability",
            "ablation_kinds"} <= set(kinds)
    assert "Shared key heads" in real_report and "Precise SFT (top-2 heads)" in real_report


def test_scripts_inlined_once_and_offline(real_report):
    assert real_report.count("var CircuitsVis=") == 1  # the circuitsvis bundle, once for all views
    assert len(re.findall(r"plotly\.js v\d", real_report)) == 1  # plotly.js, once for all figures
    assert real_report.count("CircuitsVis.render(") == 4  # one view per operation
    assert re.search(r"<script[^>]+src=", real_report) is None
    assert "sourceMappingURL" not in real_report


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


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    from experiment_runs import run_all

    return run_all()


FILES = ["summary.json", "pairs.jsonl", "sweep.pt", "config.json", "circuits.json", "data.json", "result.json"]


@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.sampled_from(["identify/addition", "fig3_knockout", "fig4_transfer", "fig6_mlp_logit_lens",
                        "table1_precise_sft", "fig15_per_operation"]),
       st.lists(st.tuples(st.sampled_from(FILES), st.sampled_from(["delete", "truncate", "garbage", "empty"])),
                min_size=1, max_size=3))
def test_damaged_result_folders_load_or_name_the_problem(saved, tmp_path_factory, folder, damage):
    import shutil

    work = tmp_path_factory.mktemp("damaged") / "r"
    shutil.copytree(saved / folder, work)
    for name, how in damage:
        path = work / name
        if not path.exists():
            continue
        if how == "delete":
            path.unlink()
        elif how == "truncate":
            path.write_bytes(path.read_bytes()[: len(path.read_bytes()) // 2])
        elif how == "garbage":
            path.write_bytes(b"\x00\xff not what was written")
        else:
            path.write_text("")
    try:
        result = load_result(work)
    except (ResultError, ValueError, FileNotFoundError) as err:
        assert str(err) and "\n" not in str(err).strip()
        return
    json.dumps(result.config_json())  # what loaded is a usable result
