"""Issue 40's smaller items: a ``--heads-from`` that holds no result is refused in one line before torch is imported
(it came after 15-30 s of imports), and a knockout point's hover says what it is in words."""

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
