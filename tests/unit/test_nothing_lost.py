"""Issue 22, "nothing lost, nothing executed": each case reproduced as the issue found it (each fails on main at
a6df868). No job deletes or replaces what it did not write; nothing a user may receive from someone else is
unpickled; errors, Ctrl-C and a full disk are one line each."""

from __future__ import annotations

import json
import os
import pickle
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from circuits.cli import main as cli_main
from helpers import tiny_dir

ROOT = Path(__file__).resolve().parents[2]
TINY = ["--model", str(tiny_dir("llama")), "--no-filter-correct", "--few-shot", "on"]


def _sigint_default() -> None:
    """In the child: SIGINT's default disposition, so Python installs its handler even where this run's own SIGINT is
    ignored (a suite started in the background with `&` passes SIG_IGN on, and the Ctrl-C under test would never
    arrive)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _identify(out, *extra, pairs=3):
    return cli_main(["identify", *TINY, "--pairs", str(pairs), *extra, "--out", str(out)])


def _tree(root: Path) -> dict[str, bytes | None]:
    """Every path under ``root`` (dot-files too) with its bytes (None for a folder)."""
    return {str(p.relative_to(root)): (p.read_bytes() if p.is_file() else None) for p in root.rglob("*")}


def _one_error(capsys) -> str:
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip() and "it/s]" not in line]  # the model loader's progress bar aside
    assert len(lines) == 1, err
    return lines[0] + "\n"


class WritesAFile:
    """A pickle payload: unpickling it creates ``path`` (the test fails if it ever appears)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self):
        return (os.system, (f"touch {self.path}",))


# --- data loss ------------------------------------------------------------------------------------------------


def test_a_folder_of_dot_files_is_not_empty(tmp_path, capsys):
    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    (repo / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (repo / ".env").write_text("secret")
    before = _tree(tmp_path)
    capsys.readouterr()
    assert _identify(repo) == 2
    assert "--out" in _one_error(capsys) and _tree(tmp_path) == before
    evdot = tmp_path / "evdot"
    evdot.mkdir()
    (evdot / ".env").write_text("secret")
    before = _tree(tmp_path)
    assert cli_main(["evaluate", "--model", str(tiny_dir("llama")), "--tasks", "arithmetic", "--limit", "2",
                     "--out", str(evdot)]) == 2
    assert "already holds files circuits did not write" in _one_error(capsys) and _tree(tmp_path) == before


def test_a_rerun_keeps_a_nested_result_and_the_users_notes(tmp_path, capsys):
    outer = tmp_path / "outerA"
    assert _identify(outer) == 0
    assert _identify(outer, "--seed", "1") == 0  # a folder holding only its own result is replaced
    assert json.loads((outer / "config.json").read_text())["seed"] == 1
    assert _identify(outer / "nestedB", "--task", "subtraction") == 0
    before = _tree(tmp_path)
    capsys.readouterr()
    assert _identify(outer, "--seed", "2") == 2
    err = _one_error(capsys)
    assert "holds nestedB/ beside its identify result" in err and _tree(tmp_path) == before
    (outer / "nestedB").rename(tmp_path / "nestedB")
    (outer / "NOTES.md").write_text("what I saw")
    before = _tree(tmp_path)
    assert _identify(outer, "--seed", "2") == 2
    assert "holds NOTES.md beside" in _one_error(capsys) and _tree(tmp_path) == before
    (outer / "NOTES.md").unlink()
    assert _identify(outer, "--seed", "2") == 0


def test_a_result_saved_before_markers_listed_files_keeps_foreign_files(tmp_path):
    from result_cases import write_identify

    from circuits.io import OutputError
    from circuits.results import MARKER, check_output

    folder = write_identify(tmp_path, "addition")
    marker = json.loads((folder / MARKER).read_text())
    del marker["files"]  # as the release before markers listed their files wrote it
    (folder / MARKER).write_text(json.dumps(marker))
    assert check_output(folder, "identify")  # its own files only: may be replaced
    (folder / "thesis.tex").write_text("mine")
    with pytest.raises(OutputError, match="thesis.tex beside its identify result"):
        check_output(folder, "identify")


def test_stability_writes_only_under_out(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    mine = tmp_path / "results" / "identify" / "addition"
    assert _identify(mine, pairs=4) == 0
    (mine / "NOTES.md").write_text("eight pairs, seed 0")
    before = _tree(tmp_path / "results")
    assert cli_main(["stability", "--model", str(tiny_dir("llama")), "--no-filter-correct", "--seeds", "0",
                     "--pairs", "2", "--operations", "addition,subtraction", "--out", "s"]) == 0
    assert _tree(tmp_path / "results") == before
    assert json.loads((tmp_path / "s" / "identify" / "addition" / "config.json").read_text())["n_pairs"] == 2
    assert (tmp_path / "s" / "data.json").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results", "s"]  # no lock or temporary left
    # rerun: the identify results inside are reused, and the stability files replaced beside them
    assert cli_main(["stability", "--model", str(tiny_dir("llama")), "--no-filter-correct", "--seeds", "0",
                     "--pairs", "2", "--operations", "addition,subtraction", "--out", "s"]) == 0
    assert "already done" not in capsys.readouterr().err
    # a named --identify-dir is checked before any work: an identify result with a user's notes is not replaced
    capsys.readouterr()
    assert cli_main(["stability", "--model", str(tiny_dir("llama")), "--no-filter-correct", "--seeds", "0",
                     "--pairs", "2", "--operations", "addition", "--identify-dir", "results/identify",
                     "--out", "s2"]) == 2
    assert "holds NOTES.md beside its identify result" in _one_error(capsys)
    assert _tree(tmp_path / "results") == before and not (tmp_path / "s2").exists()


# --- silently wrong: symlinks ---------------------------------------------------------------------------------


def test_a_symlinked_out_is_followed_not_replaced(tmp_path):
    target = tmp_path / "elsewhere" / "res"
    assert _identify(target) == 0
    link = tmp_path / "link1"
    link.symlink_to(target)
    assert _identify(link, "--seed", "1") == 0
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert json.loads((target / "config.json").read_text())["seed"] == 1
    dangling = tmp_path / "link2"
    dangling.symlink_to(tmp_path / "elsewhere" / "new")
    assert _identify(dangling) == 0
    assert dangling.is_symlink() and (tmp_path / "elsewhere" / "new" / "circuits.json").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["elsewhere", "link1", "link2"]
    assert sorted(p.name for p in (tmp_path / "elsewhere").iterdir()) == ["new", "res"]  # no lock or temporary


def test_a_link_and_its_target_share_one_lock(tmp_path):
    from circuits.io import OutputError, output_lock

    target = tmp_path / "res"
    target.mkdir()
    (tmp_path / "link").symlink_to(target)
    with output_lock(target):
        with pytest.raises(OutputError, match="being written by another circuits job"):
            with output_lock(tmp_path / "link"):
                pass


# --- security: checkpoints ------------------------------------------------------------------------------------


def _finetune_args(out, *extra):
    return ["finetune", "--model", str(tiny_dir("llama")), "--heads", "1.0", "--out", str(out), "--data", "arithmetic",
            "--n-arithmetic", "8", "--batch-size", "4", "--micro-batch-size", "4", "--epochs", "1", "--lr", "1e-3",
            "--no-progress", "--device", "cpu", *extra]


def test_a_checkpoint_from_elsewhere_runs_no_code(tmp_path, capsys):
    out = tmp_path / "run"
    assert cli_main(_finetune_args(out)) == 0
    losses = json.loads((out / "result.json").read_text())["losses"]
    for name in ("result.json", "circuits.json", "delta.pt"):  # an interrupted run: config.json and checkpoint.pt
        (out / name).unlink()
    genuine = (out / "checkpoint.pt").read_bytes()
    assert cli_main(_finetune_args(out)) == 0  # a checkpoint circuits wrote resumes (read with weights_only)
    again = json.loads((out / "result.json").read_text())
    assert again["resumed_from"] == 2 and again["losses"] == losses
    marker = tmp_path / "pwned"
    for name in ("result.json", "circuits.json", "delta.pt"):
        (out / name).unlink()
    saved = torch.load(out / "checkpoint.pt", weights_only=True)
    payloads = {
        "zip": lambda f: torch.save({**saved, "config": WritesAFile(marker)}, f),  # the config the resume checks
        "pickle": lambda f: pickle.dump(WritesAFile(marker), f),
    }
    capsys.readouterr()
    for write in payloads.values():
        with open(out / "checkpoint.pt", "wb") as f:
            write(f)
        assert cli_main(_finetune_args(out)) == 2
        assert "cannot be read as a fine-tuning checkpoint" in _one_error(capsys)
        assert not marker.exists()
    import helpers

    from circuits.sft import FinetuneConfig, finetune
    from circuits.sft.data import tokenize_examples
    from circuits.data.arithmetic import arithmetic_train_items

    model = helpers.tiny_model("llama")
    config = FinetuneConfig(heads=((1, 0),), batch_size=4, micro_batch_size=4, epochs=1, lr=1e-3, n_arithmetic=8)
    api = tmp_path / "api"
    api.mkdir()
    (api / "checkpoint.pt").write_bytes((out / "checkpoint.pt").read_bytes())  # the pickle payload, via cc.finetune
    with pytest.raises(ValueError, match="cannot be read as a fine-tuning checkpoint"):
        finetune(model, tokenize_examples(model.tokenizer, arithmetic_train_items(8), 48), config, api, progress=False)
    assert not marker.exists() and genuine


def test_sharded_checkpoint_metadata_runs_no_code(tmp_path):
    import warnings

    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

    from circuits.sft.safe_load import dcp_load

    warnings.filterwarnings("ignore")  # DCP without a process group says so

    def trained(lr):
        torch.manual_seed(0)
        m = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Linear(3, 2))
        opt = torch.optim.AdamW(m.parameters(), lr=lr)
        m(torch.randn(5, 4)).sum().backward()
        opt.step()
        return m, opt

    m, opt = trained(1e-3)
    msd, osd = get_state_dict(m, opt)
    dcp.save({"model": msd, "optim": osd}, checkpoint_id=str(tmp_path / "checkpoint"))
    m2, opt2 = trained(0.5)
    msd2, osd2 = get_state_dict(m2, opt2)
    state = {"model": msd2, "optim": osd2}
    dcp_load(state, tmp_path / "checkpoint")  # the same values as torch.distributed.checkpoint.load
    set_state_dict(m2, opt2, model_state_dict=state["model"], optim_state_dict=state["optim"])
    assert all(torch.equal(a, b) for a, b in zip(m.state_dict().values(), m2.state_dict().values()))
    assert opt2.param_groups[0]["lr"] == 1e-3
    for k, v in opt.state_dict()["state"].items():
        assert torch.equal(v["exp_avg_sq"], opt2.state_dict()["state"][k]["exp_avg_sq"])
    marker = tmp_path / "pwned"
    with open(tmp_path / "checkpoint" / ".metadata", "wb") as f:
        pickle.dump(WritesAFile(marker), f)
    with pytest.raises(ValueError, match="cannot be read as checkpoint metadata"):
        dcp_load(state, tmp_path / "checkpoint")
    assert not marker.exists()


# --- tracebacks and unclear errors ----------------------------------------------------------------------------


def test_ctrl_c_at_any_moment_is_one_line(monkeypatch, capsys):
    import circuits.cli as cli

    def interrupted():
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "build_parser", interrupted)  # Ctrl-C while the command line is being set up
    assert cli_main(["identify", "--out", "x"]) == 130
    assert _one_error(capsys) == "circuits: interrupted\n"


@pytest.mark.parametrize("delay", [0.3, 1.5])
def test_ctrl_c_during_start_up_is_one_line(tmp_path, delay):
    """``python -m circuits`` interrupted while it imports (TransformerLens and torch take seconds): sent ``delay`` s
    after the toolkit's start-up handler is set (the child says "armed"; before it, the signal lands in Python's own
    start-up or import machinery, where no program's handler can be yet), not after a fixed time (issue 44)."""
    from helpers import ARM_SIGINT

    env = {**os.environ, "PYTHONPATH": str(ROOT), "CIRCUITS_THREADS": "1", "OMP_NUM_THREADS": "1"}
    env.pop("CIRCUITS_DEBUG", None)
    code = ARM_SIGINT + "import runpy, sys; sys.argv[0] = '-m'; runpy.run_module('circuits', run_name='__main__', alter_sys=True)"
    proc = subprocess.Popen([sys.executable, "-c", code, "identify", "--pairs", "2", "--out", str(tmp_path / "x")],
                            cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=_sigint_default)
    assert proc.stdout.readline().strip() == "armed", proc.communicate(timeout=300)
    time.sleep(delay)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=300)
    # 130, or (rarely: the interrupt lands while torch's extensions load) the exit of a process ended by SIGINT after
    # its one line was printed
    assert proc.returncode in (130, -signal.SIGINT), err
    assert err.count("\n") == 1 and "interrupted" in err, err
    assert "Traceback" not in err


@pytest.fixture
def small_disk(tmp_path):
    """A 1 MiB file system (tmpfs, where this process may mount one; else None)."""
    disk = tmp_path / "disk"
    disk.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(disk)], capture_output=True).returncode:
        yield None
        return
    try:
        yield disk
    finally:
        subprocess.run(["umount", str(disk)], check=True)


def test_a_full_disk_is_named(small_disk, tmp_path, capsys, monkeypatch):
    from circuits.io import DiskFullError, save_torch, write_json

    if small_disk is None:  # simulate ENOSPC where no tmpfs can be mounted
        import errno

        disk = tmp_path / "sim"
        real_fdopen = os.fdopen

        class Full:
            def __init__(self, f):
                self.f = f

            def __enter__(self):
                return self

            def __exit__(self, *exc):
                self.f.close()

            def write(self, data):
                raise OSError(errno.ENOSPC, "No space left on device")

        monkeypatch.setattr(os, "fdopen", lambda *a, **k: Full(real_fdopen(*a, **k)))
    else:
        disk = small_disk
        with pytest.raises(DiskFullError, match="the disk is full: writing .*ck.pt failed"):
            save_torch({"x": torch.zeros(1_000_000)}, disk / "ck.pt")  # torch's own error, "unexpected pos"
        assert list(disk.iterdir()) == []
        (disk / "fill").write_bytes(b"0" * (1024 * 1024 - 8192))
    with pytest.raises(DiskFullError, match="the disk is full"):
        write_json(disk / "a.json", list(range(100_000)))
    capsys.readouterr()
    assert cli_main(_finetune_args(disk / "run")) == 2
    err = _one_error(capsys)
    assert err.startswith("circuits finetune: error: the disk is full: writing "), err
    assert not [p for p in disk.rglob(".*") if "-tmp-" in p.name]


def test_timings_file_not_written_by_timings_is_refused_before_the_command(tmp_path, capsys, monkeypatch):
    from result_cases import write_identify

    monkeypatch.chdir(tmp_path)
    write_identify(tmp_path / "res", "addition")
    for text in ('{"theme": "dark", "width": 80}', "theme = dark\n", "[1, 2]", '{"width": 80, "zoom": 1.5}',
                 '{"format": "circuits timings", "seconds": {"load": NaN}}',
                 '{"format": "circuits timings", "seconds": {"load": -1}}'):
        (tmp_path / "settings.json").write_text(text)
        assert cli_main(["--timings", "settings.json", "report", "res", "--out", "r.html"]) == 2
        err = _one_error(capsys)
        assert "--timings settings.json holds something other than the stage timings" in err or "not seconds" in err
        assert not (tmp_path / "r.html").exists() and (tmp_path / "settings.json").read_text() == text
    (tmp_path / "t.json").write_text('{"format": "circuits timings", "seconds": {"report": 1.5}}')
    assert cli_main(["--timings", "t.json", "report", "res", "--out", "r.html"]) == 0
    assert json.loads((tmp_path / "t.json").read_text())["seconds"]["report"] > 1.5 and (tmp_path / "r.html").is_file()


@pytest.mark.parametrize("answer", [7, None, 7.0, b"7", ""])
def test_make_pair_answer_must_be_text(tokenizer, answer):
    from circuits.data.pairs import PromptError, make_pair

    with pytest.raises(PromptError, match="answer") as info:
        make_pair(tokenizer, "3 + 4 = ", "3 ? 4 = ", answer)
    assert "\n" not in str(info.value) and "Accepted" in str(info.value)


def test_a_long_folder_name_and_no_empty_parents_left(tmp_path, capsys):
    name = "r" * 250  # legal (255 bytes at most); its lock and temporaries get shortened, hashed names
    assert _identify(tmp_path / name) == 0
    assert _identify(tmp_path / name, "--seed", "1") == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == [name]
    capsys.readouterr()
    assert cli_main(["identify", "--model", "no-such-model", "--out", str(tmp_path / "new" / "deeper" / "x")]) == 2
    assert "no-such-model" in _one_error(capsys)
    assert sorted(p.name for p in tmp_path.iterdir()) == [name]  # no empty new/deeper left behind


def test_a_symlinked_file_out_is_refused_and_a_timings_link_followed(tmp_path, capsys, monkeypatch):
    from result_cases import write_identify

    monkeypatch.chdir(tmp_path)
    write_identify(tmp_path / "res", "addition")
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "r.html").write_text("<p>mine</p>")
    (tmp_path / "r.html").symlink_to(tmp_path / "elsewhere" / "r.html")
    assert cli_main(["report", "res", "--out", "r.html"]) == 2
    assert "--out r.html is a symbolic link" in _one_error(capsys)
    assert (tmp_path / "r.html").is_symlink() and (tmp_path / "elsewhere" / "r.html").read_text() == "<p>mine</p>"
    (tmp_path / "e.json").symlink_to(tmp_path / "elsewhere" / "e.json")
    assert cli_main(["evaluate", "--tasks", "arithmetic", "--out", "e.json"]) == 2
    assert "--out e.json is a symbolic link" in _one_error(capsys) and (tmp_path / "e.json").is_symlink()
    (tmp_path / "elsewhere" / "t.json").write_text('{"format": "circuits timings", "seconds": {"report": 1.0}}')
    (tmp_path / "t.json").symlink_to(tmp_path / "elsewhere" / "t.json")
    assert cli_main(["--timings", "t.json", "report", "res", "--out", "new.html"]) == 0
    assert (tmp_path / "t.json").is_symlink()
    assert json.loads((tmp_path / "elsewhere" / "t.json").read_text())["seconds"]["report"] > 1.0


def test_a_writability_probe_left_by_a_kill_is_circuits_own_leftover(tmp_path, monkeypatch):
    """A SIGKILL between the probe's creation and its removal (check_writable) leaves it in --out: the next run of the
    same command takes it for circuits' own temporary, not for a file of the user's (make test's kill at a seeded
    moment of `identify --task all` found the old `.circuits-probe-*` name refused as foreign)."""
    from circuits import results
    from circuits.io import TEMPORARY, remove_stale_temporaries

    out = tmp_path / "out"
    out.mkdir()
    monkeypatch.setattr(results.os, "unlink", lambda p: None)  # the kill lands before the probe is removed
    results.check_writable(out)
    monkeypatch.undo()
    (left,) = list(out.iterdir())
    assert TEMPORARY.match(left.name), left.name
    assert results.check_output(out, "identify", container=True) == out  # not refused as a folder of foreign files
    assert results._foreign(out) == []
    remove_stale_temporaries(out)
    assert not left.exists()
