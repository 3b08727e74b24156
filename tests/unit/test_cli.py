"""The command line: flags come from each job's config, bad input is one line, and jobs run end to end on a
tiny local model."""

import json

import pytest

from circuits.cli import build_parser
from circuits.cli import main as cli_main
from circuits.cli.commands import config_from_args
from circuits.identify import IdentifyConfig, identify
from circuits.types import Head


def test_identify_bad_inputs_are_one_clear_error(tmp_path, capsys):
    out = tmp_path / "out"
    assert cli_main(["identify", "--key-rule", "fastest", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "Cannot read key rule 'fastest'" in err and "Accepted" in err and err.count("\n") == 1
    assert not out.exists()  # nothing half-written
    assert cli_main(["identify", "--model", "no-such-model", "--out", str(out)]) == 2
    assert "Cannot load model 'no-such-model'" in capsys.readouterr().err
    assert not out.exists()
    with pytest.raises(SystemExit):
        cli_main(["identify", "--task", "modulo", "--out", str(out)])


def test_identify_flags_are_the_config_fields():
    args = build_parser().parse_args(["identify", "--pairs", "8", "--mode", "activation", "--no-filter-correct", "--out", "x"])
    from circuits.config import from_arguments

    assert from_arguments(IdentifyConfig, args) == IdentifyConfig(n_pairs=8, mode="activation", filter_correct=False)


def test_identify_engine_is_the_registry_name_of_the_mode(capsys):
    from circuits.cli.commands import config_from
    from circuits.patching.engines.registry import ENGINES
    from circuits.patching.engines.registry import END_SWEEP_ENGINES

    parse = build_parser().parse_args
    assert config_from(parse(["identify", "--engine", "exact-activation", "--out", "x"])).mode == "activation"
    assert config_from(parse(["identify", "--out", "x"])) == config_from(parse(["identify", "--engine", "exact-path",
                                                                              "--out", "x"]))
    assert set(END_SWEEP_ENGINES) <= set(ENGINES)
    with pytest.raises(ValueError, match="--engine exact-path is --mode path"):
        config_from(parse(["identify", "--engine", "exact-path", "--mode", "activation", "--out", "x"]))
    with pytest.raises(SystemExit):
        parse(["identify", "--engine", "screen", "--out", "x"])  # not an END sweep


def test_identify_end_to_end_on_a_tiny_model(tmp_path, capsys):
    from helpers import tiny_dir

    out = tmp_path / "id"
    assert cli_main(["identify", "--model", str(tiny_dir("llama")), "--pairs", "3", "--few-shot", "on",
                     "--no-filter-correct", "--key-rule", "top2", "--out", str(out)]) == 0
    s = json.loads((out / "summary.json").read_text())
    assert len(s["key_heads"]) == 2 and s["config"]["filter_correct"] is False
    assert "heads.html" in capsys.readouterr().out


@pytest.fixture(scope="module")
def identify_folder(tmp_path_factory, tiny_llama):
    folder = tmp_path_factory.mktemp("identify") / "addition"
    identify(tiny_llama, config=IdentifyConfig(n_pairs=3, few_shot="on", filter_correct=False, key_rule="top2"),
             progress=False).save(folder)
    return folder


def test_finetune_args_select_heads(identify_folder):
    from circuits.identify import load_identify

    ranked = load_identify(identify_folder).top_heads(5)
    args = build_parser().parse_args(["finetune", "--heads-from", str(identify_folder), "--top-k", "5", "--out", "x",
                                      "--kv-policy", "never"])
    config = config_from_args(args)
    assert config.heads == tuple(ranked) and config.kv_policy == "never" and config.lr == 2e-5 and config.batch_size == 128
    args = build_parser().parse_args(["finetune", "--heads", "1.0,0.3", "--mlps", "1", "--no-rescale", "--out", "x"])
    config = config_from_args(args)
    assert config.heads == (Head(1, 0), Head(0, 3)) and config.mlps == (1,) and not config.rescale
    with pytest.raises(ValueError, match="say what to tune"):
        config_from_args(build_parser().parse_args(["finetune", "--out", "x"]))
    assert config_from_args(build_parser().parse_args(["finetune", "--full", "--out", "x"])).full


def test_finetune_then_evaluate_with_delta(tmp_path):
    from helpers import tiny_dir

    out = tmp_path / "run"
    assert cli_main([
        "finetune", "--model", str(tiny_dir("llama")), "--heads", "1.0", "--out", str(out), "--data", "arithmetic",
        "--n-arithmetic", "8", "--batch-size", "4", "--micro-batch-size", "4", "--epochs", "1", "--lr", "1e-3",
        "--no-progress", "--device", "cpu"]) == 0
    result = json.loads((out / "result.json").read_text())
    assert result["steps"] == 2 and result["plan"]["heads"] == [[1, 0]]
    assert json.loads((out / "config.json").read_text())["heads"] == [[1, 0]]
    assert json.loads((out / "circuits.json").read_text())["kind"] == "finetune"
    eval_out = tmp_path / "eval.json"
    assert cli_main(["evaluate", "--model", str(tiny_dir("llama")), "--delta", str(out / "delta.pt"), "--tasks", "arithmetic",
                     "--limit", "3", "--out", str(eval_out), "--device", "cpu"]) == 0
    saved = json.loads(eval_out.read_text())
    assert saved["kind"] == "evaluate" and saved["config"]["delta"] == str(out / "delta.pt")
    assert saved["tasks"]["arithmetic"]["n"] == 3


def test_evaluate_bad_inputs(tmp_path, capsys):
    assert cli_main(["evaluate", "--delta", str(tmp_path / "none.pt"), "--out", str(tmp_path / "e.json")]) == 2
    assert "delta file not found" in capsys.readouterr().err
    assert cli_main(["evaluate", "--tasks", "arithmetic,nope", "--out", str(tmp_path / "e.json")]) == 2
    assert "Unknown or no tasks ['nope']" in capsys.readouterr().err
