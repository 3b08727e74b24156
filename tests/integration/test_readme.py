"""The README's Python example runs as written (at a smaller size), from one import."""

import re
from pathlib import Path

import plotly.graph_objects as go

ROOT = Path(__file__).resolve().parents[2]


def test_readme_python_example_runs(smollm2, monkeypatch, capsys):
    import circuits as cc

    block = re.search(r"## Python\n\n```python\n(.*?)```", (ROOT / "README.md").read_text(), re.S).group(1)
    lines = [line for line in block.splitlines() if line.strip()]
    assert lines[0] == "import circuits as cc" and len(lines) <= 7
    monkeypatch.setattr(cc, "load_model", lambda *a, **k: smollm2)  # the session's SmolLM2
    monkeypatch.setattr(go.Figure, "show", lambda self, *a, **k: None)
    exec(block.replace("n_pairs=32", "n_pairs=6"), {})
    assert "Head(layer=" in capsys.readouterr().out
