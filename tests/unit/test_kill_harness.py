"""The kill harness reads the zygote's replies line by line from the pipe (tests/kill_steps.py). Two children that
end in the same turn of the zygote's loop write two replies at once: both must be read, the second without waiting.
A buffered file object under ``select`` lost the second one (CI, 2026-11-28: "the zygote gave no answer within
180 s", then every later reply taken for another request's)."""

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
