"""Ctrl-C while Python's ``site`` module runs the ``.pth`` files of the environment (issue 41, TRACEBACK: on the
TransformerLens 4 venv, SIGINT 0.05-0.15 s after start printed "Fatal Python error: init_import_site" and a traceback
inside the editable install's finder). That is Python's own start-up, before ``-m circuits`` is even looked up: any
program started there, ``python -c pass`` included, ends the same way, and no code of the toolkit can run before it
(docs/reliability.md). The interrupt is made deterministic here: a ``.pth`` file sends SIGINT to its own process while
``site`` processes it, as a Ctrl-C landing at that moment would."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import sysconfig
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_an_interrupt_inside_site_is_pythons_own_fatal_error_before_any_toolkit_code(tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=300)
    python = venv / "bin" / "python"
    # the new environment's own site-packages (asked of its python with site on, before any .pth is written): the
    # file below must never land in an interpreter other tests or programs use
    purelib = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                  capture_output=True, text=True, check=True).stdout.strip())
    assert purelib.is_relative_to(venv) and purelib != Path(sysconfig.get_paths()["purelib"]), purelib
    # sorted before every other .pth file: the moment an editable install's finder would be imported
    (purelib / "00-interrupt.pth").write_text("import os, signal; os.kill(os.getpid(), signal.SIGINT)\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = tmp_path / "res"
    # a Ctrl-C at a terminal: SIGINT at its default, as Python finds it there (a shell starts a background job with
    # SIGINT ignored, and Python then installs no KeyboardInterrupt handler: the .pth's signal would do nothing)
    runs = {name: subprocess.run([str(python), *argv], env=env, capture_output=True, text=True, timeout=300,
                                 preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
            for name, argv in (("circuits", ["-m", "circuits", "identify", "--out", str(out)]),
                               ("plain", ["-c", "pass"]))}
    for run in runs.values():
        assert run.returncode == 1 and run.stdout == ""
        assert run.stderr.startswith("Fatal Python error: init_import_site: Failed to import the site module")
        assert "KeyboardInterrupt" in run.stderr
    # the same lines, word for word, for `-m circuits` and for `-c pass`: nothing of the toolkit was reached
    assert runs["circuits"].stderr == runs["plain"].stderr
    assert "circuits" not in runs["circuits"].stderr and not out.exists()
