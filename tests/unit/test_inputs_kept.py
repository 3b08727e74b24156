"""Issue 41, the file side: an ``--out`` never replaces nor nests inside the command's own inputs (``--pairs-file``,
``--heads-from``), refused in one line before any work; ``read_jsonl`` as safe as ``read_json`` (deep nesting, a
byte-order mark); token ids and config fields read from a file checked against what they claim, in one line naming
the file and the field."""

from __future__ import annotations

import json

import pytest
from helpers import tiny_dir

from circuits.cli import main as cli_main
from circuits.io import read_json, read_jsonl

PAIR = {"prompt": "3 + 4 = ", "counterfactual": "3 @ 4 = ", "answer": "7"}


def _one_line(capsys) -> str:
    err = capsys.readouterr().err
    err = "".join(line for line in err.splitlines(True) if "Loading weights" not in line)  # transformers' bar
    assert err.count("\n") == 1 and "bug" not in err and "Traceback" not in err, err
    return err


def test_overwrite_never_deletes_the_pairs_file_it_reads(tmp_path, capsys):
    proj = tmp_path / "proj"
    proj.mkdir()
    pairs = proj / "p.jsonl"
    pairs.write_text(json.dumps(PAIR) + "\n")
    for overwrite in ([], ["--overwrite"]):
        code = cli_main(["identify", "--model", "no-such-model", "--pairs-file", str(pairs), "--no-progress",
                         "--out", str(proj), *overwrite])
        assert code == 2
        assert "--pairs-file" in _one_line(capsys)
        assert pairs.read_text() == json.dumps(PAIR) + "\n"
    # the pairs file as the --out itself, or a result named like one of identify's own files
    assert cli_main(["identify", "--model", "no-such-model", "--pairs-file", str(pairs), "--out", str(pairs),
                     "--overwrite"]) == 2
    assert "would replace --pairs-file" in _one_line(capsys) and pairs.is_file()


def test_an_out_inside_the_heads_from_folder_is_refused(tmp_path, capsys):
    from result_cases import write_identify

    ident = write_identify(tmp_path / "id")
    before = sorted(p.name for p in ident.iterdir())
    for out, why in ((ident / "ko", "lies inside --heads-from"), (ident, "would replace --heads-from")):
        assert cli_main(["knockout", "--heads-from", str(ident), "--no-progress", "--out", str(out),
                         "--overwrite"]) == 2
        assert why in _one_line(capsys)
    assert cli_main(["positions", "--pairs-from", str(ident), "--no-progress", "--out", str(ident / "pos")]) == 2
    assert "lies inside --pairs-from" in _one_line(capsys)
    assert sorted(p.name for p in ident.iterdir()) == before


@pytest.mark.parametrize("reader", ["read_jsonl", "read_pairs", "read_pairs_file"])
def test_a_deeply_nested_jsonl_line_names_the_file_and_line(tmp_path, reader):
    from circuits.data import pairs as P

    path = tmp_path / "pairs.jsonl"
    path.write_text(json.dumps(PAIR) + "\n" + "[" * 100_000 + "\n")
    read = {"read_jsonl": read_jsonl, "read_pairs": P.read_pairs,
            "read_pairs_file": lambda p: P.read_pairs_file(None, p)}[reader]
    with pytest.raises(ValueError, match=r"pairs\.jsonl, line 2: nested too deeply"):
        read(path)


def test_a_byte_order_mark_is_read_as_text(tmp_path):
    path = tmp_path / "pairs.jsonl"
    path.write_text(json.dumps(PAIR) + "\n", encoding="utf-8-sig")
    assert path.read_bytes().startswith(b"\xef\xbb\xbf")
    assert read_jsonl(path) == [PAIR]
    path.write_text(json.dumps(PAIR), encoding="utf-8-sig")
    assert read_json(path) == PAIR


def _identify(tmp_path):
    out = tmp_path / "id"
    assert cli_main(["identify", "--model", str(tiny_dir("llama")), "--no-filter-correct", "--few-shot", "on",
                     "--pairs", "3", "--bootstrap", "0", "--force", "--no-progress", "--out", str(out)]) == 0
    return out


def _edit_first_pair(path, **changes):
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    rows[0].update(changes)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_an_out_of_range_answer_token_id_names_the_file_and_field(tmp_path, capsys):
    from circuits.data.pairs import read_pairs

    ident = _identify(tmp_path)
    capsys.readouterr()
    pairs = ident / "pairs.jsonl"
    _edit_first_pair(pairs, answer_token_id=10**6)  # beyond the tiny model's vocabulary
    assert cli_main(["knockout", "--heads-from", str(ident), "--ks", "0,1", "--seeds", "0", "--no-progress",
                     "--out", str(tmp_path / "ko")]) == 2
    err = _one_line(capsys)
    assert "pairs.jsonl, pair 1: answer_token_id holds token id 1000000" in err
    assert not (tmp_path / "ko").exists()
    for bad in (-1, "7", 1.5):  # a negative id would index the vocabulary from its end, silently
        _edit_first_pair(pairs, answer_token_id=bad)
        with pytest.raises(ValueError, match=r"pairs\.jsonl, line 1: answer_token_id must be a token id"):
            read_pairs(pairs)


def test_a_config_field_of_the_wrong_type_names_the_config(tmp_path):
    from result_cases import write_identify

    from circuits.results import ResultError, load_result

    ident = write_identify(tmp_path / "id")
    config = json.loads((ident / "config.json").read_text())
    (ident / "config.json").write_text(json.dumps({**config, "model": 5}))
    with pytest.raises(ResultError, match=r"config\.json is not a valid IdentifyConfig: field 'model' is 5 \(int\)"):
        load_result(ident)


def test_a_result_of_another_kind_is_named_with_its_article(tmp_path):
    """Issue 41 ("Also"): a message read "holds a identify result"."""
    from result_cases import write_identify

    from circuits.results import ResultError, a_kind, check_output
    from circuits.validate.knockout import KnockoutResult

    folder = write_identify(tmp_path, "addition")
    with pytest.raises(ResultError, match=r"holds an identify result, not knockout"):
        KnockoutResult.load(folder)
    with pytest.raises(ValueError, match=r"already holds an identify result; a knockout job only replaces"):
        check_output(folder, "knockout")
    assert [a_kind(k) for k in ("identify", "evaluate", "screen", "attention-views")] == [
        "an identify", "an evaluate", "a screen", "an attention-views"]
