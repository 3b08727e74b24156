"""Issue 30: values read back from files are checked, decisions are made before the work, writers lock, nothing is
left behind. One test per case of docs/reliability.md's "Boundaries" table (each failed on the code before it)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from circuits.cli import main as cli_main

ROOT = Path(__file__).resolve().parents[2]


def _sigint_default() -> None:
    """In the child: SIGINT's default disposition, so Python installs its handler even where this run's own SIGINT is
    ignored (a suite started in the background with `&` passes SIG_IGN on, and the Ctrl-C under test would never
    arrive)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _err(capsys) -> str:
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip() and "it/s]" not in line]
    assert len(lines) == 1, lines
    return lines[0]


def _finetune_folder(root: Path, **fields) -> Path:
    from circuits.sft.result import FinetuneResult
    from circuits.sft.train import FinetuneConfig
    from circuits.types import Head

    r = FinetuneResult(FinetuneConfig(model="tiny", heads=(Head(1, 2),), sources=("arithmetic",)), steps=3, samples=12,
                       samples_per_s=12.5, train_seconds=0.9, tuned_parameters=4096, total_parameters=6_400_000,
                       losses=[2.5, 2.0])
    folder = r.save(root)
    data = json.loads((folder / "result.json").read_text())
    (folder / "result.json").write_text(json.dumps({**data, **fields}))
    return folder


# --- SECURITY: values reach the page escaped; a wrong type is one line naming the file and the field -------------

def test_a_finetune_result_with_a_script_for_steps_is_one_result_error(tmp_path):
    from circuits.results import ResultError
    from circuits.sft.result import FinetuneResult

    folder = _finetune_folder(tmp_path / "ft", steps="<script>alert(1)</script>")
    with pytest.raises(ResultError, match=r"result\.json: field 'steps'") as info:
        FinetuneResult.load(folder)
    assert "\n" not in str(info.value)


def test_the_report_lists_an_unreadable_result_escaped_and_renders_the_rest(tmp_path):
    from result_cases import write_identify

    from circuits.viz.report import build_report

    write_identify(tmp_path / "res" / "identify", "addition")
    _finetune_folder(tmp_path / "res" / "ft", steps="<script>alert(1)</script>")
    _finetune_folder(tmp_path / "res" / "ft2", samples_per_s="fast")  # a string where a number is
    page = build_report([tmp_path / "res"])
    assert "<script>alert(1)" not in page and "&lt;script&gt;alert(1)" in page
    assert "Results that could not be read" in page and "ft2" in page and "samples_per_s" in page
    assert "Key heads" in page or "heads.html" in page or "addition" in page  # the rest is drawn


def test_screen_section_escapes_what_its_summary_holds():
    from circuits.viz.analysis_sections import _screen_text

    r = SimpleNamespace(summary=lambda: {"task": "<b>t</b>"}, seconds={"screen": 1.0}, mode="<i>m</i>", metric="x",
                        pairs=[1], audit={"n_components": "<script>x()</script>", "spearman_end": 0.5},
                        verified=None, top=lambda *a, **k: [], validity=lambda: None)  # saved before its checks
    text = _screen_text(r)
    assert "<script>x()" not in text and "&lt;script&gt;" in text


def test_a_page_never_loads_a_script_from_above_its_folder(tmp_path, monkeypatch):
    from circuits.viz.figures import head_heatmap, write_figure
    from circuits.viz.page import _asset

    name, text = _asset("plotly")
    planted = tmp_path / "_assets"
    planted.mkdir()
    (planted / name).write_text("alert('not plotly')")  # a world-writable parent's copy, any content
    deep = tmp_path / "p" / "q" / "r"
    deep.mkdir(parents=True)
    page = write_figure(head_heatmap(torch.randn(2, 2)), deep / "res" / "heads.html").read_text()
    assert "../" not in page.split("<body>")[0]
    copy = deep / "res" / "_assets" / name
    assert copy.read_text() == text and name.count("-") >= 2  # named by its content hash, written inside the folder


def test_a_copy_with_the_right_name_but_other_bytes_is_not_used(tmp_path):
    from circuits.viz.page import _asset, asset_home, shared_asset

    name, text = _asset("plotly")
    (tmp_path / "_assets").mkdir()
    (tmp_path / "_assets" / name).write_text("tampered")
    with asset_home(tmp_path):
        got = shared_asset("plotly", tmp_path / "sub" / "heads.html")
    assert got == (tmp_path / "sub" / "_assets" / name).resolve() and got.read_text() == text


# --- readers: regular files of bounded size only ----------------------------------------------------------------

@pytest.mark.parametrize("kind", ["fifo", "dev_zero", "folder", "deep"])
def test_readers_take_only_regular_bounded_files(tmp_path, kind):
    from circuits.io import read_json

    path = tmp_path / "summary.json"
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "dev_zero":
        path.symlink_to("/dev/zero")
    elif kind == "folder":
        path.mkdir()
    else:
        path.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(ValueError, match="summary.json") as info:
        read_json(path)
    assert "\n" not in str(info.value)


def test_a_report_over_a_fifo_summary_answers(tmp_path):
    from result_cases import write_identify

    from circuits.viz.report import build_report

    write_identify(tmp_path / "res" / "identify", "addition")
    (tmp_path / "res" / "odd").mkdir()
    (tmp_path / "res" / "odd" / "circuits.json").symlink_to("/dev/zero")
    os.mkfifo(tmp_path / "res" / "odd2.json")
    page = build_report([tmp_path / "res"])  # returns; before, it blocked forever
    assert "odd" in page


# --- MIB graph files --------------------------------------------------------------------------------------------

def _graph(**over):
    g = {"cfg": {"n_layers": 1, "n_heads": 1, "d_model": 4, "parallel_attn_mlp": False},
         "nodes": {"input": {"in_graph": True, "score": 0.1}, "a0.h0": {"in_graph": False, "score": 0.2},
                   "m0": {"in_graph": True, "score": 0.3}},
         "edges": {"input->a0.h0<q>": {"in_graph": True, "score": 0.5}}}
    g.update(over)
    return g


@pytest.mark.parametrize("data, field", [
    (3, "int"), ("x", "str"), ([1], "list"),
    (_graph(cfg=[1, 2]), "cfg"), (_graph(nodes=[1]), "nodes"),
    (_graph(cfg={"n_layers": 2.7, "n_heads": 1, "d_model": 4}), "n_layers"),
    (_graph(cfg={"n_layers": "2", "n_heads": 1, "d_model": 4}), "n_layers"),
    (_graph(nodes={"a0.h0": {"in_graph": "false"}}), "in_graph"),
    (_graph(nodes={"a0.h0": 5}), "a0.h0"),
    (_graph(edges={"input->a0.h0<q>": {"score": "big"}}), "score"),
    (_graph(cfg={"n_layers": 100_000, "n_heads": 100_000, "d_model": 4}), "edge cells"),
])
def test_mib_read_checks_types_and_sizes_before_allocating(tmp_path, data, field):
    from circuits.patching.interchange.mib import read

    path = tmp_path / "importances.json"
    path.write_text(json.dumps(data))
    with pytest.raises(ValueError, match=field) as info:
        read(path)
    assert str(path) in str(info.value) and "\n" not in str(info.value)


@pytest.mark.parametrize("kind", ["folder", "dev_zero", "binary", "deep"])
def test_mib_read_of_what_is_no_json_file_names_it(tmp_path, kind):
    from circuits.patching.interchange.mib import read

    path = tmp_path / "g.json"
    if kind == "folder":
        path.mkdir()
    elif kind == "dev_zero":
        path.symlink_to("/dev/zero")
    elif kind == "binary":
        path.write_bytes(bytes(range(256)))
    else:
        path.write_text('{"cfg":' * 50_000)
    with pytest.raises(ValueError, match="g.json"):
        read(path)


def test_mib_read_keeps_a_good_graph(tmp_path):
    from circuits.patching.interchange.mib import read

    (tmp_path / "g.json").write_text(json.dumps(_graph()))
    g = read(tmp_path / "g.json")
    assert g.n_layers == 1 and bool(g.edges_in_graph[0].any())


# --- DATA-LOSS: --timings, export --------------------------------------------------------------------------------

def test_timings_refuses_a_flat_object_of_numbers_and_nan_seconds(tmp_path):
    from circuits.timing import add_to_file, read_file

    settings = tmp_path / "settings.json"
    settings.write_text('{"width": 80, "zoom": 1.5}')
    with pytest.raises(ValueError, match="settings.json holds something other"):
        read_file(settings)
    with pytest.raises(ValueError, match="not written"):
        add_to_file(tmp_path / "t.json", {"load": float("nan")})
    with pytest.raises(ValueError, match="not written"):
        add_to_file(tmp_path / "t.json", {"load": -1.0})
    assert not (tmp_path / "t.json").exists()
    assert add_to_file(tmp_path / "t.json", {"load": 1.0}) == {"load": 1.0}
    assert read_file(tmp_path / "t.json") == {"load": 1.0} and settings.read_text() == '{"width": 80, "zoom": 1.5}'


def test_export_into_the_current_folder_is_refused_before_loading(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "delta.pt").write_bytes(b"not read")
    assert cli_main(["export", "--delta", "delta.pt", "--out", "."]) == 2
    assert "is the current folder" in _err(capsys)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["delta.pt"]


def test_export_of_a_nan_delta_is_refused(tmp_path, capsys):
    from circuits.sft import export

    data = {"tensors": {"blocks.0.attn.W_Q": torch.tensor([[float("nan")]])}}
    monkey = pytest.MonkeyPatch()
    monkey.setattr(export, "read_delta", lambda path: data)
    try:
        with pytest.raises(ValueError, match="NaN or infinite"):
            export.export_model(tmp_path / "delta.pt", tmp_path / "out", model="smollm2")
    finally:
        monkey.undo()
    assert not (tmp_path / "out").exists()


def test_a_second_export_into_the_same_out_is_refused_while_the_first_writes(tmp_path):
    from circuits.io import OutputError, output_lock
    from circuits.sft import export

    out = tmp_path / "e"
    with output_lock(out):  # the first export, mid-write
        with pytest.raises(OutputError, match="being written by another circuits job"):
            export.export_model(tmp_path / "delta.pt", out, model="smollm2")


def test_finetune_top_k_must_be_a_count():
    from circuits.sft.job import select

    with pytest.raises(ValueError, match="--top-k -1"):
        select(top_k=-1, heads_from="anything")


# --- signals: Ctrl-C at start-up, SIGTERM cleans up ----------------------------------------------------------------

def _env(tmp_path) -> dict:
    return {**os.environ, "PYTHONPATH": str(ROOT), "TMPDIR": str(tmp_path)}


def _interrupted_at(tmp_path, code: str, delay: float) -> None:
    """Run ``code`` (which prints "up" once the interpreter is up, then starts circuits), wait until the toolkit's
    start-up SIGINT handler is set ("armed"), then send Ctrl-C ``delay`` s later, wherever the imports then are: one
    line, no traceback, exit 130 (or 2 when the command ran to its error first). Nothing here depends on how fast the
    machine is: the signal is sent only after a state the test has seen."""
    from helpers import ARM_SIGINT

    proc = subprocess.Popen([sys.executable, "-c", ARM_SIGINT + code, "report", str(tmp_path / "none"), "--out",
                             str(tmp_path / "r.html")], env=_env(tmp_path), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, preexec_fn=_sigint_default)
    assert proc.stdout.readline().strip() == "up"
    assert proc.stdout.readline().strip() == "armed", proc.communicate(timeout=120)
    time.sleep(delay)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert "Traceback" not in err, err
    assert proc.returncode in (2, 130), (proc.returncode, err)


@pytest.mark.parametrize("delay", [0, 0.02, 0.05, 0.15, 0.4])
def test_ctrl_c_while_the_console_script_imports_is_one_line(tmp_path, delay):
    # What the `circuits` console script does: import circuits.cli, then call main (argv[0] is "circuits").
    _interrupted_at(tmp_path, "import sys; sys.argv[0] = 'circuits'; print('up', flush=True); "
                              "from circuits.cli import main; sys.exit(main())", delay)


@pytest.mark.parametrize("delay", [0, 0.02, 0.05, 0.15])
def test_ctrl_c_while_python_m_circuits_imports_is_one_line(tmp_path, delay):
    # What `python -m circuits` does: argv[0] is "-m" while the package imports, then circuits.__main__ runs (runpy,
    # as Python's -m does). The package's own imports used to end in a KeyboardInterrupt traceback.
    _interrupted_at(tmp_path, "import sys, runpy; print('up', flush=True); sys.argv[0] = '-m'; "
                              "runpy.run_module('circuits', run_name='__main__', alter_sys=True)", delay)


def test_a_start_up_interrupt_inside_a_class_body_is_one_line_and_130(tmp_path):
    """Ctrl-C landing while a dataclass field's ``__set_name__`` runs (a class body of the toolkit's imports): Python
    3.11 wraps the handler's SystemExit in "RuntimeError: Error calling __set_name__", which reached the top as a
    traceback (the suite under load, 2026-11-28). Sent here from inside ``__set_name__`` itself, so the moment is
    certain: one line, exit 130."""
    code = """
import os, signal, sys
sys.argv[0] = "circuits"  # what the console script runs as
import circuits  # sets the start-up handler, as the console script's import does
class Field:
    def __set_name__(self, owner, name):
        os.kill(os.getpid(), signal.SIGINT)
        for _ in range(10_000_000):  # the handler runs at the next bytecode boundary, here
            pass
        print("not interrupted", flush=True)
class Config:
    x = Field()
print("after", flush=True)
"""
    proc = subprocess.run([sys.executable, "-c", code], env=_env(tmp_path), capture_output=True, text=True,
                          timeout=120, preexec_fn=_sigint_default)
    assert (proc.returncode, proc.stderr, proc.stdout) == (130, "circuits: interrupted\n", ""), proc.stderr


def test_a_start_up_interrupt_python_swallowed_stays_quiet_and_ends_the_command(monkeypatch, capsys):
    # Ctrl-C's SystemExit landing in a callback of the import machinery is printed by Python as "Exception ignored"
    # and the program goes on (seen once in the test above under load): the hook keeps it quiet, main() ends at 130.
    import types

    from circuits import _startup
    from circuits.cli import main

    seen = []
    hook = _startup._quiet_unraisable(seen.append)
    monkeypatch.setattr(_startup, "interrupted", True)
    hook(types.SimpleNamespace(exc_type=SystemExit))
    hook(types.SimpleNamespace(exc_type=ValueError))
    assert [u.exc_type for u in seen] == [ValueError]
    assert main(["report", "nowhere"]) == 130 and capsys.readouterr().err == ""


def test_sigterm_removes_the_lock_and_temporaries(tmp_path):
    script = tmp_path / "job.py"
    out = tmp_path / "out"
    script.write_text(f"""
import sys, time
from pathlib import Path
import circuits.cli as C
from circuits.io import atomic_dir, output_lock

def slow(args):
    with output_lock({str(out)!r}), atomic_dir({str(out)!r}) as tmp:
        (tmp / 'x').write_text('half')
        print('ready', flush=True)
        time.sleep(60)
    return 0

parser = C.build_parser
def build():
    p = parser()
    return p
C.build_parser = build
import argparse
ns = argparse.Namespace(command='slow', func=slow, debug=False, timings=None)
C.build_parser = lambda: type('P', (), {{'parse_args': lambda self, argv: ns}})()
sys.exit(C.main([]))
""")
    proc = subprocess.Popen([sys.executable, str(script)], env=_env(tmp_path), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready"
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 143, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["job.py"], list(tmp_path.iterdir())


def test_sigterm_while_the_command_imports_exits_143_not_130(tmp_path):
    """SIGTERM that lands before the command's own try (while ``_main`` imports torch and the job) unwound as Ctrl-C
    and exited 130; a batch system reads 143 (128 + SIGTERM). Sent from inside ``_main`` itself: the moment is
    certain."""
    code = """
import os, signal, sys
import circuits.cli as C
def importing(argv):
    os.kill(os.getpid(), signal.SIGTERM)
    for _ in range(10_000_000):  # the handler runs at the next bytecode boundary, here
        pass
    return 0
C._main = importing
sys.exit(C.main([]))
"""
    proc = subprocess.run([sys.executable, "-c", code], env=_env(tmp_path), capture_output=True, text=True,
                          timeout=120)
    assert (proc.returncode, proc.stderr) == (143, "circuits: interrupted\n"), proc.stderr


# --- what a job replaces: decided before the work, from its own file list ----------------------------------------

def test_overwrite_granted_up_front_holds_for_the_jobs_own_save(tmp_path):
    from result_cases import identify_from_effects

    from circuits.cli.commands import writing
    from circuits.io import OutputError

    r = identify_from_effects()
    out = tmp_path / "res"
    out.mkdir()
    (out / "summary.json").write_text("{}")  # a name circuits writes, with no marker: an interrupted job's file
    with pytest.raises(OutputError, match="pass --overwrite"):
        with writing(out, "identify", False):
            pass
    with writing(out, "identify", True):  # what `circuits identify --overwrite` does: checked once, then the work
        r.save(out)  # the job's own save, which checks again without the flag: before, "pass --overwrite"
    assert (out / "circuits.json").is_file() and (out / "summary.json").read_text() != "{}"


def test_overwrite_never_deletes_what_no_circuits_job_wrote(tmp_path):
    """Issue 41 (DATA-LOSS): ``--overwrite`` over a folder holding ``.git`` (or notes, a sub-folder of the user's)
    deleted it with the result; now refused up front, with or without the flag, and nothing is touched."""
    from result_cases import identify_from_effects

    from circuits.cli.commands import writing
    from circuits.io import OutputError

    identify_from_effects().save(tmp_path / "res")
    for name, make in ((".git", lambda p: (p / "HEAD").write_text("ref")), ("notes.txt", None),
                       ("mine", lambda p: (p / "x.txt").write_text("x"))):
        out = tmp_path / f"res-{name}"
        import shutil

        shutil.copytree(tmp_path / "res", out)
        target = out / name
        if make is None:
            target.write_text("years of work")
        else:
            target.mkdir()
            make(target)
        for overwrite in (False, True):
            with pytest.raises(OutputError) as err:
                with writing(out, "identify", overwrite):
                    pytest.fail("the job ran")
            assert name in str(err.value) and "\n" not in str(err.value)
        assert target.exists() and (out / "circuits.json").is_file()
    # a stale lock file and a finished result of another kind are circuits' own: --overwrite replaces them
    out = tmp_path / "res"
    (out / ".sub.lock").write_text("")
    with writing(out, "identify", True):
        identify_from_effects().save(out)
    assert (out / "circuits.json").is_file()


def test_a_marker_naming_a_users_file_does_not_make_it_replaceable(tmp_path):
    from result_cases import write_identify

    from circuits.io import OutputError
    from circuits.results import check_output

    folder = write_identify(tmp_path / "res", "addition")
    marker = json.loads((folder / "circuits.json").read_text())
    (folder / "circuits.json").write_text(json.dumps({**marker, "files": [*marker.get("files", []), "NOTES.md"]}))
    (folder / "NOTES.md").write_text("mine")
    with pytest.raises(OutputError, match="NOTES.md"):
        check_output(folder, "identify")
    assert (folder / "NOTES.md").read_text() == "mine"


def test_a_faithfulness_part_is_keyed_by_its_ranking(tokenizer):
    from helpers import mixed_pairs

    from circuits.beyond.faithfulness.config import FaithfulnessConfig
    from circuits.beyond.faithfulness.job import _key

    config, pairs = FaithfulnessConfig(), mixed_pairs(tokenizer, 2)
    assert _key(config, pairs, "screen") != _key(config, pairs, "exact-path")  # a copied part is computed again
    assert _key(config, pairs, "screen") == _key(config, pairs, "screen")


def test_a_faithfulness_part_is_keyed_by_the_model_weights(tokenizer):
    """A model folder whose weights changed under the same name does not reuse the parts the old weights made."""
    import torch
    from helpers import mixed_pairs, tiny_model

    from circuits.beyond.faithfulness.config import FaithfulnessConfig
    from circuits.beyond.faithfulness.job import _key, weights_digest

    model = tiny_model("llama")
    config, pairs = FaithfulnessConfig(), mixed_pairs(tokenizer, 2)
    before = weights_digest(model)
    assert weights_digest(model) == before
    with torch.no_grad():
        next(model.parameters()).add_(1e-3)
    after = weights_digest(model)
    assert after != before
    assert _key(config, pairs, "screen", before) != _key(config, pairs, "screen", after)


@pytest.mark.parametrize("text, says", [("not json\n", "line 1"), ('{"question": "q"}\n', "no field 'answer'"),
                                        ("[1, 2]\n", "not an object")])
def test_data_dir_garbage_names_the_file(tmp_path, text, says):
    from circuits.data.benchmarks import load_gsm8k

    (tmp_path / "gsm8k").mkdir()
    (tmp_path / "gsm8k" / "train.jsonl").write_text(text)
    with pytest.raises(ValueError, match=says) as info:
        load_gsm8k("train", str(tmp_path))
    assert "train.jsonl" in str(info.value) and "\n" not in str(info.value)


def test_a_sweep_whose_head_tensor_does_not_fit_is_refused(tmp_path):
    from result_cases import write_identify

    from circuits.identify.result import IdentifyResult
    from circuits.results import ResultError

    folder = write_identify(tmp_path / "res", "addition")
    IdentifyResult.load(folder)  # as written (its effects in summary.json): fits
    n_layers = len(json.loads((folder / "summary.json").read_text())["head_effects"])
    # A sweep.pt of another model: a [2, 3, 4] head tensor beside this model's MLP layers.
    torch.save({"head_logit": torch.zeros(2, 3, 4), "mlp_logit": torch.zeros(n_layers + 27, 4)}, folder / "sweep.pt")
    with pytest.raises(ResultError, match=r"sweep\.pt: .*does not fit"):
        IdentifyResult.load(folder)
