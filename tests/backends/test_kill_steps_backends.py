"""A SIGKILL at every write step on TransformerLens 4.3's line too (issue 30): identify, faithfulness, stability and
finetune (the commands that keep parts or checkpoints while they work, and the one every other reads), each killed at
its first, second, ... write step in a child of a fresh interpreter and run again, must end with what a straight run
wrote and leave no lock or temporary (tests/kill_steps.py). On TransformerLens 3.9 every command of the job table
runs so in tests/integration/test_kill_every_step.py, so this file runs on the Bridge's line only."""

from __future__ import annotations

import pytest

from kill_steps import Zygote, commands, kill_every_step, stale_temps

from circuits.models import backend

pytestmark = pytest.mark.skipif(backend.installed().name != "bridge", reason="TransformerLens 3.9 runs every command in "
                                "tests/integration/test_kill_every_step.py")

SUBSET = ("identify", "faithfulness", "stability", "finetune")


@pytest.fixture(scope="module")
def zygote(tmp_path_factory):
    z = Zygote(tmp_path_factory.mktemp("zygote-logs"))
    yield z
    z.close()


@pytest.mark.parametrize("job", SUBSET)
def test_a_kill_at_every_write_step_resumes_on_this_line(job, zygote, tmp_path):
    from helpers import tiny_dir

    argv, out_name = commands(tiny_dir("llama"), tmp_path / "unused", tmp_path / "unused.pt")[job]
    done = kill_every_step(zygote, job, argv, out_name, tmp_path)
    print(f"{job}: killed at {done['killed_at']}, {done['runs']} runs, {done['cpu']:.1f} CPU s")
    assert done["steps"] >= 2
    assert stale_temps() == []
