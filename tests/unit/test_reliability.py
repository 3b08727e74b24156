"""Nothing lost, nothing silently wrong: output locations checked before any work and locked while a job runs,
errors as one line, data folders and pairs validated before a model loads."""

from __future__ import annotations

import json
import warnings

import pytest
import torch

from circuits.cli import main as cli_main
from circuits.data.pairs import PairBatch, PromptError, make_pair
from circuits.io import OutputError, output_lock, remove_stale_temporaries
from circuits.results import check_output


def test_foreign_folders_files_and_the_current_folder_are_refused(tmp_path, monkeypatch):
    project = tmp_path / "myproject"
    (project / "notes").mkdir(parents=True)
    (project / "notes" / "thesis.txt").write_text("years of work")
    with pytest.raises(OutputError, match="already holds files circuits did not write.*--overwrite"):
        check_output(project, "identify")
    (tmp_path / "a.txt").write_text("x")
    with pytest.raises(OutputError, match="is an existing file"):
        check_output(tmp_path / "a.txt", "identify")
    with pytest.raises(OutputError, match="no file can be created in"):
        check_output("/proc/circuits-x", "identify")
    assert check_output(tmp_path / "new" / "deeper", "identify")  # may be created
    (tmp_path / "empty").mkdir()
    assert check_output(tmp_path / "empty", "identify")
    with pytest.raises(OutputError, match="notes/, which no circuits job wrote"):  # issue 41: --overwrite too
        check_output(project, "identify", overwrite=True)
    assert (project / "notes" / "thesis.txt").read_text() == "years of work"
    monkeypatch.chdir(project)
    with pytest.raises(OutputError, match="current folder"):
        check_output(".", "identify", overwrite=True)


def test_identify_refuses_a_foreign_folder_before_loading_anything(tmp_path, capsys):
    project = tmp_path / "myproject"
    project.mkdir()
    (project / "thesis.txt").write_text("years of work")
    assert cli_main(["identify", "--model", "no-such-model", "--out", str(project)]) == 2
    err = capsys.readouterr().err
    assert "already holds" in err and err.count("\n") == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["myproject"] and (project / "thesis.txt").exists()


def test_a_second_job_on_the_same_output_is_refused(tmp_path):
    out = tmp_path / "run"
    with output_lock(out):
        with pytest.raises(OutputError, match=r"being written by another circuits job \(pid \d+"):
            with output_lock(out):
                pass
    with output_lock(out):  # released when the first job ends
        pass
    assert not (tmp_path / ".run.lock").exists()


def test_leftovers_of_a_killed_write_are_removed(tmp_path):
    out = tmp_path / "res"
    (out / ".addition.circuits-tmp-abc_1234").mkdir(parents=True)  # the names mkstemp gives: 8 random characters
    (out / ".checkpoint.pt.circuits-tmp-x1y2z3w4").write_text("half")
    (tmp_path / ".res.circuits-tmp-12345678").mkdir()
    (tmp_path / ".res.circuits-old-45678901").mkdir()
    (out / "keep.json").write_text("{}")
    (out / ".notes-tmp-draft").write_text("mine")  # a user's files of similar names are not temporaries
    (out / ".backup-old-20240101").write_text("mine")
    (tmp_path / ".other.circuits-tmp-12345678").mkdir()  # another output's temporaries are not this one's
    with output_lock(out):
        pass
    assert sorted(p.name for p in tmp_path.iterdir()) == [".other.circuits-tmp-12345678", "res"]
    assert sorted(p.name for p in out.iterdir()) == [".backup-old-20240101", ".notes-tmp-draft", "keep.json"]
    assert remove_stale_temporaries(out) == []


def test_data_dir_that_is_named_must_exist_and_hold_the_files(tmp_path, capsys, monkeypatch):
    out = tmp_path / "e.json"
    assert cli_main(["evaluate", "--data-dir", "/no/such/dir", "--tasks", "mmlu", "--out", str(out)]) == 2
    assert "/no/such/dir (--data-dir) does not exist" in capsys.readouterr().err
    (tmp_path / "empty").mkdir()
    assert cli_main(["evaluate", "--data-dir", str(tmp_path / "empty"), "--tasks", "gsm8k,mmlu", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "lacks gsm8k/test.jsonl, mmlu/dev, mmlu/test" in err and not out.exists()
    monkeypatch.setenv("CIRCUITS_DATA_DIR", str(tmp_path / "gone"))
    assert cli_main(["evaluate", "--tasks", "mmlu", "--out", str(out)]) == 2
    assert "($CIRCUITS_DATA_DIR) does not exist" in capsys.readouterr().err


def test_report_out_must_be_a_report_file(tmp_path, capsys):
    from result_cases import write_identify

    res = write_identify(tmp_path / "res", "addition").parent
    (tmp_path / "notes.html").write_text("<html>mine</html>")
    assert cli_main(["report", str(res), "--out", str(tmp_path / "notes.html")]) == 2
    assert "not a report written by circuits report" in capsys.readouterr().err
    assert (tmp_path / "notes.html").read_text() == "<html>mine</html>"
    assert cli_main(["report", str(res), "--out", str(tmp_path)]) == 2
    assert "is a folder" in capsys.readouterr().err
    assert cli_main(["report", str(res), "--out", str(tmp_path / "r.html")]) == 0
    assert cli_main(["report", str(res), "--out", str(tmp_path / "r.html")]) == 0  # an earlier report is replaced


def test_errors_are_one_line_and_interrupts_say_how_to_resume(monkeypatch, capsys):
    from circuits.cli import commands

    def boom(args):
        raise RuntimeError("something\nbroke")

    monkeypatch.setattr(commands, "command_identify", boom)
    assert cli_main(["identify", "--out", "x"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "RuntimeError: something broke" in err and "--debug" in err
    with pytest.raises(RuntimeError):
        cli_main(["--debug", "identify", "--out", "x"])

    def interrupted(args):
        raise KeyboardInterrupt

    monkeypatch.setattr(commands, "command_identify", interrupted)
    assert cli_main(["identify", "--out", "x"]) == 130
    assert "interrupted; run the same command to resume" in capsys.readouterr().err


def test_meaningless_pairs_are_refused(tokenizer):
    with pytest.raises(PromptError, match="counterfactual equals the reference"):
        make_pair(tokenizer, "3 + 4 = ", "3 + 4 = ", "7")
    with pytest.raises(PromptError, match="Empty prompt"):
        make_pair(tokenizer, "", "", "7")
    same = make_pair(tokenizer, "3 + 4 = ", "3 + 4 = ", "7", allow_identical=True)
    with pytest.raises(PromptError, match="Pair 0: the counterfactual equals the reference"):
        PairBatch.from_pairs([same])


def test_fraction_is_nan_with_a_warning_when_the_counterfactual_does_nothing(tiny_llama, tokenizer):
    from circuits.patching import sweep

    p = make_pair(tokenizer, "3 + 4 = ", "3 @ 4 = ", "7")
    batch = PairBatch.from_pairs([p])
    same = PairBatch(batch.reference, batch.reference, batch.end, batch.answer)
    result = sweep(tiny_llama, same, progress=False)
    with pytest.warns(UserWarning, match="'fraction' is undefined"):
        heads, mlps = result.scores("fraction").parts.values()
    assert torch.isnan(heads).all() and not torch.isinf(heads).any()
    assert torch.isnan(result.scores("fraction").per_pair["heads"]).all()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        result.scores("logit_diff")  # the other metrics stay defined


def test_sweep_warns_when_the_model_does_not_give_the_answer(tiny_llama, tokenizer):
    from circuits.patching import sweep

    p = make_pair(tokenizer, "3 + 4 = ", "3 @ 4 = ", "7")
    with pytest.warns(UserWarning, match="does not rank the answer among its top 10"):
        sweep(tiny_llama, [p], progress=False)


def _finetune_args(tmp_path, out, *extra):
    from helpers import tiny_dir

    return ["finetune", "--model", str(tiny_dir("llama")), "--heads", "1.0", "--out", str(out), "--data", "arithmetic",
            "--n-arithmetic", "8", "--batch-size", "4", "--micro-batch-size", "4", "--epochs", "1", "--lr", "1e-3",
            "--no-progress", "--device", "cpu", *extra]


def test_a_finished_finetune_is_left_alone_and_another_config_refused_before_writing(tmp_path, capsys):
    out = tmp_path / "run"
    assert cli_main(_finetune_args(tmp_path, out)) == 0
    files = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}
    capsys.readouterr()
    assert cli_main(_finetune_args(tmp_path, out)) == 0
    assert "already finished with this config" in capsys.readouterr().out
    assert {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()} == files
    assert cli_main(_finetune_args(tmp_path, out, "--lr", "2e-5")) == 2
    err = capsys.readouterr().err
    assert "holds a fine-tuning run of another config (lr=0.001 there, 2e-05 now)" in err
    assert {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()} == files  # config.json still says 1e-3
    assert cli_main(_finetune_args(tmp_path, out, "--lr", "2e-5", "--overwrite")) == 0
    assert json.loads((out / "config.json").read_text())["lr"] == 2e-5


def test_the_python_api_does_not_redo_a_finished_run(tmp_path):
    import helpers

    from circuits.sft import FinetuneConfig, finetune
    from circuits.sft.data import tokenize_examples
    from circuits.data.arithmetic import arithmetic_train_items

    model = helpers.tiny_model("llama")
    examples = tokenize_examples(model.tokenizer, arithmetic_train_items(8), 48)
    config = FinetuneConfig(heads=((1, 0),), batch_size=4, micro_batch_size=4, epochs=1, lr=1e-3)
    first = finetune(model, examples, config, tmp_path / "r", progress=False)
    again = finetune(helpers.tiny_model("llama"), examples, config, tmp_path / "r", progress=False)
    assert again.samples == first.samples > 0 and again.losses == first.losses


def test_deltas_are_checked_before_the_model_loads(tmp_path, capsys):
    out = tmp_path / "run"
    assert cli_main(_finetune_args(tmp_path, out)) == 0
    capsys.readouterr()
    delta = out / "delta.pt"
    (tmp_path / "cut.pt").write_bytes(delta.read_bytes()[:200])
    (tmp_path / "junk.pt").write_bytes(b"not a delta at all")
    for bad, message in ((tmp_path / "cut.pt", "cannot be read as a delta file"),
                         (tmp_path / "junk.pt", "cannot be read as a delta file")):
        assert cli_main(["evaluate", "--model", "smollm2", "--delta", str(bad), "--tasks", "arithmetic",
                         "--out", str(tmp_path / "e.json")]) == 2
        assert message in capsys.readouterr().err
    assert cli_main(["evaluate", "--model", "smollm2", "--delta", str(delta), "--tasks", "arithmetic",
                     "--out", str(tmp_path / "e.json")]) == 2
    assert "was made for model" in capsys.readouterr().err and not (tmp_path / "e.json").exists()
    from circuits.sft import apply_delta

    other = __import__("helpers").tiny_model("mistral", n_layers=1)  # has no layer 1
    before = {n: p.clone() for n, p in other.named_parameters()}
    with pytest.raises(ValueError, match="made for another model"):
        apply_delta(other, delta)
    assert all(torch.equal(p, before[n]) for n, p in other.named_parameters())  # nothing written


def test_broken_model_folders_and_unreachable_names_fail_in_one_line(tmp_path, capsys, monkeypatch):
    """A model that cannot load is one line naming what is wrong and what is accepted; an official name that is
    neither cached nor reachable fails at once instead of retrying the hub for minutes."""
    import shutil

    from helpers import tiny_dir

    good = tiny_dir("llama")
    capsys.readouterr()  # a first tiny_dir in this process prints transformers' progress

    def broken(name, change):
        folder = tmp_path / name
        shutil.copytree(good, folder)
        change(folder)
        return folder

    def unknown_type(f):
        cfg = json.loads((f / "config.json").read_text())
        (f / "config.json").write_text(json.dumps({**cfg, "model_type": "foobar", "architectures": ["FooBarForCausalLM"]}))

    def truncate_weights(f):
        w = next(f.glob("*.safetensors"))
        w.write_bytes(w.read_bytes()[:1000])

    cases = {
        "truncated-config": (lambda f: (f / "config.json").write_text((f / "config.json").read_text()[:40]),
                             "config.json is not valid JSON"),
        "no-weights": (lambda f: [w.unlink() for w in f.glob("*.safetensors")], "has a config.json but no weights"),
        "unknown-type": (unknown_type, "has model_type 'foobar', which transformers does not know; accepted: LlamaForCausalLM"),
        "truncated-weights": (truncate_weights, "weights cannot be read"),
        "truncated-tokenizer": (lambda f: (f / "tokenizer.json").write_text((f / "tokenizer.json").read_text()[:5000]),
                                "has no usable tokenizer files"),
        "empty-tokenizer": (lambda f: (f / "tokenizer.json").write_text("{}"), "has no usable tokenizer files"),
    }
    for name, (change, message) in cases.items():
        folder = broken(name, change)
        assert cli_main(["identify", "--model", str(folder), "--out", str(tmp_path / f"out-{name}")]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and message in err and "Traceback" not in err, (name, err)
        assert not (tmp_path / f"out-{name}").exists()
    from huggingface_hub import constants

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "empty-hub-cache"))
    import socket

    dialled = []  # the refusal is quick because nothing waits on the network: no socket is ever connected
    monkeypatch.setattr(socket.socket, "connect", lambda self, address: dialled.append(address))
    monkeypatch.setattr(socket, "create_connection", lambda address, *a, **k: dialled.append(address))
    assert cli_main(["identify", "--model", "gpt2", "--out", str(tmp_path / "out-gpt2")]) == 2
    err = capsys.readouterr().err
    assert "'gpt2' is an official TransformerLens name" in err and "cannot be reached" in err and err.count("\n") == 1
    assert dialled == []
