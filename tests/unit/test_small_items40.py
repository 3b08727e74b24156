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
