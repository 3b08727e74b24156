"""Atomic files and folders, and typed results that know their kind and version."""

import json

import pytest

from circuits.io import atomic_dir, read_json, read_jsonl, write_json
from circuits.results import MARKER, RESULT_TYPES, ResultError, detect_kind, load_result, result_type
from circuits.validate.transfer import TransferResult
from circuits.types import Head


def test_failed_json_write_leaves_the_old_file_and_no_temp(tmp_path):
    path = write_json(tmp_path / "a.json", {"x": 1})
    with pytest.raises(TypeError):
        write_json(path, {"x": object()})
    assert read_json(path) == {"x": 1} and sorted(p.name for p in tmp_path.iterdir()) == ["a.json"]


def test_failed_folder_keeps_the_previous_result(tmp_path):
    out = tmp_path / "fig"
    with atomic_dir(out) as tmp:
        (tmp / "data.json").write_text("1")
    with pytest.raises(RuntimeError):
        with atomic_dir(out) as tmp:
            (tmp / "data.json").write_text("2")
            raise RuntimeError("interrupted")
    assert (out / "data.json").read_text() == "1" and sorted(p.name for p in tmp_path.iterdir()) == ["fig"]


def test_read_errors_name_the_file(tmp_path):
    (tmp_path / "x.json").write_text('{"a": ')
    with pytest.raises(ValueError, match=r"x.json is not valid JSON.*truncated"):
        read_json(tmp_path / "x.json")
    with pytest.raises(FileNotFoundError, match="y.json not found"):
        read_json(tmp_path / "y.json")
    (tmp_path / "p.jsonl").write_text('{"a": 1}\n{"a": ')
    with pytest.raises(ValueError, match=r"p.jsonl, line 2"):
        read_jsonl(tmp_path / "p.jsonl")


def _transfer() -> TransferResult:
    return TransferResult({"task": "addition", "n": 3}, {"svamp": {"n": 3, "accuracy_before": 0.5, "accuracy_after": 0.2}},
                          [Head(1, 2)], [Head(0, 0)], {"svamp": "Q?"})


def test_result_round_trip_marker_and_dispatch(tmp_path):
    out = _transfer().save(tmp_path / "t")
    assert json.loads((out / MARKER).read_text()) == {"kind": "transfer", "version": 1,
                                                     "files": ["circuits.json", "config.json", "data.json"]}
    assert json.loads((out / "config.json").read_text()) == {"task": "addition", "n": 3}
    back = load_result(out)
    assert isinstance(back, TransferResult) and back.key_heads == [Head(1, 2)] and back.examples == {"svamp": "Q?"}
    assert detect_kind(out) == "transfer" and detect_kind(tmp_path / "missing") is None


def test_wrong_kind_newer_version_and_empty_folders(tmp_path):
    out = _transfer().save(tmp_path / "t")
    from circuits.validate.knockout import KnockoutResult

    with pytest.raises(ResultError, match="holds a transfer result, not knockout"):
        KnockoutResult.load(out)
    write_json(out / MARKER, {"kind": "transfer", "version": 99})
    with pytest.raises(ResultError, match="newer circuits"):
        load_result(out)
    (tmp_path / "empty").mkdir()
    with pytest.raises(ResultError, match="holds no circuits result"):
        load_result(tmp_path / "empty")
    with pytest.raises(ResultError, match="Unknown result kind"):
        result_type("nope")


def test_every_kind_names_an_importable_class():
    for kind in RESULT_TYPES:
        assert result_type(kind).kind == kind
