"""Per-field type checks on every result kind's read (issue 30): each number a result's JSON files hold, replaced by a
string, either makes ``load`` one :class:`ResultError` line naming the file and the field, or is a value the result
does not read back (it loads equal to the original). Never a raw TypeError, never a string where a number was."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from result_cases import build_results

from circuits.results import MARKER, RESULT_TYPES, ResultError, result_type

SKIP = {"config.json", MARKER}  # the config is checked by its own reader (tests/unit/test_results_io.py)


@pytest.fixture(scope="module")
def saved(tiny_llama, tmp_path_factory):
    root = tmp_path_factory.mktemp("field-types")
    results = build_results(tiny_llama, root / "jobs")
    return {k: (r, r.save(root / k)) for k, r in results.items()}


def numeric_paths(value, path=()):
    """Every number's path in a JSON value, (a few per list: the first and the last)."""
    if isinstance(value, bool):
        return
    if isinstance(value, (int, float)):
        yield path
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from numeric_paths(v, (*path, k))
    elif isinstance(value, list) and value:
        for i in sorted({0, len(value) - 1}):
            yield from numeric_paths(value[i], (*path, i))


def replaced(value, path, new):
    if not path:
        return new
    out = list(value) if isinstance(value, list) else dict(value)
    out[path[0]] = replaced(value[path[0]], path[1:], new)
    return out


def cases(saved):
    for kind, (r, folder) in saved.items():
        for f in sorted(Path(folder).rglob("*.json")):
            if f.name in SKIP:
                continue
            data = json.loads(f.read_text())
            for p in numeric_paths(data):
                yield kind, f, p


@pytest.mark.parametrize("kind", list(RESULT_TYPES))
def test_a_string_where_a_number_is_is_one_result_error_or_unread(saved, kind, tmp_path):
    r, folder = saved[kind]
    cls = result_type(kind)
    files = [f for f in sorted(Path(folder).rglob("*.json")) if f.name not in SKIP]
    silent = []
    for f in files:
        original = f.read_text()
        data = json.loads(original)
        for p in list(numeric_paths(data)):
            f.write_text(json.dumps(replaced(data, p, "<b>fast</b>")))
            try:
                back = cls.load(folder)
            except ResultError as err:
                text = str(err)
                # one line naming the file, or the result's folder and the field
                assert "\n" not in text and (f.name in text or f"{folder}: field " in text), (kind, f.name, p, text)
            except Exception as err:  # noqa: BLE001
                pytest.fail(f"{kind}: {f.name} {list(p)} as a string: {type(err).__name__}: {err}")
            else:
                if not back == r:
                    silent.append(f"{f.name} {list(p)}")
            finally:
                f.write_text(original)
    assert not silent, f"{kind}: a string read back where a number was: {silent}"


def test_a_wrong_value_inside_an_optional_field_is_named_not_the_union():
    """A screen summary's ``audit`` (``dict[str, Any] | None``) holding a string where a number is: the line names
    ``audit.n_components`` and what is there, not the union the dict as a whole did not fit."""
    from typing import Any

    from circuits.results import _mismatch

    msg = _mismatch({"n_components": "<script>x</script>"}, dict[str, Any] | None, "audit")
    assert msg is not None and msg.startswith("audit.n_components is '<script>") and "not" in msg, msg
    assert _mismatch(5, dict[str, Any] | None, "audit").startswith("audit is 5 (int), not")
    assert _mismatch(None, dict[str, Any] | None, "audit") is None


def test_a_result_file_that_is_a_json_list_is_named(saved, tmp_path):
    """An identify ``summary.json`` replaced by a JSON list: one line naming that file, not a raw AttributeError."""
    import shutil

    from circuits.results import load_result

    folder = tmp_path / "ident"
    shutil.copytree(saved["identify"][1], folder)
    (folder / "summary.json").write_text(json.dumps([1, 2, 3]))
    with pytest.raises(ResultError) as err:
        load_result(folder)
    line = str(err.value)
    assert "summary.json: a JSON list, not the object the identify result writes" in line and "\n" not in line and "AttributeError" not in line
