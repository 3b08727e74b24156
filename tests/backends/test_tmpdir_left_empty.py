"""A command leaves nothing in $TMPDIR, on both TransformerLens lines (issue 30): ``import transformer_lens`` made
``$TMPDIR/torchinductor_<user>`` (torch._dynamo's compile cache) in every run outside the tests; a SIGKILLed run's
temporary folders (``circuits-run-<pid>-*``, evaluate's ``circuits-eval-<pid>-*``) stayed for good. Now torch's
cache lives in the process's own temporary folder, removed at its end, and the next run removes a killed one's."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

from helpers import tiny_dir

from circuits._startup import TEMP_PREFIXES

ROOT = Path(__file__).resolve().parents[2]

# `python -m circuits ARGS` SIGKILLed at its first write step (as tests/integration/test_kill.py does it).
KILL_AT_FIRST_WRITE = """
import os, runpy, signal, sys
import circuits.io
circuits.io._write_step = lambda: os.kill(os.getpid(), signal.SIGKILL)
sys.argv[0] = "circuits"
runpy.run_module("circuits", run_name="__main__", alter_sys=True)
"""


def _circuits(args: list[str], tmpdir: Path, kill: bool = False) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR")}
    env.update(TMPDIR=str(tmpdir), PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    launch = ["-c", KILL_AT_FIRST_WRITE] if kill else ["-m", "circuits"]
    return subprocess.run([sys.executable, *launch, *args], env=env, capture_output=True, text=True, timeout=600)


def test_identify_leaves_tmpdir_empty_and_removes_what_a_killed_run_left(tmp_path):
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    args = ["identify", "--model", str(tiny_dir("llama")), "--pairs", "2", "--few-shot", "on", "--no-filter-correct",
            "--no-progress", "--out", str(tmp_path / "res")]
    done = _circuits(args, tmpdir)
    assert done.returncode == 0, done.stderr[-2000:]
    assert sorted(os.listdir(tmpdir)) == []  # no torchinductor_<user>, nothing else
    args[-1] = str(tmp_path / "res2")  # a new result (the first is finished: a rerun there writes nothing)
    killed = _circuits(args, tmpdir, kill=True)
    assert killed.returncode == -9, killed.stderr[-2000:]
    left = sorted(os.listdir(tmpdir))  # SIGKILL runs no clean-up: its own folder (and the model's config folder)
    assert any(n.startswith("circuits-run-") for n in left) and all(n.startswith(TEMP_PREFIXES) for n in left), left
    done = _circuits(args, tmpdir)
    assert done.returncode == 0, done.stderr[-2000:]
    assert sorted(os.listdir(tmpdir)) == []


def test_only_the_folders_of_processes_that_are_gone_are_removed(tmp_path, monkeypatch):
    from circuits._startup import remove_stale_temps

    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    names = [f"circuits-run-{gone.pid}-abc", f"circuits-eval-{gone.pid}-def", f"circuits-run-{os.getppid()}-live",
             f"circuits-eval-{os.getpid()}-mine", "circuits-run-x-notapid", "torchelastic_users", "notes",
             f"circuits-hf-config-{gone.pid}-ghi"]
    for n in names:
        (tmp_path / n).mkdir()
    (tmp_path / names[0] / "torchinductor").mkdir()
    removed = remove_stale_temps()
    assert sorted(Path(p).name for p in removed) == sorted([*names[:2], names[-1]])
    assert sorted(os.listdir(tmp_path)) == sorted(names[2:-1])


LOAD_FROM_PYTHON = """
import os, sys
from circuits.models import load_model
model = load_model(sys.argv[1], device="cpu")
left = sorted(os.listdir(os.environ["TMPDIR"]))
from circuits.threads import _default_compile_cache
from torch._inductor.runtime.cache_dir_utils import cache_dir, default_cache_dir
assert _default_compile_cache() == default_cache_dir(), (_default_compile_cache(), default_cache_dir())
made = os.path.isdir(cache_dir())  # torch makes its cache folder again when it needs it
print("LEFT", left, made)
"""


def test_load_model_from_python_leaves_no_empty_torchinductor_folder(tmp_path):
    """A script or notebook that only loads a model (no command line, so no private cache folder): importing
    TransformerLens made an empty ``$TMPDIR/torchinductor_<user>`` that stayed (issue 41, LITTER); now the import
    removes the folder it made while it is empty, and torch makes it again when it compiles something."""
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR")}
    env.update(TMPDIR=str(tmpdir), PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    done = subprocess.run([sys.executable, "-c", LOAD_FROM_PYTHON, str(tiny_dir("llama"))], env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "LEFT [] True" in done.stdout, done.stdout
    os.rmdir(tmpdir / f"torchinductor_{__import__('getpass').getuser()}")  # the one torch made again, on request
    assert os.listdir(tmpdir) == []
