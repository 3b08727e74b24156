"""The kill harness (tests/kill_steps.py): it reads the zygote's replies line by line from the pipe, and it picks the
write steps a run is killed at. Two children that end in the same turn of the zygote's loop write two replies at
once: both must be read, the second without waiting. A buffered file object under ``select`` lost the second one
(CI, 2026-11-28: "the zygote gave no answer within 180 s", then every later reply taken for another request's)."""

from __future__ import annotations

import os

from kill_steps import Lines


def test_two_replies_written_at_once_are_both_read_without_waiting():
    r, w = os.pipe()
    try:
        os.write(w, b'{"id": 1}\n{"id": 2}\n{"id"')
        lines = Lines(r)
        assert lines.next(5.0) == '{"id": 1}'
        assert lines.next(0.0) == '{"id": 2}'  # already read: no select, no wait
        assert lines.next(0.05) is None  # half a line: not a reply yet
        os.write(w, b': 3}\n')
        assert lines.next(5.0) == '{"id": 3}'
    finally:
        os.close(r)
        os.close(w)


def test_a_closed_pipe_is_no_reply():
    r, w = os.pipe()
    os.close(w)
    try:
        assert Lines(r).next(5.0) is None
    finally:
        os.close(r)


def test_the_sampled_steps_are_the_first_the_last_and_two_drawn_reproducibly(monkeypatch):
    import kill_steps

    monkeypatch.delenv("CIRCUITS_KILL_ALL", raising=False)
    ks, how = kill_steps.chosen_steps(14, "heuristics")
    assert ks[0] == 1 and ks[-1] == 14 and len(ks) == 4 and ks == sorted(set(ks))
    assert f"CIRCUITS_KILL_SEED={kill_steps.SEED}" in how  # a failure names how to draw the same steps again
    assert kill_steps.chosen_steps(14, "heuristics") == (ks, how)
    monkeypatch.setattr(kill_steps, "SEED", kill_steps.SEED + 1)
    draws = {tuple(kill_steps.chosen_steps(40, f"job{i}")[0]) for i in range(20)}
    assert len(draws) > 1  # the middle steps are drawn, not fixed
    assert kill_steps.chosen_steps(1, "x")[0] == [1] and kill_steps.chosen_steps(3, "x")[0] == [1, 2, 3]
    monkeypatch.setenv("CIRCUITS_KILL_ALL", "1")
    assert kill_steps.chosen_steps(14, "heuristics")[0] == list(range(1, 15))
