"""Every value has its range where it is declared (issue 41): a config field's bounds are part of its ``option``, are
checked whenever the config is built (flags, JSON, Python), and a value outside them is one line naming the flag,
before torch, the job or a model is imported or loaded.

The first tests are generated from the declarations: every count flag of every command of the job table (each
``count(...)`` field its config declares) given 0, -1 and a huge value. The others are the issue's BROKEN-FLAG cases,
one each; each of them ran (or failed only after the work) before the ranges were declared."""

from __future__ import annotations

import argparse
import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import pytest

from circuits import cli, jobs
from circuits.cli import main as cli_main
from circuits.config import MAX_COUNT, Config, _cli_fields, _flag, check_model_ranges

ROOT = Path(__file__).resolve().parents[2]
HUGE = 10**12


def _command_configs() -> dict[str, type[Config]]:
    """Each command of the job table and its config (export's has no count)."""
    return {j.name: j.config_type() for j in jobs.COMMANDS if j.config}


def _count_flags() -> list[tuple[str, str, str, int, bool]]:
    """(command, flag, value, minimum, tuple field) for every count field a command's flags set."""
    cases = []
    for command, config in _command_configs().items():
        for f, _ in _cli_fields(config):
            if not f.metadata.get("count"):
                continue
            lo = f.metadata["minimum"]
            for value in (0, -1, HUGE):
                if value >= lo and value <= (f.metadata.get("maximum") or MAX_COUNT):
                    continue  # 0 where the help says what 0 means (checked below)
                cases.append((command, _flag(f), str(value), lo, isinstance(f.default, tuple)))
    return cases


COUNT_CASES = _count_flags()


def _no_work(args: argparse.Namespace) -> int:
    raise AssertionError(f"circuits {args.command} started its work (a model could load) with a refused flag")


@pytest.fixture
def no_work(monkeypatch):
    """The parser with every command's work replaced by a failure: a refused flag must stop before it."""
    build = cli.build_parser

    def guarded() -> argparse.ArgumentParser:
        parser = build()
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        for p in sub.choices.values():
            p.set_defaults(func=_no_work)
        return parser

    monkeypatch.setattr(cli, "build_parser", guarded)


def _required(command: str) -> list[str]:
    return ["--heads", "1.0"] if command == "finetune" else []


def test_every_command_declares_counts():
    commands = {c for c, *_ in COUNT_CASES}
    assert {"identify", "knockout", "transfer", "attention", "attention-views", "lens", "heuristics", "numbers",
            "finetune", "evaluate", "stability", "faithfulness"} <= commands
    assert len(COUNT_CASES) > 60


@pytest.mark.parametrize("command, flag, value, lo, many", COUNT_CASES,
                         ids=[f"{c}{f}={v}" for c, f, v, *_ in COUNT_CASES])
def test_a_count_outside_its_range_is_one_line_before_any_work(tmp_path, capsys, no_work, command, flag, value, lo,
                                                               many):
    out = tmp_path / "out"
    code = cli_main([command, f"{flag}={value}", *_required(command), "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.count("\n") == 1 and err.startswith(f"circuits {command}: error: {flag} {value}: "), err
    want = f"at least {lo}" if int(value) < lo else "at most"
    assert want in err, err
    assert not out.exists()


def test_zero_is_accepted_only_where_its_help_says_what_it_means():
    for config in {*_command_configs().values()}:
        for f, _ in _cli_fields(config):
            if f.metadata.get("count") and f.metadata["minimum"] == 0:
                assert "0" in (f.metadata.get("help") or ""), f"{config.__name__}.{f.name}: say what 0 means"


def _all_configs() -> list[type[Config]]:
    """Every job's config, the scripts' (command=False) included."""
    out = []
    for j in jobs.JOBS:
        if j.config:
            out.append(j.config_type())
    return out


@pytest.mark.parametrize("config", _all_configs(), ids=lambda c: c.__name__)
def test_counts_are_checked_when_the_config_is_built_from_python_and_json(config):
    default = config(full=True) if config.__name__ == "FinetuneConfig" else config()  # its default names nothing to tune
    for f in dataclasses.fields(config):
        if not f.metadata.get("count"):
            continue
        bad = (-1,) if isinstance(f.default, tuple) else -1
        with pytest.raises(ValueError, match=f"^{_flag(f) if f.metadata.get('cli', True) else f.name} "):
            default.replace(**{f.name: bad})
        with pytest.raises(ValueError, match="must be at least"):
            config.from_json({**default.to_json(), f.name: list(bad) if isinstance(bad, tuple) else bad})


# The BROKEN-FLAG cases, each one line before any work (each ran, or failed after the work, before).
BROKEN = [
    (["attention", "--n-key-heads", "-1"], "circuits attention: error: --n-key-heads -1: must be at least 1"),
    (["attention", "--n-key-heads", "0"], "circuits attention: error: --n-key-heads 0: must be at least 1"),
    (["attention", "--n-prompts", "0"], "circuits attention: error: --n-prompts 0: must be at least 1"),
    (["attention-views", "--n-key-heads=-2"], "circuits attention-views: error: --n-key-heads -2: must be at least 1"),
    (["attention-views", "--last-tokens", "-5"], "circuits attention-views: error: --last-tokens -5: must be at least 1"),
    (["attention-views", "--prompts-per-operation", "0"],
     "circuits attention-views: error: --prompts-per-operation 0: must be at least 1"),
    (["transfer", "--n-key-heads=-1"], "circuits transfer: error: --n-key-heads -1: must be at least 1"),
    (["transfer", "--n", "0"], "circuits transfer: error: --n 0: must be at least 1"),
    (["knockout", "--seeds", ""], "circuits knockout: error: --seeds is empty: give at least one value"),
    (["knockout", "--ks=-1,2"], "circuits knockout: error: --ks -1,2: each value must be at least 0, got -1"),
    (["knockout", "--ks", "0,5,5"], "circuits knockout: error: --ks 0,5,5: names 5 more than once"),
    (["lens", "--top-k", "-1"], "circuits lens: error: --top-k -1: must be at least 1"),
    (["lens", "--top-k", "0"], "circuits lens: error: --top-k 0: must be at least 1"),
    (["heuristics", "--operands", "0,3000"], "circuits heuristics: error: --operands 0,3000: the grid would have"),
    (["heuristics", "--templates", "nosuch/9"],
     "circuits heuristics: error: --templates: unknown template 'nosuch/9' for addition; accepted: addition/0"),
    (["identify", "--pairs", "-1"], "circuits identify: error: --pairs -1: must be at least 1"),
    (["identify", "--pairs-file", "p.jsonl", "--task", "all"],
     "circuits identify: error: --pairs-file p.jsonl with --task all: the file's pairs would stand for each"),
    (["stability", "--pairs-file", "p.jsonl"],
     "circuits stability: error: --pairs-file p.jsonl: stability compares key heads across the seeds"),
    (["faithfulness", "--pairs-file", "p.jsonl", "--task", "all"], "circuits faithfulness: error: --pairs-file p.jsonl "
                                                                   "with --task all"),
]


@pytest.mark.parametrize("argv, line", BROKEN, ids=[" ".join(a) for a, _ in BROKEN])
def test_broken_flag_is_one_line_before_any_work(tmp_path, monkeypatch, capsys, no_work, argv, line):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "p.jsonl").write_text('{"prompt": "1 + 2 =", "counterfactual": "1 - 2 =", "answer": "3"}\n')
    assert cli_main([*argv, "--out", "out"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(line) and err.count("\n") == 1, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p.jsonl"]


def test_ks_past_the_models_heads_is_refused_once_its_size_is_known():
    """``knockout --ks 0,1000`` dropped 1000 and ran; the model's size is known only once it loads, and the bound is
    checked there (:func:`circuits.identify.source.model_for`), before the identify run or the knockout."""
    from circuits.validate.config import KnockoutConfig

    config = KnockoutConfig(ks=(0, 1000))
    with pytest.raises(ValueError, match=r"^--ks 0,1000: each value must be at most 270 \(the model's heads\), got 1000$"):
        check_model_ranges(config, 30, 9)
    check_model_ranges(KnockoutConfig(ks=(0, 270)), 30, 9)  # every head: allowed


def test_model_for_checks_the_models_size_before_any_work(monkeypatch):
    from types import SimpleNamespace

    from circuits.identify import source
    from circuits.validate.config import KnockoutConfig

    model = SimpleNamespace(cfg=SimpleNamespace(n_layers=2, n_heads=4))
    with pytest.raises(ValueError, match="at most 8"):
        source.model_for(KnockoutConfig(ks=(0, 9)), model)  # type: ignore[arg-type]
    assert source.model_for(KnockoutConfig(ks=(0, 8)), model) is model  # type: ignore[arg-type]


def test_knockout_result_never_drops_a_k(monkeypatch):
    """The Python path too: a k past the ranking is an error, not a point silently left out of the curve."""
    from types import SimpleNamespace

    from circuits.validate import job
    from circuits.validate.config import KnockoutConfig

    ranking = SimpleNamespace(ranked=lambda part: [((0, 0), 1.0)] * 4)
    made = SimpleNamespace(pairs=[], key_rule=SimpleNamespace(metric="m"), scores=lambda m: ranking)
    monkeypatch.setattr(job, "knockout_curve", lambda *a, **k: pytest.fail("the knockout ran"))
    with pytest.raises(ValueError, match="at most 4"):
        job.knockout_result(None, made, KnockoutConfig(ks=(0, 5)))  # type: ignore[arg-type]


@pytest.mark.parametrize("argv, line", [
    (["identify", "--pairs", "-1"], "circuits identify: error: --pairs -1: must be at least 1"),
    # issue 41's re-run: finetune's --top-k is no config field, and was checked only after torch and the job imported
    (["finetune", "--top-k", "-1"], "circuits finetune: error: --top-k -1: a count of components (a whole number >= 0) "
                                    "is expected"),
    (["finetune", "--top-mlps", "-2"], "circuits finetune: error: --top-mlps -2: a count of components (a whole "
                                       "number >= 0) is expected")])
def test_an_argument_error_imports_no_torch(tmp_path, argv, line):
    """Issue 44: ``circuits identify --pairs -1`` answers before torch is imported (it took ~8 s to import torch
    first). Run as ``python -m circuits``; what is in ``sys.modules`` when the command returns is printed after it."""
    script = ("import runpy, sys\n"
              f"sys.argv = ['circuits', *{argv!r}, '--out', 'r']\n"
              "try:\n"
              "    runpy.run_module('circuits', run_name='__main__', alter_sys=True)\n"
              "except SystemExit as e:\n"
              "    code = e.code\n"
              "print('exit', code, 'torch' in sys.modules, 'transformer_lens' in sys.modules)\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("CIRCUITS_DEBUG", None)
    proc = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.stderr == line + "\n", proc.stderr
    assert proc.stdout.split() == ["exit", "2", "False", "False"], proc.stdout
    assert list(tmp_path.iterdir()) == []


def test_other_numbers_and_lists_declare_their_ranges_too():
    from circuits.beyond.stability.config import StabilityConfig
    from circuits.explain.config import RolesConfig
    from circuits.identify.config import IdentifyConfig

    cases = [(lambda: IdentifyConfig(memory_mb=0), "^--memory-mb 0: must be more than 0$"),
             (lambda: IdentifyConfig(memory_mb=0.02), None),  # a tiny budget (the tests' chunking) is a budget
             (lambda: IdentifyConfig(seed=-1), "^--seed -1: must be at least 0$"),
             (lambda: RolesConfig(operations=("addition", "modulo")), "^--operations addition,modulo: unknown 'modulo'"),
             (lambda: RolesConfig(operations=()), "^--operations is empty"),
             (lambda: StabilityConfig(seeds=(0, 0)), "^--seeds 0,0: names 0 more than once$"),
             (lambda: IdentifyConfig(n_pairs=float("nan")), "must be a number, got nan")]
    for build, message in cases:
        if message is None:
            build()
            continue
        with pytest.raises(ValueError, match=message):
            build()


def test_a_list_flag_saved_as_text_still_loads():
    """``--offsets 0,1,2`` was kept as text ("0", "1", "2") before its elements had a declared range; a result saved
    so is read back with the numbers it meant, not refused as out of range."""
    from circuits.beyond.positions.config import PositionConfig

    assert PositionConfig.from_json({"offsets": ["0", "1", "2"]}).offsets == (0, 1, 2)
    with pytest.raises(ValueError, match="'x' is not a number"):
        PositionConfig.from_json({"offsets": ["x"]})


def test_each_flags_help_shows_its_range(capsys):
    for argv, shown in ((["identify", "--help"], ">= 1, <= 1000000"), (["knockout", "--help"],
                                                                       "each >= 0, <= the model's heads")):
        with pytest.raises(SystemExit):
            cli_main(argv)
        assert shown in " ".join(capsys.readouterr().out.split())
