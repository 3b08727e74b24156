"""Provenance (issue 29): the same tiny identify job run under TransformerLens 3.9 (``.venv``, HookedTransformer) and
4.3 (``.venv-tl4``, TransformerBridge) saves results that differ in their provenance and nothing else: the same
config.json, the same pairs, the same key heads, effects within float error; their markers differ only in the
backend and library versions they record, and the report's made-by line reads each one back."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from helpers import tiny_dir

from circuits.results import MARKER, load_result
from circuits.versions import provenance_line

ROOT = Path(__file__).resolve().parents[2]
VENVS = {"hooked": os.environ.get("CIRCUITS_VENV3", ROOT / ".venv"),
         "bridge": os.environ.get("CIRCUITS_VENV4", ROOT / ".venv-tl4")}


def _python(venv: str | Path) -> Path:
    venv = Path(venv)
    return (venv if venv.is_absolute() else ROOT / venv) / "bin" / "python"


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    missing = [str(_python(v)) for v in VENVS.values() if not _python(v).is_file()]
    if missing:
        pytest.skip(f"both TransformerLens lines are needed (make install; make install TL=4): no {', '.join(missing)}")
    root = tmp_path_factory.mktemp("lines")
    model = tiny_dir("llama")
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONHOME")}
    env["PYTHONPATH"] = str(ROOT)  # this checkout's circuits in both venvs
    for name, venv in VENVS.items():
        argv = [str(_python(venv)), "-m", "circuits", "identify", "--model", str(model), "--no-filter-correct",
                "--few-shot", "on", "--no-progress", "--pairs", "3", "--out", str(root / name)]
        proc = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
        assert proc.returncode == 0, f"{name}: {proc.stderr[-3000:]}"
    return root


def test_two_lines_differ_in_provenance_and_nothing_else(runs):
    a, b = load_result(runs / "hooked"), load_result(runs / "bridge")
    pa, pb = a.provenance, b.provenance
    assert pa["backend"] == "hooked" and pb["backend"] == "bridge"
    assert pa["transformer_lens"].startswith("3.9") and pb["transformer_lens"].startswith("4.")
    assert pa["commit"] == pb["commit"] and pa["circuits"] == pb["circuits"]  # one checkout made both
    # the config, the pairs and the ranking are identical; effects agree within float error
    assert (runs / "hooked" / "config.json").read_text() == (runs / "bridge" / "config.json").read_text()
    assert a.config == b.config and a.pairs == b.pairs
    assert [h for h, _ in a.key_heads()] == [h for h, _ in b.key_heads()]
    torch.testing.assert_close(torch.tensor([e for _, e in a.key_heads()]),
                               torch.tensor([e for _, e in b.key_heads()]), atol=1e-2, rtol=1e-3)
    for part in ("heads", "mlps"):
        for field in ("logit", "logit_diff", "prob"):
            x, y = getattr(getattr(a.sweep, part), field), getattr(getattr(b.sweep, part), field)
            torch.testing.assert_close(x, y, atol=1e-4, rtol=1e-4, equal_nan=True)
    ma, mb = (json.loads((runs / n / MARKER).read_text()) for n in ("hooked", "bridge"))
    assert {k: v for k, v in ma.items() if k != "provenance"} == {k: v for k, v in mb.items() if k != "provenance"}
    # ("dirty" may flip when the checkout is edited between the two runs)
    assert {k for k in pa if pa[k] != pb[k]} <= {"backend", "transformer_lens", "transformers", "torch", "dirty"}
    assert "hooked backend, TransformerLens 3.9" in provenance_line(pa)
    assert "bridge backend, TransformerLens 4." in provenance_line(pb)


def test_the_report_names_each_runs_provenance(runs, tmp_path):
    from circuits.viz.report import build_report

    page = build_report([runs / "hooked", runs / "bridge"])
    assert "hooked backend, TransformerLens 3.9" in page and "bridge backend, TransformerLens 4." in page
    assert sys.executable  # the report itself runs in this venv; the lines were only read
