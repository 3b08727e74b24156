"""Bad input under torchrun (2 processes, CPU, gloo) is one line and one exit code (issue 22).

``torchrun`` itself always adds its ``ChildFailedError`` traceback when a worker fails; the workers print the one
line once (rank 0), and ``python -m circuits.torchrun`` (torchrun's launcher, same arguments) ends with that line
and the workers' exit code alone."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TIMEOUT_S = 300


def _launch(tmp_path, launcher: list[str], *command: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "CIRCUITS_THREADS": "1", "PYTHONPATH": str(ROOT)}
    env.pop("CIRCUITS_DEBUG", None)
    return subprocess.run([sys.executable, "-m", *launcher, "--standalone", "--nproc-per-node", "2", "-m", "circuits",
                           *command], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=TIMEOUT_S)


@pytest.mark.parametrize("command, line", [
    (["identify", "--pairs", "0", "--out", "proj"], "circuits identify: error: --pairs 0: must be at least 1"),
    (["finetune", "--heads", "1.0", "--batch-size", "1", "--out", "run"],  # the case
     "circuits finetune: error: batch_size (1) must be a positive multiple of micro_batch_size"),
    (["finetune", "--heads", "1.0", "--batch-size", "3", "--micro-batch-size", "1", "--out", "run"],
     "circuits finetune: error: the global batch (3) does not split over 2 processes"),
])
def test_bad_input_is_one_line_with_circuits_torchrun(tmp_path, command, line):
    proc = _launch(tmp_path, ["circuits.torchrun"], *command)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith(line) and proc.stderr.count("\n") == 1, proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout and list(tmp_path.iterdir()) == []


def test_under_plain_torchrun_the_workers_say_it_once(tmp_path):
    proc = _launch(tmp_path, ["torch.distributed.run"], "identify", "--pairs", "0", "--out", "proj")
    assert proc.returncode != 0
    first = proc.stderr.splitlines()[0]
    assert first == "circuits identify: error: --pairs 0: must be at least 1", proc.stderr
    assert proc.stderr.count("circuits identify: error") == 1  # rank 0 only; the rest is torchrun's own summary
    assert list(tmp_path.iterdir()) == []
