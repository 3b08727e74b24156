"""Thread count of the entry points: CIRCUITS_THREADS, then OMP_NUM_THREADS, then the cores in the affinity mask."""

import os

import pytest
import torch

from circuits.threads import available_cores, configure_threads, thread_count


def test_thread_count_precedence(monkeypatch):
    monkeypatch.delenv("CIRCUITS_THREADS", raising=False)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    assert thread_count() == available_cores() == len(os.sched_getaffinity(0))
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    assert thread_count() == 3
    monkeypatch.setenv("CIRCUITS_THREADS", "1")
    assert thread_count() == 1
    monkeypatch.setenv("CIRCUITS_THREADS", "two")
    with pytest.raises(ValueError, match="CIRCUITS_THREADS='two' is not a thread count"):
        thread_count()


def test_configure_threads_sets_torch(monkeypatch):
    before = torch.get_num_threads()
    monkeypatch.setenv("CIRCUITS_THREADS", "1")
    try:
        assert configure_threads() == 1 and torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)


def _policy_after(code: str) -> str:
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    return subprocess.run([sys.executable, "-c", code + "; import os; print(os.environ.get('OMP_WAIT_POLICY'))"],
                          env=env, capture_output=True, text=True, check=True).stdout.strip()


def test_import_circuits_sets_passive_waiting_only_before_torch():
    assert _policy_after("import circuits") == "PASSIVE"
    assert _policy_after("import torch, circuits") == "None"  # too late to apply: left alone, use_threads warns


def test_use_threads(monkeypatch):
    from circuits.threads import use_threads

    before = torch.get_num_threads()
    monkeypatch.setenv("CIRCUITS_THREADS", "1")
    monkeypatch.setenv("OMP_WAIT_POLICY", "PASSIVE")
    try:
        assert use_threads() == 1 and torch.get_num_threads() == 1
        assert use_threads(2) == 2 and torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
    monkeypatch.delenv("OMP_WAIT_POLICY")
    with pytest.warns(UserWarning, match="torch was imported before circuits"):
        use_threads(before)
    for bad in (0, "2", True):
        with pytest.raises(ValueError, match="n is a positive integer"):
            use_threads(bad)
