"""The commands beyond heads at END run end to end on a tiny model and write what they promise; bad input (a
position outside the prompt, a neuron outside d_mlp, a receiver upstream of its sender) is one clear line."""

import json

import pytest
from helpers import tiny_dir

from circuits.cli import main as cli_main
from circuits.results import load_result

TINY = ["--model", str(tiny_dir("llama")), "--no-filter-correct", "--few-shot", "on"]


def test_screen_writes_the_audit(tmp_path, capsys):
    out = tmp_path / "screen"
    assert cli_main(["screen", *TINY, "--pairs", "3", "--verify", "2", "--no-progress", "--out", str(out)]) == 0
    s = json.loads((out / "summary.json").read_text())
    assert {"spearman_end", "exact_top10_missed_at_20", "exact_top5pct_missed_at_50", "largest_misses"} <= set(s)
    assert len(s["verified"]) == 4 and all({"screen", "exact", "node"} <= set(v) for v in s["verified"])
    assert (out / "screen.html").is_file() and load_result(out).kind == "screen"
    assert "Spearman" in capsys.readouterr().out


def test_positions_and_neurons_end_to_end(tmp_path):
    out = tmp_path / "pos"
    assert cli_main(["positions", *TINY, "--pairs", "2", "--offsets", "0,1,2", "--no-progress", "--out", str(out)]) == 0
    r = load_result(out)
    assert r.kind == "positions" and r.sweep.heads.logit[:, :, 3:].isnan().all() and (out / "flow.html").is_file()
    out = tmp_path / "neu"
    assert cli_main(["neurons", *TINY, "--pairs", "3", "--layers", "1", "--shares", "0.05", "--no-progress",
                     "--out", str(out)]) == 0
    s = json.loads((out / "summary.json").read_text())
    assert "MLP1" in s["shares"] and len(s["knockout"]["top_accuracy"]) == 1


def test_identify_receivers_and_stability(tmp_path):
    out = tmp_path / "id"
    assert cli_main(["identify", *TINY, "--pairs", "3", "--receivers", "2.1,MLP1", "--bootstrap", "50", "--out", str(out)]) == 0
    s = json.loads((out / "summary.json").read_text())
    assert set(s["edges"]) == {"2.1.q", "2.1.k", "2.1.v", "MLP1"} and "head_ci_low" in s["metrics"]["fraction"]
    assert (out / "circuit.html").is_file()
    st = tmp_path / "st"
    assert cli_main(["stability", "--model", str(tiny_dir("llama")), "--no-filter-correct", "--operations", "addition",
                     "--seeds", "0,1", "--pairs", "3", "--identify-dir", str(tmp_path / "ids"), "--out", str(st)]) == 0
    d = json.loads((st / "data.json").read_text())["per_operation"]["addition"]
    assert len(d["jaccard_seeds"]) == 2 and (tmp_path / "ids" / "addition-seed1" / "summary.json").is_file()


@pytest.mark.parametrize("argv, message", [
    (["positions", "--pairs", "2", "--offsets", "500"], "outside the prompts"),
    (["neurons", "--pairs", "2", "--layers", "9"], "outside this model"),
    (["identify", "--pairs", "2", "--receivers", "0.1"], "upstream of"),
    (["identify", "--pairs", "2", "--receivers", "20.x"], "Bad receiver"),
    (["screen", "--pairs", "2", "--verify", "-1"], "--verify -1: must be at least 0"),
])
def test_bad_input_is_one_clear_line(tmp_path, capsys, argv, message):
    out = tmp_path / "out"
    assert cli_main([argv[0], *TINY, *argv[1:], "--out", str(out)]) == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]  # (after the model loader's progress bar)
    assert message in last and last.startswith(f"circuits {argv[0]}: error:")
    assert not out.exists()


def test_positions_template_sweeps_the_pairs_asked_and_times_are_the_commands(tmp_path, capsys):
    out = tmp_path / "pos"
    assert cli_main(["positions", *TINY, "--template", "addition/1", "--pairs", "3", "--offsets", "0",
                     "--no-progress", "--out", str(out)]) == 0
    r = load_result(out)
    assert len(r.pairs) == 3 and {p.template_id for p in r.pairs} == {"addition/1"}  # 3 of them, not 3 filtered
    line = capsys.readouterr().out.strip().splitlines()[-1]
    assert line.startswith("[addition/1] 3 pairs") and "(the sweep" in line
    assert cli_main(["positions", *TINY, "--template", "subtraction/0", "--pairs", "2", "--out", str(tmp_path / "x")]) == 2
    assert "not a template of --task addition" in capsys.readouterr().err


def test_identify_says_why_its_rule_selects_nothing_in_one_line(tmp_path, capsys):
    out = tmp_path / "id"
    assert cli_main(["identify", *TINY, "--pairs", "2", "--key-rule", "relative_logit<-100", "--out", str(out)]) == 0
    captured = capsys.readouterr()
    notes = [line for line in captured.err.splitlines() if line.startswith("circuits identify: note: Key rule")]
    assert notes and "largest effect by relative_logit" in notes[0] and "threshold -100" in notes[0]
    assert "0 key heads by relative_logit<-100: none" in captured.out
