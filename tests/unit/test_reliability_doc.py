"""docs/reliability.md stays true: every row marked *checked* is run as written, and the user sees what it says."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from circuits.cli import main as cli_main

DOC = Path(__file__).resolve().parents[2] / "docs" / "reliability.md"


def _rows() -> list[tuple[str, str, str]]:
    rows = []
    for line in DOC.read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 5 and cells[4] == "checked" and cells[1] != "command":
            rows.append((cells[0], cells[1].strip("`"), cells[2].replace("`", "")))
    return rows


ROWS = _rows()


_PAIR = '{"prompt": "2 + 3 = ", "counterfactual": "2 + 4 = ", "answer": "5"}\n'


def _given(text: str, root: Path) -> None:
    for name, held in re.findall(r"a folder `([^`/]+)/` holding `([^`]+)`", text):
        (root / name).mkdir()
        # a pairs file is one the command reads before its --out is checked: a pair, not just the user's bytes
        (root / name / held).write_text(_PAIR if held.endswith(".jsonl") else "mine")
    for name in re.findall(r"an empty folder `([^`/]+)/`", text):
        (root / name).mkdir()
    for name in re.findall(r"^a file `([^`]+)`", text):
        (root / name).write_text("mine")


def test_the_doc_has_checked_rows():
    assert len(ROWS) >= 15


@pytest.mark.parametrize("given, command, sees", ROWS, ids=[r[1] for r in ROWS])
def test_documented_case(tmp_path, monkeypatch, capsys, given, command, sees):
    from result_cases import write_identify

    monkeypatch.chdir(tmp_path)
    write_identify(tmp_path / "res", "addition")
    _given(given, tmp_path)
    before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    args = shlex.split(command)
    assert args[0] == "circuits"
    assert cli_main(args[1:]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    parts = [p.strip() for p in sees.split("...") if p.strip()]
    position = 0
    for part in parts:
        found = err.find(part, position)
        assert found >= 0, f"expected {part!r} in: {err}"
        position = found + len(part)
    after = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    assert after == before, "the command changed files"
