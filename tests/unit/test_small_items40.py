"""Issue 40's smaller items: a ``--heads-from`` that holds no result is refused in one line before torch is imported
(it came after 15-30 s of imports), a knockout point's hover says what it is in words, the per-position view numbers
tokens as the attention views do, and the demo shows each operation with its own heads."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_a_heads_from_holding_nothing_is_one_line_without_torch(tmp_path):
    code = ("import sys; from circuits.cli import main; "
            f"rc = main(['transfer', '--heads-from', {str(tmp_path / 'none')!r}, '--out', {str(tmp_path / 'o')!r}]); "
            "print('rc', rc, 'torch' in sys.modules)")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert "rc 2 False" in run.stdout, run.stdout + run.stderr
    err = run.stderr.strip()
    assert err == (f"circuits transfer: error: {tmp_path / 'none'} holds no identify result; pass the output folder "
                   "of `circuits identify`")
    assert not (tmp_path / "o").exists()


def test_knockout_hover_names_the_point_in_words():
    from circuits.viz.figures import knockout_figure

    fig = knockout_figure([0, 16], [1.0, 0.078125], [[1.0, 0.9], [1.0, 0.8]], "accuracy", "",
                          bands={"key": [[0.9, 1.0], [0.0, 0.2]], "random": [[0.9, 1.0], [0.7, 0.95]], "level": 0.95})
    shown = [t for t in fig.data if t.hoverinfo != "skip"]
    assert shown and all(t.hovertemplate and "heads out" in t.hovertemplate for t in shown)
    key = next(t for t in fig.data if t.name == "top-k heads (effect rank)")
    assert key.hovertemplate.startswith("top-k heads (effect rank)<br>%{x} heads out: accuracy %{y:.1%}")


def test_the_flow_figure_numbers_tokens_by_their_position_in_the_prompt(tiny_llama, tmp_path):
    """Issue 40: the per-position view said "8:␣" where the attention views said "29:␣" for the same token: both now
    number a token by its position in the prompt."""
    from result_cases import SOURCE

    from circuits.beyond.positions.config import PositionConfig
    from circuits.beyond.positions.job import run as run_positions
    from circuits.explain.attention import visible_tokens

    # one template, so the view is the token view (pairs of several templates get columns by role: test_token_roles)
    pc = PositionConfig(**SOURCE, template="addition/0", few_shot="on", filter_correct=False, offsets=(0, 1, 2))
    r = run_positions(pc.replace(n_pairs=2), tmp_path / "positions", model=tiny_llama, progress=False)
    fig = r.figure()
    labels = list(fig.data[0].x)
    p = r.representative()
    tokens = visible_tokens(tiny_llama.to_str_tokens(__import__("torch").tensor(p.reference_token_ids)))
    for label in labels:
        pos, tok = label.split(":", 1)
        assert tokens[int(pos)] == tok  # the prompt's own position of that token
    assert labels[-1].startswith(f"{p.end}:")


def test_the_demo_shows_each_operation_with_its_own_heads(tmp_path, monkeypatch):
    """Issue 40: the demo's attention panels for -, x and / used addition's heads (only the made-by line said so)."""
    from helpers import tiny_dir

    from circuits.cli import main as cli_main
    from circuits.results import load_result

    monkeypatch.syspath_prepend(str(ROOT / "experiments"))
    import demo_method

    model = str(tiny_dir("llama"))
    for op in ("addition", "subtraction"):
        assert cli_main(["identify", "--model", model, "--task", op, "--no-filter-correct", "--few-shot", "on",
                         "--pairs", "4", "--bootstrap", "0", "--force", "--out", str(tmp_path / "id" / op)]) == 0
    demo_method.main(["--identify-dir", str(tmp_path / "id"), "--out", str(tmp_path / "demo"), "--model", model,
                      "--pairs", "3"])
    heads = {}
    for op in ("addition", "subtraction"):
        made = load_result(tmp_path / "id" / op)
        roles, views = load_result(tmp_path / "demo" / f"attention-roles-{op}"), load_result(
            tmp_path / "demo" / f"attention-views-{op}")
        assert list(roles.by_operation) == [op] and roles.config.task == op
        assert roles.heads == made.top_heads(len(roles.heads)) and views.heads == made.top_heads(len(views.heads))
        heads[op] = roles.heads
    assert heads["addition"] != heads["subtraction"]  # not one operation's heads shown for both


def test_a_heads_from_made_with_other_flags_is_one_line_without_torch(tmp_path):
    from helpers import tiny_dir

    from circuits.cli import main as cli_main

    ident = tmp_path / "addition"
    assert cli_main(["identify", "--model", str(tiny_dir("llama")), "--no-filter-correct", "--few-shot", "on",
                     "--pairs", "3", "--bootstrap", "0", "--force", "--out", str(ident)]) == 0
    code = ("import sys; from circuits.cli import main; "
            f"rc = main(['lens', '--heads-from', {str(ident)!r}, '--task', 'subtraction', '--out', "
            f"{str(tmp_path / 'x')!r}]); print('rc', rc, 'torch' in sys.modules)")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert "rc 2 False" in run.stdout, run.stdout + run.stderr
    assert "was made with task='addition', not task='subtraction'" in run.stderr and run.stderr.count("\n") == 1
    assert not (tmp_path / "x").exists()


def test_heads_from_with_own_pairs_runs_the_results_heads_on_those_pairs(tmp_path):
    """Issue 40: ``--heads-from`` refused ``--pairs`` and ``--pairs-file`` in one line; a job now runs the result's
    heads on its own pairs: the pairs are the file's (or the count asked), the ranking is the identify result's, and
    the numbers equal the job's function called on those pairs by hand."""
    import json

    from helpers import tiny_dir

    from circuits.cli import main as cli_main
    from circuits.data.pairs import build_pairs
    from circuits.models import load_model
    from circuits.results import load_result
    from circuits.validate.job import knockout_result

    model_dir = str(tiny_dir("llama"))
    ident = tmp_path / "addition"
    assert cli_main(["identify", "--model", model_dir, "--no-filter-correct", "--few-shot", "on", "--pairs", "4",
                     "--bootstrap", "0", "--force", "--no-progress", "--out", str(ident)]) == 0
    made = load_result(ident)
    mine = [{"prompt": f"{a} + {b} = ", "counterfactual": f"{a} @ {b} = ", "answer": str(a + b)}
            for a, b in ((3, 4), (2, 5), (1, 1))]
    path = tmp_path / "mine.jsonl"
    path.write_text("".join(json.dumps(p) + "\n" for p in mine))

    ko = tmp_path / "ko"
    assert cli_main(["knockout", "--heads-from", str(ident), "--pairs-file", str(path), "--ks", "0,2", "--seeds", "0",
                     "--no-progress", "--out", str(ko)]) == 0
    r = load_result(ko)
    assert r.n_pairs == 3 and r.config.pairs_file == str(path) and r.config.heads_from == str(ident)
    assert r.curve.ranking[:2] == made.scores(None).top(2, "heads")  # the result's heads
    model = load_model(model_dir, device="cpu")
    pairs = build_pairs(model, r.config.pair_config(), progress=False).pairs
    assert [p.reference for p in pairs] == [p["prompt"] for p in mine]
    assert knockout_result(model, made, r.config, pairs).curve == r.curve  # measured on the file's pairs

    edges = tmp_path / "edges"
    assert cli_main(["edges", "--heads-from", str(ident), "--receivers", "2.1", "--pairs", "2", "--no-progress",
                     "--out", str(edges)]) == 0
    e = load_result(edges)
    assert len(e.pairs) == 2 and e.config.n_pairs == 2 and len(made.pairs) == 4
    same = tmp_path / "same"  # no pair flag: the identify result's own pairs, as before
    assert cli_main(["edges", "--heads-from", str(ident), "--receivers", "2.1", "--no-progress", "--out", str(same)]) == 0
    assert [p.reference for p in load_result(same).pairs] == [p.reference for p in made.pairs]


def _cli_line(argv: list[str]) -> tuple[str, str]:
    """The command's exit code and whether torch was imported (printed), and its stderr, from a fresh process."""
    code = f"import sys; from circuits.cli import main; rc = main({argv!r}); print('rc', rc, 'torch' in sys.modules)"
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=300)
    return run.stdout, run.stderr.strip()


def test_a_bad_key_rule_is_one_line_without_torch(tmp_path):
    """Issue 40: ``--key-rule`` was read by KeyRule.parse, which imports torch, so its error came after the imports."""
    for command in ("identify", "knockout"):
        out, err = _cli_line([command, "--key-rule", "fractoin>=0.05", "--out", str(tmp_path / command)])
        assert "rc 2 False" in out, out + err
        assert err == (f"circuits {command}: error: Unknown metric 'fractoin' in key rule 'fractoin>=0.05'; accepted: "
                       "relative_logit, fraction, logit_diff, prob, answer_logprob")
        assert not (tmp_path / command).exists()


def test_the_torch_free_key_rule_reader_is_the_one_keyrule_parses_with():
    """KeyRule.parse builds its rule from circuits.types.key_rule_parts: the same rules read, the same errors."""
    import pytest

    from circuits.patching.core.ranking import KeyRule
    from circuits.types import key_rule_parts

    for text in ("fraction>=0.05", "relative_logit<-0.05", "top10", "top3:prob", " logit_diff <= -0.5 "):
        r = KeyRule.parse(text)
        assert (r.metric, r.op, r.threshold, r.top_k) == key_rule_parts(text)
    for bad in ("fraction>=x", "fraction>=inf", "top0", "nonsense", "fractoin>=0.1"):
        with pytest.raises(ValueError) as a:
            KeyRule.parse(bad)
        with pytest.raises(ValueError) as b:
            key_rule_parts(bad)
        assert str(a.value) == str(b.value)


def test_a_count_past_the_models_heads_is_one_line_before_the_model_loads(tmp_path):
    """Issue 40: ``--ks 0,1000`` was checked once the model had loaded (8 s on SmolLM2); the model's heads are now
    read without loading it -- from the ``--heads-from`` result, a Hugging Face folder's config.json -- and the line
    comes with torch not imported."""
    from helpers import tiny_dir

    from circuits.cli import main as cli_main
    from circuits.cli.sizes import declared_sizes
    from circuits.models import load_model

    model_dir = str(tiny_dir("llama"))
    cfg = load_model(model_dir, device="cpu").cfg
    heads = cfg.n_layers * cfg.n_heads
    assert declared_sizes(model_dir) == (cfg.n_layers, cfg.n_heads)  # the loaded model's own sizes
    ident = tmp_path / "addition"
    assert cli_main(["identify", "--model", model_dir, "--no-filter-correct", "--few-shot", "on", "--pairs", "3",
                     "--bootstrap", "0", "--force", "--no-progress", "--out", str(ident)]) == 0
    assert declared_sizes("not-read-first", str(ident)) == (cfg.n_layers, cfg.n_heads)
    for argv in (["knockout", "--heads-from", str(ident), "--ks", f"0,{heads + 1}"],
                 ["knockout", "--model", model_dir, "--ks", f"0,{heads + 1}"],
                 ["attention-views", "--heads-from", str(ident), "--n-key-heads", str(heads + 1)]):
        out, err = _cli_line([*argv, "--out", str(tmp_path / "x")])
        assert "rc 2 False" in out, out + err
        assert err.count("\n") == 0 and f"must be at most {heads} (the model's heads), got {heads + 1}" in err, err
        assert not (tmp_path / "x").exists()
    outside = f"{cfg.n_layers}.0"  # a receiver past the last layer: the line the sweep gave once the model loaded
    for argv, line in ((["edges", "--heads-from", str(ident), "--receivers", outside],
                        f"circuits edges: error: Component {outside} is outside this model ({cfg.n_layers} layers x "
                        f"{cfg.n_heads} heads)."),
                       (["identify", "--model", model_dir, "--receivers", f"0.{cfg.n_heads}"],
                        f"circuits identify: error: Component 0.{cfg.n_heads} is outside this model"),
                       (["identify", "--pairs-file", str(tmp_path / "none.jsonl")],
                        f"circuits identify: error: {tmp_path / 'none.jsonl'} not found")):
        out, err = _cli_line([*argv, "--out", str(tmp_path / "x")])
        assert "rc 2 False" in out and err.startswith(line) and err.count("\n") == 0, out + err
    out, err = _cli_line(["knockout", "--heads-from", str(ident), "--ks", f"0,{heads}", "--seeds", "0", "--no-progress",
                          "--out", str(tmp_path / "ok")])
    assert "rc 0 True" in out, out + err  # the bound itself is accepted, and the job runs


def test_a_gguf_header_gives_the_layers_and_heads(tmp_path):
    """The GGUF header reader against a file written by the gguf package's own writer (a string array, as a
    tokenizer's vocabulary, before the sizes), and on the embedded SmolLM2 (30 layers of 9 heads)."""
    import pytest

    gguf = pytest.importorskip("gguf")
    import numpy as np

    from circuits.cli.sizes import declared_sizes, gguf_sizes

    path = tmp_path / "tiny.gguf"
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_array("tokenizer.ggml.tokens", ["a", "bb", "ccc"] * 50)
    w.add_array("tokenizer.ggml.scores", [0.5] * 150)
    w.add_block_count(7)
    w.add_head_count(5)
    w.add_tensor("x", np.zeros(4, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    assert gguf_sizes(path) == (7, 5) and declared_sizes(str(path)) == (7, 5)
    assert declared_sizes("meta-llama/Llama-2-7b-hf") is None  # a hub name: checked once loaded
    from circuits.models.embedded import embedded_model

    if embedded_model("smollm2").installed():
        assert declared_sizes("smollm2") == (30, 9)


def test_the_made_by_line_says_the_pairs_a_result_was_made_on(tmp_path):
    """Issue 40: the made-by line said ``n_pairs=64`` (the flag's cap) for a run on a file of 3 pairs, and showed
    flags a pairs file does not use; it now says the pairs the result holds and the file read (hash, lines read), and
    names the fields the file made unused (None in config.json; the seed stays: identify's bootstrap reads it)."""
    import hashlib
    import json
    import re

    from helpers import tiny_dir

    from circuits.cli import main as cli_main

    lines = [{"prompt": f"{a} + {b} = ", "counterfactual": f"{a} @ {b} = ", "answer": str(a + b)}
             for a, b in ((3, 4), (2, 5), (1, 1))]
    path = tmp_path / "mine.jsonl"
    path.write_text("".join(json.dumps(p) + "\n" for p in lines))
    out = tmp_path / "run"
    assert cli_main(["identify", "--model", str(tiny_dir("llama")), "--pairs-file", str(path), "--no-filter-correct",
                     "--bootstrap", "0", "--force", "--no-progress", "--out", str(out)]) == 0
    assert json.loads((out / "config.json").read_text())["n_pairs"] == 64  # the flag's cap, as given
    assert cli_main(["report", str(out), "--out", str(tmp_path / "report.html")]) == 0
    page = (tmp_path / "report.html").read_text()
    made_by = re.search(r"<summary>made by .*?<br>", page).group(0)
    digest = hashlib.sha256(path.read_bytes()).hexdigest()[:12]
    # the seed is shown: identify reads it for the bootstrap's resamples; the fields the file replaced are None
    assert "n_pairs=3," in made_by and "n_pairs=64" not in made_by and "seed=0" in made_by, made_by
    assert f"pairs_file=mine.jsonl (sha256 {digest}, 3 lines read)" in made_by, made_by
    assert "few_shot, prefix_policy, counterfactual, operand_range, max_candidates: not used (the pairs are the" in page
    saved = json.loads((out / "config.json").read_text())
    assert saved["few_shot"] is None and saved["counterfactual"] is None and saved["seed"] == 0
    path.unlink()  # the result's pairs are saved in it: a job taking its heads does not read the file again
    assert cli_main(["knockout", "--heads-from", str(out), "--ks", "0,1", "--seeds", "0", "--no-progress",
                     "--out", str(tmp_path / "ko")]) == 0


def test_the_made_by_line_of_pairs_taken_from_a_result():
    """``--pairs-from``: the pairs are those saved in the folder (its seed made them), so the line says how many the
    result holds and where they came from, not the flags' seed."""
    import re
    from pathlib import Path

    from circuits.viz.page import config_block

    block = config_block(Path("runs/positions"), {"model": "smollm2", "task": "addition", "n_pairs": 64, "seed": 0,
                                                  "few_shot": "auto", "pairs_from": "/data/id-addition"},
                         None, {"n_pairs": 6})
    line = re.search(r"<summary>made by .*?<br>", block).group(0)
    assert "n_pairs=6" in line and "seed=" not in line and "pairs_from=id-addition" in line, line
    assert "not used (the pairs are those saved in --pairs-from)" in block
