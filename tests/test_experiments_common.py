"""experiments/_common.py: saving a result replaces its folder atomically, with the config beside the data."""

from __future__ import annotations

import importlib.util
import json
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _common():
    spec = importlib.util.spec_from_file_location("experiments_common", ROOT / "experiments" / "_common.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while building the class
    spec.loader.exec_module(module)
    return module


@dataclass(frozen=True)
class Config:
    task: str = "addition"
    ks: tuple = (0, 1)


def test_save_replaces_the_folder_atomically(tmp_path):
    C = _common()
    out = tmp_path / "fig"
    C.save(out, Config(), {"x": 1}, files={"figure.html": "<p>1</p>"})
    (out / "stale.txt").write_text("from an older run")
    C.save(out, Config(task="division"), {"x": 2})
    assert json.loads((out / "config.json").read_text())["task"] == "division"
    assert C.load(out) == {"x": 2}
    assert not (out / "stale.txt").exists() and not (out / "figure.html").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fig"]  # no temporary folders left


def test_failed_save_keeps_the_previous_result(tmp_path):
    C = _common()
    out = tmp_path / "fig"
    C.save(out, Config(), {"x": 1})
    with pytest.raises(TypeError):
        C.save(out, Config(), {"x": object()})  # not JSON
    assert C.load(out) == {"x": 1}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fig"]
