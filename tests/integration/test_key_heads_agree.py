"""``circuits identify``, the figure scripts and the notebook's calls name the same key heads for the same task,
seed and size, each computed on its own; and ``make demo``'s results are what the figure scripts reuse."""

import json

import _common as C
from helpers import shared_cli_run

import circuits as cc
from circuits.identify import IdentifyResult
from circuits.patching import DEFAULT_KEY_RULE

N_PAIRS = 8


def test_cli_figures_and_notebook_agree(smollm2, tmp_path, monkeypatch):
    monkeypatch.setattr(C, "model_for", lambda name, dtype="float32": smollm2)  # one load for the test
    # the command line's run, shared with tests/backends/test_consumers.py (the same command: run once per test run)
    cli_out = shared_cli_run(["identify", "--task", "addition", "--pairs", str(N_PAIRS)])
    cli = [(l, h) for l, h, _ in json.loads((cli_out / "summary.json").read_text())["key_heads"]]
    assert cli, "the CLI found key heads"

    figures = C.identify_result(C.KeyHeadConfig(n_pairs=N_PAIRS, identify_dir=str(tmp_path / "figures")))
    assert [tuple(h) for h, _ in figures.key_heads()] == cli

    # the tour notebook's cells: build pairs, sweep, the key rule
    pairs = cc.build_pairs(smollm2, "addition", n_pairs=N_PAIRS, seed=0)
    notebook = cc.sweep(smollm2, pairs, progress=False).scores().key(DEFAULT_KEY_RULE)
    assert [tuple(h) for h, _ in notebook] == cli

    # a figure script finds the CLI's folder and reuses it instead of recomputing
    shared = C.KeyHeadConfig(n_pairs=N_PAIRS, identify_dir=str(tmp_path))
    (tmp_path / "addition").mkdir()
    for f in cli_out.iterdir():  # its files (its _assets folder holds only heads.html's plotly.js)
        if f.is_file():
            (tmp_path / "addition" / f.name).write_bytes(f.read_bytes())
    stamp = (tmp_path / "addition" / "summary.json").stat().st_mtime_ns
    assert C.identify_result(shared).scores().ranked(part="heads") == IdentifyResult.load(cli_out).scores().ranked(part="heads")
    assert (tmp_path / "addition" / "summary.json").stat().st_mtime_ns == stamp
