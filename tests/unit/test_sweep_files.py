"""``cc.sweep(...).save(folder)`` and ``SweepResult.load(folder)`` (issue 29: the README promised ``save``/``load``
on every result and ``cc.sweep``'s raised AttributeError): every per-pair value loads back equal, with the same
effects and key heads; a custom metric's values too; a folder of something else is refused; a damaged file is one
ResultError naming it. And every result the README names saves and loads back (the kinds of RESULT_TYPES)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch

import circuits as cc
from circuits.io import OutputError
from circuits.patching.engines.end_sweep import SweepResult
from circuits.results import RESULT_TYPES, ResultError, result_type, same


@pytest.fixture(scope="module")
def made(tiny_llama):
    from circuits.data.pairs import build_pairs

    pairs = build_pairs(tiny_llama, "addition", n_pairs=4, filter_correct=False, few_shot="on").pairs
    margin = cc.logits_metric(lambda logits, answers: logits[torch.arange(len(answers)), answers], name="answer_logit2")
    return cc.sweep(tiny_llama, pairs, metrics=[margin], progress=False), margin


def test_a_sweep_saves_and_loads_back_equal(made, tmp_path):
    sweep, margin = made
    folder = sweep.save(tmp_path / "s")
    assert sorted(p.name for p in folder.iterdir()) == ["sweep.json", "sweep.pt"]
    back = SweepResult.load(folder, metrics=[margin])
    assert same(back.tensors(), sweep.tensors()) and back.mode == sweep.mode
    for metric in ("fraction", "relative_logit", "logit_diff", "answer_logit2"):
        assert same(tuple(back.scores(metric).parts.values()), tuple(sweep.scores(metric).parts.values()))
    assert back.scores().key("top3") == sweep.scores().key("top3")
    assert json.loads((folder / "sweep.json").read_text())["provenance"]["torch"] == torch.__version__
    sweep.save(folder)  # a saved sweep is replaced
    assert same(SweepResult.load(folder).head_logit, sweep.head_logit)


def test_a_folder_of_something_else_is_refused(made, tmp_path):
    sweep, _ = made
    (tmp_path / "proj").mkdir()
    (tmp_path / "proj" / "notes.txt").write_text("mine")
    with pytest.raises(OutputError, match="already holds files that are not a saved sweep"):
        sweep.save(tmp_path / "proj")
    assert (tmp_path / "proj" / "notes.txt").read_text() == "mine"
    (tmp_path / "f").write_text("x")
    with pytest.raises(OutputError, match="is an existing file"):
        sweep.save(tmp_path / "f")


def test_a_damaged_saved_sweep_is_one_result_error(made, tmp_path):
    sweep, _ = made
    folder = sweep.save(tmp_path / "s")
    meta = json.loads((folder / "sweep.json").read_text())
    (folder / "sweep.json").write_text(json.dumps({**meta, "n_heads": meta["n_heads"] + 1}))
    with pytest.raises(ResultError, match=r"sweep.pt: head_logit is \[.*\], not \[.*\] as sweep.json says"):
        SweepResult.load(folder)
    (folder / "sweep.json").write_text(json.dumps({**meta, "n_pairs": "4"}))
    with pytest.raises(ResultError, match="field 'n_pairs' is '4', not a count"):
        SweepResult.load(folder)
    (folder / "sweep.json").write_text(json.dumps(meta))
    (folder / "sweep.pt").write_bytes((folder / "sweep.pt").read_bytes()[:100])
    with pytest.raises(ResultError, match="sweep.pt"):
        SweepResult.load(folder)


def test_every_result_the_readme_names_has_save_and_load():
    """The README's sentence listing the results that save: each named one is a result kind (round-tripped one by one
    in tests/unit/test_results_io.py) or the sweep (above)."""
    text = (Path(__file__).parents[2] / "README.md").read_text()
    said = re.search(r"the jobs' results\s*\((.*?)\) have `save\(folder\)`", text, re.S)
    assert said, "the README no longer lists the results that save"
    names = {"IdentifyResult": "identify", "knockout": "knockout", "attention": "attention",
             "lens": "lens", "screen": "screen", "faithfulness": "faithfulness", "fine-tuning": "finetune"}
    for word, kind in names.items():
        assert word in said.group(1) and kind in RESULT_TYPES
        cls = result_type(kind)
        assert callable(getattr(cls, "save", None)) and callable(getattr(cls, "load", None))
    assert "SweepResult" in text and "sweep.save(" in text
    assert callable(SweepResult.save) and callable(SweepResult.load)
