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
