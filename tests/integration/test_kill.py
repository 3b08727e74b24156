"""Jobs killed with SIGKILL at seeded points (during writes, and at random moments), then run again: the final
results equal an uninterrupted run's, and no temporary file or lock survives."""

from __future__ import annotations

import os
import random
import subprocess
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]

# `python -m circuits ARGS`, with the write step of circuits.io (called inside every atomic write and folder swap,
# before the rename that publishes it) replaced by one that SIGKILLs the process at its N-th call (N = argv[1]).
# The production code reads nothing from the environment for this.
KILL_AT_WRITE_STEP = """
import os, runpy, signal, sys
import circuits.io

kill_at, calls = int(sys.argv.pop(1)), [0]

def _write_step():
    calls[0] += 1
    if calls[0] == kill_at:
        os.kill(os.getpid(), signal.SIGKILL)

circuits.io._write_step = _write_step
sys.argv[0] = "circuits"
runpy.run_module("circuits", run_name="__main__", alter_sys=True)
"""


def _run(args: list[str], kill_at: int | None = None, kill_after: float | None = None) -> int:
    """Exit code of ``python -m circuits args``; ``kill_at`` kills it at that write step, ``kill_after`` after that
    many seconds."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    launch = ["-m", "circuits"] if kill_at is None else ["-c", KILL_AT_WRITE_STEP, str(kill_at)]
    proc = subprocess.Popen([sys.executable, *launch, *args], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    if kill_after is not None:
        try:
            proc.wait(kill_after)
        except subprocess.TimeoutExpired:
            proc.kill()
    _, err = proc.communicate(timeout=300)
    RUNS.append(f"kill_at={kill_at} kill_after={kill_after} -> {proc.returncode}: {err[-1500:]}")
    return proc.returncode


RUNS: list[str] = []  # each run's exit code and the end of its stderr, for the assertion messages


def _leftovers(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if ".lock" in p.name or "-tmp-" in p.name or "-old-" in p.name]


def _same_results(a: Path, b: Path) -> None:
    tasks = sorted(p.name for p in a.iterdir() if p.name != "_assets")  # _assets: the pages' shared plotly.js
    assert tasks == sorted(p.name for p in b.iterdir() if p.name != "_assets") == [
        "addition", "all", "division", "multiplication", "subtraction"]
    for t in tasks:
        if (a / t / "pooled.json").is_file():  # all/ reads its pairs and values from the operations' files
            from circuits.identify import IdentifyResult

            x, y = IdentifyResult.load(a / t), IdentifyResult.load(b / t)
            assert x.pairs == y.pairs, t
            for k in ("head_logit", "mlp_logit", "head_logit_diff"):
                assert torch.equal(x.sweep.tensors()[k], y.sweep.tensors()[k]), (t, k)
            continue
        assert (a / t / "pairs.jsonl").read_text() == (b / t / "pairs.jsonl").read_text(), t
        x, y = torch.load(a / t / "sweep.pt", weights_only=True), torch.load(b / t / "sweep.pt", weights_only=True)
        for k in ("head_logit", "mlp_logit", "head_logit_diff"):
            assert torch.equal(x[k], y[k]), (t, k)


def test_identify_all_survives_kills(tmp_path):
    from helpers import tiny_dir

    args = ["identify", "--task", "all", "--model", str(tiny_dir("llama")), "--pairs", "3", "--few-shot", "on",
            "--no-filter-correct", "--key-rule", "top2"]
    assert _run([*args, "--out", str(tmp_path / "straight")]) == 0
    rng = random.Random(0)
    out = tmp_path / "killed"
    # write steps (inside atomic writes and folder swaps), counted from each run's start; a resumed run has fewer left
    codes = [_run([*args, "--out", str(out)], kill_at=rng.randint(1, 14)) for _ in range(2)]
    assert codes[0] == -9 and set(codes) <= {0, -9}, RUNS[-2:]  # SIGKILL, mid-write
    t0 = time.time()
    _run([*args, "--out", str(out)], kill_after=rng.uniform(4.0, 9.0))  # and at a random moment
    assert time.time() - t0 < 120
    assert _run([*args, "--out", str(out)]) == 0, RUNS[-1]
    _same_results(tmp_path / "straight", out)
    assert _leftovers(tmp_path) == []


def test_finetune_survives_kills(tmp_path):
    from helpers import tiny_dir

    args = ["finetune", "--model", str(tiny_dir("llama")), "--heads", "1.0,2.3", "--data", "arithmetic",
            "--n-arithmetic", "24", "--batch-size", "4", "--micro-batch-size", "2", "--epochs", "1", "--lr", "1e-3",
            "--checkpoint-every", "1", "--no-progress", "--device", "cpu"]
    assert _run([*args, "--out", str(tmp_path / "straight")]) == 0
    rng = random.Random(1)
    out = tmp_path / "killed"
    codes = [_run([*args, "--out", str(out)], kill_at=rng.randint(2, 8)) for _ in range(2)]
    assert codes[0] == -9 and set(codes) <= {0, -9}
    assert _run([*args, "--out", str(out)]) == 0, RUNS[-1]
    a, b = torch.load(tmp_path / "straight" / "delta.pt", weights_only=True), torch.load(out / "delta.pt", weights_only=True)
    assert a["tensors"].keys() == b["tensors"].keys()
    assert all(torch.equal(a["tensors"][k], b["tensors"][k]) for k in a["tensors"])
    import json

    assert json.loads((out / "result.json").read_text())["losses"] == \
        json.loads((tmp_path / "straight" / "result.json").read_text())["losses"]
    assert _leftovers(tmp_path) == []
