"""``--pairs-file`` (issue 29): three hand-written pairs in a JSONL file give an identify result that loads back with
those pairs and that ``circuits report`` renders, with the made-by line read from the result."""

from __future__ import annotations

import json

import pytest
from helpers import tiny_dir

from circuits.cli import main as cli_main
from circuits.results import load_result

PAIRS = [
    {"prompt": "3 + 4 = ", "counterfactual": "3 @ 4 = ", "answer": "7"},
    {"prompt": "2 + 5 = ", "counterfactual": "2 @ 5 = ", "answers": ["7", "2@5"]},
    {"prompt": "1 + 1 = ", "counterfactual": "1 @ 1 = ", "answer": "2", "id": "mine"},
]


def test_a_pairs_file_gives_a_result_the_report_renders(tmp_path):
    path = tmp_path / "pairs.jsonl"
    path.write_text("".join(json.dumps(p) + "\n" for p in PAIRS))
    out = tmp_path / "run"
    assert cli_main(["identify", "--model", str(tiny_dir("llama")), "--pairs-file", str(path), "--no-filter-correct",
                     "--few-shot", "off", "--no-progress", "--out", str(out)]) == 0
    r = load_result(out)
    assert [p.reference for p in r.pairs] == [p["prompt"] for p in PAIRS]
    assert [p.template_id for p in r.pairs] == ["file/1", "file/2", "mine"]
    assert r.config.pairs_file == str(path) and r.provenance["backend"] in ("hooked", "bridge")
    report = tmp_path / "report.html"
    assert cli_main(["report", str(out), "--out", str(report)]) == 0
    page = report.read_text()
    assert "3 prompt pairs" in page and "backend, TransformerLens" in page


def test_a_bad_line_names_the_file_and_line(tmp_path):
    path = tmp_path / "pairs.jsonl"
    path.write_text(json.dumps(PAIRS[0]) + "\n" + json.dumps({"prompt": "1 + 1 = ", "answer": "2"}) + "\n")
    with pytest.raises(ValueError, match="line 2"):
        from circuits.data.pairs import read_pairs_file
        from circuits.models import load_model

        read_pairs_file(load_model(tiny_dir("llama"), device="cpu"), path)


def test_the_readme_route_make_pair_to_a_saved_result_to_the_report(tmp_path):
    """README's "Start here": cc.make_pair -> identify(model, pairs) -> save -> circuits report."""
    import circuits as cc
    from circuits.identify import identify
    from circuits.models import load_model

    model = load_model(tiny_dir("llama"), device="cpu")
    pairs = [cc.make_pair(model.tokenizer, f"{a} + {b} = ", f"{a} @ {b} = ", str(a + b)) for a, b in [(3, 4), (2, 5), (1, 6)]]
    out = identify(model, pairs, cc.IdentifyConfig(model=str(tiny_dir("llama"))), progress=False).save(tmp_path / "mine")
    back = load_result(out)
    assert [p.reference for p in back.pairs] == [p.reference for p in pairs] and back.provenance is not None
    assert cli_main(["report", str(out), "--out", str(tmp_path / "report.html")]) == 0


def test_repeated_pairs_in_a_pairs_file_are_named_not_silent(tmp_path, capsys):
    """Issue 41 (SILENT-WRONG): three copies of one pair were three pairs, each counted in every mean and interval."""
    path = tmp_path / "dup.jsonl"
    path.write_text("".join(json.dumps(p) + "\n" for p in [PAIRS[0], PAIRS[2], PAIRS[0], PAIRS[0]]))
    from circuits.data.pairs import RepeatedPairsWarning, read_pairs_file
    from circuits.models import load_model

    model = load_model(tiny_dir("llama"), device="cpu")
    with pytest.warns(RepeatedPairsWarning, match=r"dup.jsonl: line 3 repeats line 1, line 4 repeats line 1 \(the "
                                                   r"same prompt, counterfactual and answer\): 2 of 4 pairs are repeats"):
        read_pairs_file(model, path)
    distinct = tmp_path / "distinct.jsonl"
    distinct.write_text("".join(json.dumps(p) + "\n" for p in PAIRS))
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error", RepeatedPairsWarning)  # pairs that differ say nothing
        read_pairs_file(model, distinct)
    out = tmp_path / "run"  # the command line says it in one line and goes on
    assert cli_main(["identify", "--model", str(tiny_dir("llama")), "--pairs-file", str(path),
                     "--no-filter-correct", "--force", "--no-progress", "--out", str(out)]) == 0
    assert "circuits identify: note: --pairs-file" in capsys.readouterr().err and (out / "summary.json").is_file()


def test_a_relative_pairs_file_is_recorded_as_what_was_read(tmp_path, monkeypatch):
    """Issue 41 (SILENT-WRONG): a relative ``--pairs-file`` was saved as typed, so read from another folder it named
    another file. The result records the file's absolute path, the SHA-256 of its bytes and the lines read (its pairs
    are in pairs.jsonl), and reading the result from another folder, beside another ``p.jsonl``, says the same."""
    import hashlib

    (tmp_path / "A").mkdir()
    (tmp_path / "B").mkdir()
    mine = tmp_path / "A" / "p.jsonl"
    mine.write_text("".join(json.dumps(p) + "\n" for p in PAIRS))
    (tmp_path / "B" / "p.jsonl").write_text(json.dumps(PAIRS[0]) + "\n")  # another file of the same name
    monkeypatch.chdir(tmp_path / "A")
    assert cli_main(["identify", "--model", str(tiny_dir("llama")), "--pairs-file", "p.jsonl", "--no-filter-correct",
                     "--force", "--no-progress", "--out", "res"]) == 0
    monkeypatch.chdir(tmp_path / "B")
    r = load_result(tmp_path / "A" / "res")
    assert r.pair_stats["pairs_file"] == {"path": str(mine.resolve()), "lines_read": 3,
                                          "sha256": hashlib.sha256(mine.read_bytes()).hexdigest()}
    assert [p.reference for p in r.pairs] == [p["prompt"] for p in PAIRS]
