"""Issue 40, provenance: a result made from ``--pairs-file`` records no default the file replaced. Every job that takes
a pairs file (the ranking jobs, and the ``--heads-from`` jobs with their own pairs) saves ``None`` for the pair fields
it did not read (``few_shot``, ``counterfactual``, ... and ``seed`` where nothing else reads it), its config loads back
typed and equal, an older config holding the flags' values still loads, and the result's ``summary.json`` names the
file read and its SHA-256."""

from __future__ import annotations

import hashlib
import json
import re

import pytest
from helpers import tiny_dir

from circuits.cli import main as cli_main
from circuits.data.pair_config import PAIRS_FILE_REPLACES
from circuits.results import load_result

PAIRS = [{"prompt": f"{a} + {b} = ", "counterfactual": f"{a} @ {b} = ", "answer": str(a + b)}
         for a, b in ((3, 4), (2, 5), (1, 1), (4, 4))]

# job -> (its flags besides the model or --heads-from, the pairs file and --out; the fields it still reads beside the
# pairs: the seed of identify's bootstrap (and of transfer's sets, numbers' problems), heuristics' grid)
RANKING = {
    "identify": (["--bootstrap", "5", "--key-rule", "top2"], ("seed",)),
    "screen": (["--verify", "2"], ()),
    "positions": (["--offsets", "0,1"], ()),
    "neurons": (["--layers", "1", "--shares", "0.05"], ()),
    "heuristics": (["--layers", "1,2", "--neurons-per-mlp", "4", "--operands", "0,4", "--threshold", "0.3", "--alpha",
                    "1", "--n-random", "2", "--n-boot", "20"], ("seed", "few_shot")),
    "faithfulness": (["--rankings", "exact-path", "--sizes", "0.2,0.5", "--second-logit", "top", "--no-held-out"], ()),
    # held out: the scoring pairs are the file's lines after the ranking ones (no seed draws them)
    "faithfulness/held-out": (["--rankings", "exact-path", "--sizes", "0.2,0.5", "--second-logit", "top",
                               "--pairs", "2"], ()),
}
FROM_HEADS = {
    "knockout": ["--ks", "0,1", "--seeds", "0"],
    "transfer": ["--n-key-heads", "2", "--n", "2", "--n-mmlu", "2", "--svamp-shots", "1"],
    "attention": ["--n-key-heads", "2", "--operations", "addition", "--n-prompts", "2"],
    "attention-views": ["--n-key-heads", "2", "--operations", "addition"],
    "lens": ["--top-k", "2"],
    "numbers": ["--n-heads", "2", "--n-mlps", "2", "--n-problems", "4", "--digit-floor", "0", "--digit-mlps", "1",
                "--top-neurons", "3"],
    "edges": ["--receivers", "2.1,MLP1"],
}


@pytest.fixture(scope="module")
def pairs_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("pairs") / "mine.jsonl"
    path.write_text("".join(json.dumps(p) + "\n" for p in PAIRS))
    return path


@pytest.fixture(scope="module")
def heads(tmp_path_factory):
    """An identify result made on the templates (its seed, few-shot prefix and counterfactual all read)."""
    out = tmp_path_factory.mktemp("heads") / "addition"
    assert cli_main(["identify", "--model", str(tiny_dir("llama")), "--no-filter-correct", "--few-shot", "on",
                     "--pairs", "3", "--bootstrap", "0", "--force", "--no-progress", "--out", str(out)]) == 0
    return out


def _check(out, path, kept: tuple[str, ...]) -> None:
    saved = json.loads((out / "config.json").read_text())
    flat = {**{k: v for sub in saved.values() if isinstance(sub, dict) for k, v in sub.items()}, **saved}
    assert flat["pairs_file"] == str(path)
    for name in PAIRS_FILE_REPLACES:  # None where the file replaced it; a value only where the job reads it
        assert (flat[name] is not None) == (name in kept), (out.name, name, flat[name])
    r = load_result(out)
    # loads back typed, and equal (transfer's sets are saved beside the TransferConfig it loads as)
    assert r.config_json() == {k: v for k, v in saved.items() if k in r.config_json()}
    assert type(r.config).from_json(saved) == r.config
    assert all(getattr(r.config, n) is None for n in PAIRS_FILE_REPLACES if n not in kept)
    # an older config.json, holding the flags' values, still loads (the fields a file replaced read as None)
    older = {**saved, "few_shot": "auto", "counterfactual": "operator", "prefix_policy": "keep",
             "operand_range": [1, 9], "max_candidates": 2048, "seed": 0}
    assert type(r.config).from_json(older) == r.config


def _file_in_summary(out, path) -> None:
    """The file read and its SHA-256 in the marker's provenance (the made-by line's source) and in summary.json where
    the result writes one; the report's made-by line shows both."""
    read = {"path": str(path.resolve()), "sha256": hashlib.sha256(path.read_bytes()).hexdigest()}
    made_by = json.loads((out / "circuits.json").read_text())["provenance"]["pairs_file"]
    assert {k: made_by[k] for k in read} == read, out.name
    if (out / "summary.json").is_file():
        summary = json.loads((out / "summary.json").read_text())
        assert {k: summary["pairs_file"][k] for k in read} == read, out.name
    assert load_result(out).provenance["pairs_file"] == made_by
    assert cli_main(["report", str(out), "--out", str(out.parent / "report.html")]) == 0
    line = re.search(r"<summary>made by .*?<br>", (out.parent / "report.html").read_text()).group(0)
    assert f"pairs_file=mine.jsonl (sha256 {read['sha256'][:12]}" in line, line


@pytest.mark.parametrize("job", list(RANKING))
def test_a_ranking_job_from_a_pairs_file_records_no_default_the_file_replaced(job, pairs_file, tmp_path):
    flags, kept = RANKING[job]
    out = tmp_path / "out"
    assert cli_main([job.split("/")[0], "--model", str(tiny_dir("llama")), "--pairs-file", str(pairs_file),
                     "--no-filter-correct", "--pairs", "3", "--force", "--no-progress", *flags, "--out", str(out)]) == 0
    _check(out, pairs_file, kept)
    _file_in_summary(out, pairs_file)
    if job == "faithfulness/held-out":
        splits = json.loads((out / "summary.json").read_text())["splits"]
        assert [s["seed"] for s in splits.values()] == [None, None]
        assert splits["scoring"]["references"] == [p["prompt"] for p in PAIRS[2:]]


@pytest.mark.parametrize("job", list(FROM_HEADS))
def test_a_heads_from_job_on_its_own_pairs_file_records_no_default_the_file_replaced(job, pairs_file, heads, tmp_path):
    out = tmp_path / job
    assert cli_main([job, "--heads-from", str(heads), "--pairs-file", str(pairs_file), "--no-progress",
                     *FROM_HEADS[job], "--out", str(out)]) == 0
    _check(out, pairs_file, ("seed",))  # the seed is the identify run's (it seeded its bootstrap; transfer's sets)
    _file_in_summary(out, pairs_file)


def test_a_config_without_a_pairs_file_refuses_none():
    from circuits.beyond.screen.config import ScreenConfig

    with pytest.raises(ValueError, match="few_shot is None"):
        ScreenConfig(few_shot=None)
    assert ScreenConfig(pairs_file="p.jsonl").replace(pairs_file="", few_shot="on", seed=0, counterfactual="operator",
                                                      prefix_policy="keep", operand_range=(1, 9),
                                                      max_candidates=2048).few_shot == "on"


def test_the_made_by_note_names_what_the_file_replaced_and_reads_an_older_config():
    """A config saved since issue 40 holds None for the fields the file replaced: the note names those, and a value
    still set (identify's seed) is shown on the line; an older config holding every flag's value is read as before
    (all named unused, none shown)."""
    from pathlib import Path

    from circuits.viz.page import config_block

    new = {"model": "m", "task": "addition", "n_pairs": 64, "seed": 0, "few_shot": None, "counterfactual": None,
           "pairs_file": "/d/mine.jsonl"}
    block = config_block(Path("run"), new, None, {"n_pairs": 3})
    line = re.search(r"<summary>made by .*?<br>", block).group(0)
    assert "seed=0" in line and "few_shot" not in line and "n_pairs=3" in line, line
    assert "few_shot, counterfactual: not used (the pairs are the file's lines)" in block
    old = {**new, "few_shot": "auto", "counterfactual": "operator"}
    block = config_block(Path("run"), old, None, {"n_pairs": 3})
    assert "seed=" not in re.search(r"<summary>made by .*?<br>", block).group(0)
    assert "seed, few_shot, counterfactual: the flags' values, not used" in block
