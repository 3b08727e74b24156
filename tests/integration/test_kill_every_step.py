"""A SIGKILL at every write step of every command, then the same command again: the result equals an uninterrupted
run's (issue 30).

Every command of the job table (:data:`circuits.jobs.COMMANDS`: each writes a result, a page or a folder) runs on the
tiny model in a child forked from a fresh interpreter that imported the toolkit but ran no torch op and holds one
thread (tests/kill_steps.py: the zygote); it is killed with SIGKILL at a write step (``circuits.io._write_step``,
called inside every atomic write and folder swap before the rename that publishes it) and run again to the end. In
``make test`` the steps are the first, the last and two drawn with a seed named in any failure
(``kill_steps.chosen_steps``); in ``make test-kill``, which CI runs after ``make test``, every step. What the rerun
wrote must equal the straight run's (the same files; JSON, tensor and text files equal once the seconds a run
measures of itself are left out), and no temporary file, lock or per-process temporary folder may be left. A child
that hangs is killed after its timeout and fails the test. The TransformerLens 4.3 line runs a subset of the
commands (tests/backends/test_kill_steps_backends.py).
"""

from __future__ import annotations

import time

import pytest

from kill_steps import Zygote, commands, kill_every_step, stale_temps

from circuits.jobs import COMMANDS


@pytest.fixture(scope="module")
def zygote(tmp_path_factory):
    z = Zygote(tmp_path_factory.mktemp("zygote-logs"))
    yield z
    z.close()


@pytest.fixture(scope="module")
def table(zygote, tmp_path_factory):
    """The commands, with an identify result and a finetune's delta for those that read one."""
    from helpers import tiny_dir

    model, base = tiny_dir("llama"), tmp_path_factory.mktemp("kill-inputs")
    ident, ft = base / "addition", base / "ft"
    assert zygote.run(["identify", "--model", model, "--no-filter-correct", "--few-shot", "on", "--pairs", "3",
                       "--bootstrap", "0", "--receivers", "2.1,MLP1", "--no-progress", "--out", ident])["code"] == 0
    argv = commands(model, ident, ft / "delta.pt")["finetune"][0]
    assert zygote.run([*argv, "--out", ft])["code"] == 0
    return commands(model, ident, ft / "delta.pt")


def test_every_command_is_covered(table):
    """A command added to the job table without a line here fails this test (the table is read, not copied)."""
    assert sorted(j.name for j in COMMANDS) == sorted(table)


@pytest.mark.parametrize("job", [j.name for j in COMMANDS])
def test_a_kill_at_every_write_step_resumes_to_the_straight_result(job, zygote, table, tmp_path):
    argv, out_name = table[job]
    t0 = time.perf_counter()
    done = kill_every_step(zygote, job, argv, out_name, tmp_path)
    print(f"{job}: killed at {done['killed_at']}, {done['runs']} runs, {time.perf_counter() - t0:.1f} s, "
          f"{done['cpu']:.1f} CPU s")
    assert stale_temps() == []


def test_a_child_that_runs_past_its_timeout_fails_the_test_and_is_killed(zygote, table, tmp_path):
    """The harness itself: a hang is an assertion naming the command, never a blocked suite (a tiny identify takes
    well over 50 ms)."""
    from kill_steps import ZygoteError

    argv, out_name = table["identify"]
    with pytest.raises(ZygoteError, match="hung for 0 s"):
        zygote.run([*argv, "--out", tmp_path / out_name], timeout=0.05)
    assert zygote.run([*argv, "--out", tmp_path / "again"])["code"] == 0  # the zygote serves on
    assert stale_temps() == []  # and the next run removed the killed one's temporary folder
