"""The job table (circuits.jobs) drives the command line, the result registry and the report: every job's config
builds a parser without torch, every run has the one signature, every result kind is registered and drawn (or listed
as drawn by no section), and ``circuits knockout`` and ``circuits transfer`` on an identify result give the
numbers of ``experiments/fig3_knockout.py`` and ``fig4_transfer.py``."""

import argparse
import inspect
import subprocess
import sys
from pathlib import Path

import fig3_knockout as fig3
import fig4_transfer as fig4
from helpers import tiny_dir

from circuits import jobs
from circuits.beyond.edges.result import EdgeResult
from circuits.identify.result import IdentifyResult
from circuits.cli import build_parser, main as cli_main
from circuits.config import add_arguments
from circuits.results import CIRCUITS_FILES, RESULT_TYPES, load_result, result_type, same
from circuits.validate.config import KnockoutConfig
from circuits.viz.sections import SECTIONS

ROOT = Path(__file__).resolve().parents[2]
SECTIONLESS: set[str] = set()  # kinds no report section draws (none today)


def test_every_command_is_a_job_and_every_job_config_builds_a_parser():
    sub = build_parser()._subparsers._group_actions[0].choices  # type: ignore[union-attr]
    assert list(sub) == [j.name for j in jobs.COMMANDS]
    for j in jobs.JOBS:
        if j.config:
            add_arguments(argparse.ArgumentParser(), j.config_type())
        if j.printout:
            assert callable(jobs.load(j.printout)), j.name
        assert j.command or j.how.startswith(("python experiments/", "circuits ")), j.name


def test_the_step_1b_and_2_commands_answer_help_without_torch():
    code = ("import sys, contextlib, io, circuits.cli\n"
            "for name in ('knockout', 'transfer', 'attention', 'attention-views', 'lens'):\n"
            "    with contextlib.redirect_stdout(io.StringIO()) as out:\n"
            "        try:\n"
            "            circuits.cli.main([name, '--help'])\n"
            "        except SystemExit as e:\n"
            "            assert e.code == 0 and '--heads-from' in out.getvalue(), name\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'transformer_lens', 'transformers'))[:3])\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert out.stdout.strip() == "[]"


def test_every_entry_leads_to_its_code_in_the_one_shape():
    """Each name the table uses is one of its imports and resolves; every run is ``run(config, out, *, model=None,
    progress=...)``, every printout ``printout(args, config, result, seconds)``, every register ``register(sub)``;
    the kind a job's run returns is the job's own name; no import stands unused."""
    used = set()
    for j in jobs.JOBS:
        word = j.name.replace("-", "_")  # the table's names for a job's code: run_<name>, print_<name>, register_<name>
        names = [j.config, j.run, j.printout, j.register, *(o.type for o in j.results)]
        used |= {n for n in names if n}
        assert (j.run is None) is (j.printout is None) or j.register, j.name
        if j.run:
            assert (j.run, j.printout or j.register) in ((f"run_{word}", f"print_{word}"), (f"run_{word}", f"register_{word}"))
            params = inspect.signature(j.runner()).parameters
            assert list(params)[:2] == ["config", "out"], j.name
            assert params["model"].default is None and isinstance(params["progress"].default, bool), j.name
            assert params["model"].kind is params["progress"].kind is inspect.Parameter.KEYWORD_ONLY, j.name
        if j.printout:
            params = inspect.signature(jobs.load(j.printout)).parameters
            assert [p.kind for p in params.values()] == [inspect.Parameter.POSITIONAL_OR_KEYWORD] * 4, j.name
            assert list(params)[::3] == ["args", "seconds"], j.name
        if j.register:
            assert j.register == f"register_{word}", j.name
            assert list(inspect.signature(jobs.load(j.register)).parameters)[1:] == [], j.name
        if j.results:
            assert jobs.load(j.results[0].type).kind == j.kind == j.name, j.name  # the kind is named as the command
    assert used == set(jobs.REFS)
    assert jobs.where("run_lens") == "circuits.explain.job:run_lens"


def test_results_saved_under_their_old_kind_names_still_load(tmp_path):
    """Before the kinds were named as their commands, ``circuits lens`` saved ``logit_lens``, ... : such folders (and
    the evaluation's one-file form) still load, as the kind of today."""
    import json

    from circuits.evaluation.config import EvalConfig
    from circuits.evaluation.result import EvalResult
    from circuits.results import MARKER, OLD_KINDS, detect_kind
    from circuits.types import Head
    from circuits.validate.transfer import WordProblemConfig, WordProblemHeads

    assert set(OLD_KINDS.values()) <= set(RESULT_TYPES) and not set(OLD_KINDS) & set(RESULT_TYPES)
    for r, old in ((WordProblemHeads(WordProblemConfig(), [Head(1, 2)], {"addsub": {"n_questions": 8}}), "word_problem_heads"),
                   (EvalResult(EvalConfig(model="tiny"), {"gsm8k": {"acc": 0.5, "n": 8}}, {}), "evaluation")):
        folder = r.save(tmp_path / old)
        marker = json.loads((folder / MARKER).read_text())
        (folder / MARKER).write_text(json.dumps({**marker, "kind": old}))
        assert detect_kind(folder) == r.kind == OLD_KINDS[old] and load_result(folder) == r
        assert type(r).load(folder) == r
    (tmp_path / "eval.json").write_text(json.dumps({**r.to_json(), "kind": "evaluation"}))
    assert EvalResult.load(tmp_path / "eval.json") == r


def test_result_types_files_and_sections_are_views_of_the_table():
    kinds = [o.kind for o in jobs.outputs()]
    assert list(RESULT_TYPES) == kinds and len(set(kinds)) == len(kinds)
    for o in jobs.outputs():
        assert result_type(o.kind).kind == o.kind
        assert o.sections or o.kind in SECTIONLESS, f"{o.kind} has no report section: give it one or list it"
    anchors = {s.anchor for s in SECTIONS}
    assert {a for o in jobs.outputs() for a in o.sections} <= anchors
    for s in SECTIONS:
        assert s.kinds and s.how, s.anchor
    assert jobs.job_files() <= CIRCUITS_FILES and {"data.json", "figure_6c.html", "sweep.pt"} <= CIRCUITS_FILES
    knockout = next(s for s in SECTIONS if s.anchor == "knockout")
    assert knockout.how.startswith("circuits knockout ")


def test_circuits_knockout_and_transfer_reproduce_the_figure_scripts(tmp_path):
    model = str(tiny_dir("llama"))
    flags = ["--model", model, "--no-filter-correct", "--few-shot", "on", "--pairs", "3", "--bootstrap", "0"]
    ids = tmp_path / "identify"
    assert cli_main(["identify", *flags, "--out", str(ids / "addition")]) == 0
    out = tmp_path / "knockout"
    assert cli_main(["knockout", "--heads-from", str(ids / "addition"), "--ks", "0,1,3", "--seeds", "0,1",
                     "--no-progress", "--out", str(out)]) == 0
    made = load_result(out)
    assert made.kind == "knockout" and (out / "figure.html").is_file()
    assert made.config.model == model and made.config.n_pairs == 3 and made.config.bootstrap == 0
    assert type(made.config) is KnockoutConfig and made.config.heads_from == str(ids / "addition")  # round-trips typed
    script = fig3.main(fig3.Config(model=model, filter_correct=False, few_shot="on", n_pairs=3, bootstrap=0,
                                   identify_dir=str(ids), ks=(0, 1, 3), seeds=(0, 1), out=str(tmp_path / "fig3")))
    assert made.curve == script.curve and (made.task, made.n_pairs) == (script.task, script.n_pairs)

    sizes = ["--n-key-heads", "2", "--n", "2", "--n-mmlu", "2", "--svamp-shots", "1"]
    out = tmp_path / "transfer"
    assert cli_main(["transfer", "--heads-from", str(ids / "addition"), *sizes, "--no-progress", "--out", str(out)]) == 0
    made = load_result(out)
    script = fig4.main(fig4.Config(model=model, filter_correct=False, few_shot="on", n_pairs=3, bootstrap=0,
                                   identify_dir=str(ids), n_key_heads=2, n=2, n_mmlu=2, svamp_shots=1,
                                   out=str(tmp_path / "fig4")))
    assert made.results == script.results and made.key_heads == script.key_heads and (out / "figure.html").is_file()
    import json

    from circuits.data.benchmarks import resolve_data_dir

    saved = json.loads((out / "config.json").read_text())  # the folder read, not null (issue 40)
    assert saved["data_dir"] == str(resolve_data_dir(None)), saved


def test_the_explain_and_edges_commands_run_on_an_identify_result(tmp_path, capsys):
    flags = ["--model", str(tiny_dir("llama")), "--no-filter-correct", "--few-shot", "on", "--pairs", "3", "--bootstrap", "0"]
    ident = tmp_path / "addition"
    assert cli_main(["identify", *flags, "--receivers", "2.1,MLP1", "--out", str(ident)]) == 0
    out = tmp_path / "edges"
    assert cli_main(["edges", "--heads-from", str(ident), "--receivers", "2.1,MLP1", "--no-progress", "--out", str(out)]) == 0
    edges, inside = load_result(out), EdgeResult.of_identify(IdentifyResult.load(ident))
    assert edges.kind == "edges" and (out / "circuit.html").is_file() and edges.config.heads_from == str(ident)
    assert same(edges.edges, inside.edges) and edges.receiver_effects == inside.receiver_effects  # the same edges
    assert load_result(out) == edges  # its config round-trips typed
    assert cli_main(["lens", "--heads-from", str(ident), "--task", "subtraction", "--out", str(tmp_path / "x")]) == 2
    assert not (tmp_path / "x").exists()  # an identify field other than the result's: one line, nothing written
    assert "was made with task='addition', not task='subtraction'" in capsys.readouterr().err
    for argv, kind, files in (
            (["attention", "--n-key-heads", "2", "--operations", "addition", "--n-prompts", "2"], "attention",
             ("figure.html",)),
            (["attention-views", "--n-key-heads", "2", "--operations", "addition"], "attention-views", ("figure.html",)),
            (["lens", "--top-k", "2"], "lens", ("figure.html", "figure_6c.html"))):
        out = tmp_path / argv[0]
        assert cli_main([*argv, "--heads-from", str(ident), "--no-progress", "--out", str(out)]) == 0
        r = load_result(out)
        assert r.kind == kind and r.config.n_pairs == 3 and all((out / f).is_file() for f in files)


def test_a_result_folder_is_replaced_with_its_jobs_files_only(tmp_path):
    """What a save may replace comes from the job table: the result's own files and the tables a script writes beside
    it (``published.json``), never a file of another kind's job or of the user."""
    import pytest

    from circuits.io import OutputError
    from circuits.validate.knockout import KnockoutCurve, KnockoutResult

    curve = KnockoutCurve([0, 1], [(0, 1)], [1.0, 0.5], [0.5, 0.2], [[(1, 1)]], [[1.0, 0.9]], [[0.5, 0.4]])
    r = KnockoutResult(KnockoutConfig(), curve, "addition", 3)
    out = r.save(tmp_path / "ko")
    (out / "published.json").write_text("{}")
    (out / "figure.html").write_text("")
    assert r.save(out) == out and not (out / "published.json").exists()
    for foreign in ("sweep.pt", "notes.txt"):  # identify's file, the user's
        (out / foreign).write_text("")
        with pytest.raises(OutputError, match=foreign):
            r.save(out)
        (out / foreign).unlink()


TOY_JOB = '''"""A toy job, whole in one module: its config, run, printout and result."""

from dataclasses import dataclass

from circuits.config import Config, option
from circuits.io import read_json, write_json
from circuits.results import Result


@dataclass(frozen=True)
class ToyConfig(Config):
    """What decides a toy count."""

    n: int = option(3, help="count 0..n-1")


@dataclass(eq=False, repr=False)
class ToyResult(Result):
    kind = "toy"
    config_type = ToyConfig

    config: ToyConfig
    total: int

    def _write(self, folder):
        write_json(folder / "data.json", {"total": self.total})

    @classmethod
    def _read(cls, folder, config):
        return cls(config, read_json(folder / "data.json")["total"])


def run(config, out, *, model=None, progress=True):
    result = ToyResult(config, sum(range(config.n)))
    result.save(out)
    return result


def printout(args, config, result, seconds):
    print(f"toy total {result.total} -> {args.out}")
'''
# What adding the toy job to circuits/jobs.py takes: one import line in its TYPE_CHECKING block and one table entry.
TOY_IMPORT = "from toy_job import ToyConfig, ToyResult, printout as print_toy, run as run_toy"
TOY_ENTRY = 'Job("toy", "count", (Output("toy", "ToyResult", ("knockout",)),), ("data.json",), "ToyConfig", "run_toy", "print_toy")'


def test_a_new_job_is_one_module_and_one_table_entry(tmp_path, monkeypatch, capsys):
    """The job contract by a toy: a module written in a temporary folder (config, run, printout, result) and, in the
    table, one import line and one entry -- nothing else -- make a command with the config's flags that runs the job,
    says what came out, and a result kind the registry loads."""
    from circuits import results
    from circuits.lazy import type_checking_exports

    (tmp_path / "toy_job.py").write_text(TOY_JOB)
    monkeypatch.syspath_prepend(str(tmp_path))
    (tmp_path / "block.py").write_text(f"if TYPE_CHECKING:\n    {TOY_IMPORT}\n")
    refs, aliases = type_checking_exports(tmp_path / "block.py")
    entry = eval(TOY_ENTRY, {"Job": jobs.Job, "Output": jobs.Output})
    monkeypatch.setattr(jobs, "REFS", {**jobs.REFS, **refs})
    monkeypatch.setattr(jobs, "ALIASES", {**jobs.ALIASES, **aliases})
    monkeypatch.setattr(jobs, "JOBS", (*jobs.JOBS, entry))
    monkeypatch.setitem(results.RESULT_TYPES, "toy", jobs.where("ToyResult"))  # results' view of the table

    assert [p.name for p in tmp_path.glob("*_job.py")] == ["toy_job.py"]  # the job's one module
    assert "toy" in build_parser()._subparsers._group_actions[0].choices  # type: ignore[union-attr]
    out = tmp_path / "out"
    assert cli_main(["toy", "--n", "5", "--no-progress", "--out", str(out)]) == 0
    assert capsys.readouterr().out.strip() == f"toy total 10 -> {out}"
    made = load_result(out)
    assert made.kind == "toy" and made.total == 10 and made.config.n == 5 and made == jobs.load("ToyResult").load(out)
    assert jobs.section_kinds("knockout")[-1] == "toy" and jobs.files_of("toy") == {"data.json"}
    assert cli_main(["toy", "--n", "2", "--no-progress", "--out", str(out)]) == 0  # its own result is replaced
    assert load_result(out).total == 1
