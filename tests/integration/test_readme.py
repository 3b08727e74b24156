"""The README's Python example runs as written (at a smaller size), from one import."""

import re
from pathlib import Path

import plotly.graph_objects as go
import pytest

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


def _start_here_block() -> str:
    return re.search(r"## Start here.*?```python\n(.*?)```", (ROOT / "README.md").read_text(), re.S).group(1)


def test_readme_start_here_snippet_answers_its_prompts_and_nothing_warns(smollm2, monkeypatch, tmp_path):
    """README's "Start here" Python: the model answers the prompts (three solved examples first), and the numbers the
    README states beside it (15 of 16 answered, a 13% move of the answer logit, no warning) are what it gives."""
    import warnings

    import circuits as cc
    from circuits.identify.result import load_identify
    from circuits.identify.validity import ValidityWarning

    monkeypatch.setattr(cc, "load_model", lambda *a, **k: smollm2)
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("CIRCUITS_FORCE", raising=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ValidityWarning)
        exec(_start_here_block(), {})
    v = load_identify(tmp_path / "results" / "mine").validity()
    assert v.n_pairs == 16 and v.accuracy == 15 / 16 and v.full_effect == pytest.approx(0.13, abs=0.005)
    assert v.lines() == [], v.lines()


def test_the_former_readme_prompts_are_refused_from_python_as_by_the_job(smollm2, monkeypatch):
    """The three sums without solved examples (the README's snippet before issue 40): answered 0 times in 3, so
    ``identify`` refuses them from Python with the job's one line; with ``force=True`` the result comes with a
    ValidityWarning and its record says why it was refused."""
    import circuits as cc
    from circuits.identify import identify
    from circuits.identify.validity import Untrusted, ValidityWarning

    monkeypatch.delenv("CIRCUITS_FORCE", raising=False)
    pairs = [cc.make_pair(smollm2.tokenizer, f"{a} + {b} = ", f"{a} @ {b} = ", str(a + b)) for a, b in [(3, 4), (2, 5), (1, 6)]]
    with pytest.raises(Untrusted, match="identify refused, this result cannot be trusted: the model answers 0%"):
        identify(smollm2, pairs, cc.IdentifyConfig(model="smollm2"), progress=False)
    with pytest.warns(ValidityWarning, match="answers 0% of the pairs swept"):
        r = identify(smollm2, pairs, cc.IdentifyConfig(model="smollm2"), progress=False, force=True)
    v = r.validity()
    assert v.accuracy == 0 and v.refusals and v.forced and v.full_effect == pytest.approx(0.049, abs=0.002)
    assert v.uncertain_share > 2 / 3


def test_a_pairs_file_answered_once_in_six_is_refused_without_force(smollm2, tmp_path, capsys, monkeypatch):
    import json

    from circuits.cli import main as cli_main

    monkeypatch.delenv("CIRCUITS_FORCE", raising=False)
    sums = [(3, 4), (2, 5), (1, 6), (2, 3), (4, 4), (1, 2)]  # SmolLM2 answers only 1 + 2 without solved examples
    path = tmp_path / "pairs.jsonl"
    path.write_text("".join(json.dumps({"prompt": f"{a} + {b} = ", "counterfactual": f"{a} @ {b} = ",
                                        "answer": str(a + b)}) + "\n" for a, b in sums))
    args = ["identify", "--model", "smollm2", "--pairs-file", str(path), "--no-filter-correct", "--no-progress"]
    out = tmp_path / "mine"
    assert cli_main([*args, "--out", str(out)]) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if "circuits identify" in line]
    assert len(err) == 1 and "answers 17% of the pairs swept" in err[0] and "--force" in err[0]
    assert not out.exists()
    assert cli_main([*args, "--force", "--out", str(out)]) == 0
    assert "warning: refused without force" in capsys.readouterr().err
    s = json.loads((out / "summary.json").read_text())
    assert s["validity"]["accuracy"] == pytest.approx(1 / 6) and s["warnings"] and s["config"]["force"] is True
    report = tmp_path / "report.html"
    assert cli_main(["report", str(out), "--out", str(report)]) == 0
    assert "Results that may not be trusted" in report.read_text()
