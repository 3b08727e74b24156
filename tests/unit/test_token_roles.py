"""Token roles in a pairs file and the per-position view aligned by them (issue 40).

A pairs-file line gives its operand, operator and ``=`` spans (character offsets into its prompt) or has them derived
from the template its prompt ends with; the roles travel with the result's ``pairs.jsonl``; attention by role says
"no roles given" for pairs without them; and ``circuits positions`` on pairs of two templates whose operators sit at
different offsets from END puts both operators in one "operator" column, whose effects equal a plain computation on
the saved per-pair scores."""

import json
import random

import pytest
import torch

from circuits.beyond.positions.align import align, check_alignable, first_difference, label, pair_keys
from circuits.beyond.positions.config import PositionConfig
from circuits.beyond.positions.job import run as run_positions
from circuits.beyond.positions.result import PositionResult
from circuits.data.pairs import read_pairs, read_pairs_file, render_pair, write_pairs
from circuits.data.roles import template_spans
from circuits.data.templates import FIGURE8
from circuits.io import load_torch, read_json
from circuits.patching.engines.position_sweep import sweep_positions
from circuits.results import load_result


def _write(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _decode(tokenizer, pair, role):
    return tokenizer.decode([pair.reference_token_ids[i] for i in pair.roles[role]]).strip()


def test_roles_given_in_a_pairs_file_become_token_positions_and_round_trip(tiny_llama, tokenizer, tmp_path):
    prompt = "Take 7 and add 5 and you get "  # no template's form: the roles come from the line only
    spans = {"A": [5, 6], "operator": [11, 14], "B": [15, 16], "equals": [25, 28]}
    assert {r: prompt[s:e] for r, (s, e) in spans.items()} == {"A": "7", "operator": "add", "B": "5", "equals": "get"}
    assert template_spans(prompt) is None
    path = _write(tmp_path / "p.jsonl", [{"prompt": prompt, "counterfactual": "Take 7 and none 5 and you get ",
                                          "answer": "12", "roles": spans}])
    pair = read_pairs_file(tiny_llama, path).pairs[0]
    assert {r: _decode(tokenizer, pair, r) for r in spans} == {"A": "7", "operator": "add", "B": "5", "equals": "get"}
    write_pairs(tmp_path / "pairs.jsonl", [pair])
    assert read_pairs(tmp_path / "pairs.jsonl")[0].roles == pair.roles  # saved with the result's pairs, loaded back


def test_roles_are_derived_where_the_prompt_ends_in_a_templates_form(tiny_llama, tokenizer, tmp_path):
    rows = [("1 + 2 = 3\n7 + 5 = ", "1 + 2 = 3\n7 @ 5 = ", "12"),
            ("Q: What is the sum of 3 and 4? A: ", "Q: What is the none of 3 and 4? A: ", "7"),
            ("so 9 + 9 = ", "so 9 @ 9 = ", "18"), ("hello there", "hello where", " x")]
    path = _write(tmp_path / "p.jsonl", [{"prompt": p, "counterfactual": c, "answer": a} for p, c, a in rows])
    pairs = read_pairs_file(tiny_llama, path).pairs
    got = [{r: _decode(tokenizer, p, r) for r in p.roles} for p in pairs]
    assert got[0] == {"A": "7", "operator": "+", "B": "5", "equals": "="}  # the last line, not the solved example
    assert got[1] == {"A": "3", "operator": "sum", "B": "4", "equals": "? A:"}
    assert got[2] == {"A": "9", "operator": "+", "B": "9", "equals": "="}
    assert pairs[3].roles == {}  # no template's form, no roles given


def test_a_template_pair_marks_equals_too(tokenizer):
    for t in (FIGURE8["addition"][0], FIGURE8["addition"][2], FIGURE8["addition"][6]):
        p = render_pair(t, 3, 4, tokenizer, random.Random(0), few_shot=False)
        assert _decode(tokenizer, p, "equals") == {"addition/0": "=", "addition/2": "is", "addition/6": "? A:"}[t.id]
        assert max(p.roles["equals"]) > max(p.roles["B"])


@pytest.mark.parametrize("roles, message", [
    ({"C": [0, 1]}, "line 2: unknown role 'C' (roles: A, B, operator, equals)"),
    ({"A": 5}, "line 2: roles.A must be [start, end] (two integers), got 5"),
    ({"A": [5, 99]}, "line 2: roles.A [5, 99] is not a span inside the prompt of 8 characters"),
    ({"A": [3, 3]}, "line 2: roles.A [3, 3] is not a span inside the prompt"),
    ([0, 1], "line 2: roles must be an object"),
])
def test_bad_role_fields_are_one_line_naming_the_file_and_line_before_the_model_runs(tiny_llama, tmp_path,
                                                                                    monkeypatch, roles, message):
    import circuits.data.pairs as pairs_module

    def never(*a, **k):
        raise AssertionError("the model ran before the bad line was refused")

    monkeypatch.setattr(pairs_module, "pair_logits", never)
    path = _write(tmp_path / "p.jsonl", [{"prompt": "7 + 5 = ", "counterfactual": "7 @ 5 = ", "answer": "12"},
                                         {"prompt": "8 + 6 = ", "counterfactual": "8 @ 6 = ", "answer": "14",
                                          "roles": roles}])
    with pytest.raises(ValueError) as err:
        read_pairs_file(tiny_llama, path)
    assert str(err.value).startswith(f"--pairs-file {path}, ") and message in str(err.value)
    assert "\n" not in str(err.value)


def test_bad_roles_in_a_saved_pairs_jsonl_name_the_file_and_line(tokenizer, tmp_path):
    p = render_pair(FIGURE8["addition"][0], 3, 4, tokenizer, random.Random(0), few_shot=False)
    row = p.to_json()
    row["roles"] = {"A": [len(p.reference_token_ids)]}  # past the prompt's last token
    path = _write(tmp_path / "pairs.jsonl", [p.to_json(), row])
    with pytest.raises(ValueError, match=rf"pairs.jsonl, line 2: roles.A must be token positions 0..{p.end} of the "):
        read_pairs(path)


def test_attention_by_role_says_no_roles_given(tiny_llama, tmp_path, capsys):
    from circuits.explain.attention import AttentionRoles, attention_roles, role_attention
    from circuits.explain.job import print_attention
    from circuits.types import Head

    rows = [{"prompt": "Take 7 and add 5 and you get ", "counterfactual": "Take 7 and none 5 and you get ",
             "answer": "12", "roles": {"A": [5, 6], "operator": [11, 14], "B": [15, 16]}},
            {"prompt": "hello there", "counterfactual": "hello where", "answer": " x"},
            {"prompt": "Take 2 and add 3 and you get ", "counterfactual": "Take 2 and none 3 and you get ",
             "answer": "5", "roles": {"A": [5, 6], "operator": [11, 14], "B": [15, 16]}}]
    pairs = read_pairs_file(tiny_llama, _write(tmp_path / "p.jsonl", rows)).pairs
    heads = [Head(0, 1), Head(1, 2)]
    r = attention_roles(tiny_llama, pairs, heads)
    d = r.by_operation["custom"]
    assert d["n_prompts"] == 2 and d["n_without_roles"] == 1  # the pair without roles is left out, and counted
    torch.testing.assert_close(torch.tensor(d["mean"]), role_attention(tiny_llama, [pairs[0], pairs[2]], heads).mean)
    bare = attention_roles(tiny_llama, [pairs[1]], heads)
    assert bare.by_operation["custom"]["no_roles_given"] and "mean" not in bare.by_operation["custom"]
    back = AttentionRoles.load(bare.save(tmp_path / "roles"))
    fig = back.figure()
    assert not fig.data  # no bars of 100% "other"
    texts = [a.text for a in fig.layout.annotations]
    assert any(t.startswith("custom: no roles given") for t in texts) and any("no roles given" in t for t in texts[1:])
    from circuits.viz.sections import _roles_text

    assert "No roles given for custom" in _roles_text(back)  # the report's section says so too
    print_attention(type("A", (), {"out": "x"})(), back.config, back, 0.0)
    assert "custom: no roles given (1 pairs mark no operand or operator" in capsys.readouterr().out


def _two_templates(tokenizer):
    """Pairs of ``{A} {OP} {B} =`` and ``The {OP} of {A} and {B} is``: their operators sit 4 and 8 tokens before END."""
    rng = random.Random(0)
    pairs = [render_pair(FIGURE8["addition"][t], a, 2, tokenizer, rng, few_shot=fs)
             for t, a, fs in [(0, 1, False), (2, 3, False), (0, 4, True), (2, 5, True)]]
    depth = {p.template_id: p.end - p.roles["operator"][0] for p in pairs}
    assert depth["addition/0"] != depth["addition/2"]  # the operators are at different offsets from END
    return pairs


def test_the_view_aligns_both_operators_in_the_operator_column(tiny_llama, tokenizer, tmp_path):
    pairs = _two_templates(tokenizer)
    r = PositionResult(PositionConfig(metric="logit_diff"), pairs, sweep_positions(tiny_llama, pairs, progress=False))
    r.save(tmp_path / "pos")
    summary = read_json(tmp_path / "pos" / "summary.json")
    saved = load_torch(tmp_path / "pos" / "positions.pt")
    aligned = summary["aligned"]
    assert aligned["by"] == "role"
    c = aligned["columns"].index("operator")
    # every pair is read at its own operator's offset in the operator column
    assert aligned["offsets"][c] == [p.end - p.roles["operator"][0] for p in pairs]
    # the column's effect, computed plainly from the saved per-pair scores: mean over pairs of the patched logit
    # difference at that pair's operator minus its unpatched one
    per_pair = saved["head_logit_diff"]  # [layer, head, offset, pair]
    base = saved["baseline"]["logit_diff"]
    plain = torch.stack([per_pair[:, :, p.end - p.roles["operator"][0], i] - base[i] for i, p in enumerate(pairs)],
                        -1).mean(-1)
    got = torch.tensor(aligned["metrics"]["logit_diff"]["head_effects"])[:, :, c]
    torch.testing.assert_close(got, plain, atol=1e-6, rtol=0)
    assert plain.abs().max() > 1e-4  # the operator's patch moves the answer
    for role in ("A", "B", "equals", "END"):  # each role's column holds that role of every pair
        k = aligned["columns"].index(role)
        assert aligned["offsets"][k] == [p.end - (p.roles[role][0] if role != "END" else p.end) for p in pairs]
    # the figure: its columns are the roles, and the operator marker stands on the operator column in both panels
    fig = load_result(tmp_path / "pos").figure()
    assert list(fig.data[0].x) == aligned["columns"]
    orange = [s.x0 for s in fig.layout.shapes if s.line.color == "#ff7f0e"]
    assert orange == [c, c]
    assert "aligned by token role across 2 templates" in fig.layout.title.text.replace("<br>", " ")
    from circuits.viz.analysis_sections import _columns_text

    assert "the columns are token roles" in _columns_text(load_result(tmp_path / "pos"))


def test_positions_from_pairs_of_two_templates_align_by_role(tiny_llama, tokenizer, tmp_path):
    """``circuits positions --pairs-from`` a result holding pairs of two templates: the sweep's figure puts both
    operators in the operator column (it drew offsets from END under one prompt's markers before)."""
    from helpers import tiny_dir

    pairs = _two_templates(tokenizer)
    model = str(tiny_dir("llama"))
    PositionResult(PositionConfig(model=model), pairs, sweep_positions(tiny_llama, pairs, offsets=[0],
                                                                       progress=False)).save(tmp_path / "src")
    r = run_positions(PositionConfig(model=model, pairs_from=str(tmp_path / "src"), n_pairs=4, metric="logit_diff"),
                      tmp_path / "pos", model=tiny_llama, progress=False)
    al = r.alignment()
    c = al.labels.index("operator")
    assert al.n_pairs()[c] == 4 and al.by_role
    assert [p.end - o for p, o in zip(r.pairs, al.offsets[c])] == [p.roles["operator"][0] for p in r.pairs]


def test_one_template_keeps_the_token_view(tiny_llama, tokenizer):
    rng = random.Random(1)
    pairs = [render_pair(FIGURE8["addition"][0], a, 2, tokenizer, rng, few_shot=True) for a in (1, 3, 4)]
    al = align(pairs)
    assert not al.by_role  # every pair has the same layout: the positions of any one of them, token for token
    assert all(label(pair_keys(p)[p.roles["operator"][0]]) == "operator" for p in pairs)
    assert all(first_difference(p) == p.roles["operator"][0] for p in pairs)


def test_pairs_without_roles_are_refused_before_the_sweep(tiny_llama, tmp_path, monkeypatch):
    import circuits.beyond.positions.job as job

    def never(*a, **k):
        raise AssertionError("the sweep ran")

    monkeypatch.setattr(job, "sweep_positions", never)
    path = _write(tmp_path / "p.jsonl", [{"prompt": "7 + 5 = ", "counterfactual": "7 @ 5 = ", "answer": "12"},
                                         {"prompt": "hello there", "counterfactual": "hello where", "answer": " x"}])
    with pytest.raises(ValueError, match=r"1 of 2 pairs mark no operand, operator or '=' \(pair 2, 'hello there'\), "
                                         "so their positions cannot be aligned by token role"):
        run_positions(PositionConfig(pairs_file=str(path), filter_correct=False), tmp_path / "out", model=tiny_llama,
                      progress=False)
    with pytest.raises(ValueError, match="cannot be aligned"):
        check_alignable(read_pairs_file(tiny_llama, path).pairs)


def test_the_cli_says_each_refusal_in_one_line_and_writes_nothing(tmp_path, capsys):
    from helpers import tiny_dir

    from circuits.cli import main as cli_main

    flags = ["--model", str(tiny_dir("llama")), "--no-filter-correct", "--few-shot", "off", "--no-progress"]
    cases = [([{"prompt": "7 + 5 = ", "counterfactual": "7 @ 5 = ", "answer": "12", "roles": {"A": [0, 40]}}],
              "line 1: roles.A [0, 40] is not a span inside the prompt of 8 characters"),
             ([{"prompt": "hello there", "counterfactual": "hello where", "answer": " x"}],
              "1 of 1 pairs mark no operand, operator or '=' (pair 1, 'hello there')")]
    for i, (rows, message) in enumerate(cases):
        path = _write(tmp_path / f"p{i}.jsonl", rows)
        assert cli_main(["positions", *flags, "--pairs-file", str(path), "--out", str(tmp_path / f"out{i}")]) == 2
        lines = [line for line in capsys.readouterr().err.splitlines()
                 if line.strip() and "weights" not in line and "shards" not in line]
        assert len(lines) == 1 and message in lines[0], lines
        assert not (tmp_path / f"out{i}").exists()


_LINE = {"prompt": "3 + 5 = 8\n2 + 3 = ", "counterfactual": "3 + 5 = 8\n2 + 4 = ", "answer": "5"}


@pytest.mark.parametrize("command, line, said", [
    ("identify", {**_LINE, "roles": {"a": [10, 11]}}, "line 2: unknown role 'a'"),
    ("identify", {**_LINE, "roles": [10, 11]}, "line 2: roles must be an object"),
    ("positions", {**_LINE, "roles": {"A": [11, 10]}}, "line 2: roles.A [11, 10] is not a span inside the prompt"),
    ("identify", {"prompt": 1}, "line 2: expected an object with string fields"),
    ("faithfulness", _LINE, "line 2: --second-logit label needs each line's counterfactual_answer"),  # its default
])
def test_a_bad_pairs_file_line_is_one_line_before_torch(tmp_path, command, line, said):
    """A line the job would refuse once the model has loaded (a minute under load) is refused before torch is imported;
    only the lines the job reads (--pairs) are checked."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    good = {**_LINE, "counterfactual_answer": "6"}
    path = _write(tmp_path / "p.jsonl", [good, line, good])
    code = ("import sys; from circuits.cli import main; "
            f"rc = main([{command!r}, '--pairs-file', {str(path)!r}, '--out', {str(tmp_path / 'o')!r}]); "
            "print('rc', rc, 'torch' in sys.modules)")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=root, timeout=300)
    assert "rc 2 False" in run.stdout, run.stdout + run.stderr
    assert run.stderr.startswith(f"circuits {command}: error: --pairs-file {path}, {said}"), run.stderr
    assert run.stderr.count("\n") == 1 and not (tmp_path / "o").exists()
    # --pairs 1 reads the good first line only: the bad second is the job's to read, not refused before it
    from circuits.beyond.faithfulness.config import FaithfulnessConfig
    from circuits.cli.sizes import check_pairs_file

    check_pairs_file(FaithfulnessConfig(pairs_file=str(path), n_pairs=1))
    with pytest.raises(ValueError) as refused:
        check_pairs_file(FaithfulnessConfig(pairs_file=str(path), n_pairs=2))
    assert f"--pairs-file {path}, {said}" in str(refused.value)
