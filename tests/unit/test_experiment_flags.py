"""The figure scripts' flags are the library's (``--pairs``, one name per field) and their identify cache is keyed by
the whole identify config: a run with other pairs never overwrites another's identify result."""

import _common as C
import fig2_key_heads as fig2
import pytest
from helpers import tiny_dir

from circuits.identify.config import IdentifyConfig
from circuits.io import write_json
from circuits.identify.result import IdentifyResult


def test_fig2_runs_as_its_docstring_says_and_another_pairs_count_gets_its_own_folder(tmp_path, capsys):
    assert "fig2_key_heads.py [--pairs 64]" in fig2.__doc__
    ident = tmp_path / "identify"
    common = ["--model", str(tiny_dir("llama")), "--no-filter-correct", "--few-shot", "on", "--bootstrap", "0",
              "--identify-dir", str(ident)]
    first = C.run(fig2.Config, fig2.main, fig2.plot, [*common, "--pairs", "8"])
    assert first == ident / "all" / "heads.html" and first.is_file()  # the plain folder: it was free
    add = ident / "addition"
    stamps = {p: p.stat().st_mtime_ns for p in ident.glob("*/summary.json")}
    assert len(stamps) == 5 and IdentifyResult.load(add).config.n_pairs == 8 and len(IdentifyResult.load(add).pairs) == 8

    second = C.run(fig2.Config, fig2.main, fig2.plot, [*common, "--pairs", "4"])
    config = fig2.Config(model=str(tiny_dir("llama")), filter_correct=False, few_shot="on", bootstrap=0,
                         identify_dir=str(ident), n_pairs=4)
    key = C.config_hash(config.identify_config())
    assert second == ident / f"all-{key}" / "all" / "heads.html" and second.is_file()
    assert {p: p.stat().st_mtime_ns for p in ident.glob("*/summary.json")} == stamps  # the first's results untouched
    assert IdentifyResult.load(add).config.n_pairs == 8
    assert IdentifyResult.load(ident / f"all-{key}" / "addition").config.n_pairs == 4

    # Each run finds its own result again (resumes, nothing recomputed), and the figure redraws from it alone.
    capsys.readouterr()
    assert C.run(fig2.Config, fig2.main, fig2.plot, [*common, "--pairs", "8"]) == first
    assert C.run(fig2.Config, fig2.main, fig2.plot, [*common, "--pairs", "4", "--replot"]) == second
    assert "[addition]" not in capsys.readouterr().out


def test_one_task_cache_folder_is_keyed_by_the_whole_identify_config(tmp_path):
    base = C.KeyHeadConfig(identify_dir=str(tmp_path), n_pairs=8)
    assert base.identify_folder("addition") == tmp_path / "addition"  # free: the name circuits identify gives it
    write_json(tmp_path / "addition" / "config.json", IdentifyConfig(n_pairs=16).to_json())  # another config's run
    for other in (base, base.replace(seed=0, key_rule="top5"), base.replace(mode="activation")):
        folder = other.identify_folder("addition")
        assert folder.parent == tmp_path and folder.name == f"addition-{C.config_hash(other.identify_config('addition'))}"
    assert len({c.identify_folder("addition") for c in (base, base.replace(key_rule="top5"), base.replace(mode="activation"))}) == 3
    assert base.replace(seed=2).identify_folder("addition") == tmp_path / "addition-seed2"


def test_scripts_take_pairs_not_n_pairs(capsys):
    with pytest.raises(SystemExit):
        C.run(fig2.Config, fig2.main, fig2.plot, ["--n-pairs", "8"])
    assert "unrecognized arguments: --n-pairs" in capsys.readouterr().err


def test_fig2_works_from_any_folder_and_with_templates_whose_pairs_were_all_dropped(tmp_path, monkeypatch):
    """``python experiments/fig2_key_heads.py --pairs 8`` run from another folder: the default ``results/identify``
    is the repository's (here a stand-in), never the current folder's (which holds another run's files), and the
    tables are made from the results read back, also when a template's candidates were all filtered out (its
    statistics then have no counterfactual rate: a ``KeyError`` in ``identify_families`` before)."""
    import json

    import _tables as T

    repo, cwd = tmp_path / "repo", tmp_path / "elsewhere"
    (cwd / "results" / "identify" / "addition").mkdir(parents=True)
    (cwd / "results" / "identify" / "addition" / "summary.json").write_text("{}")  # another run's file
    monkeypatch.setattr(C, "REPO", repo)
    monkeypatch.chdir(cwd)
    assert C.repo_path("results/x") == repo / "results" / "x" and C.repo_path("mine") == __import__("pathlib").Path("mine")
    argv = ["--model", str(tiny_dir("llama")), "--no-filter-correct", "--few-shot", "on", "--bootstrap", "0",
            "--pairs", "2"]
    figure = C.run(fig2.Config, fig2.main, fig2.plot, argv)
    ident = repo / "results" / "identify"
    assert figure == ident / "all" / "heads.html" and (ident / "all" / T.PUBLISHED).is_file()
    assert (cwd / "results" / "identify" / "addition" / "summary.json").read_text() == "{}"
    assert sorted(p.name for p in (cwd / "results" / "identify").iterdir()) == ["addition"]

    # a template none of whose candidates was kept: in the pair statistics, without a counterfactual rate
    summary = ident / "addition" / "summary.json"
    saved = json.loads(summary.read_text())
    kept = {p.template_id for p in IdentifyResult.load(ident / "addition").pairs}
    from circuits.data.templates import FIGURE8

    dropped = next(t.id for ts in FIGURE8.values() for t in ts if t.id not in kept and t.id.startswith("add"))
    saved["pair_stats"]["per_template"][dropped] = {"accuracy": 0.0, "mean_answer_prob": 0.0, "n": 3}
    summary.write_text(json.dumps(saved))
    assert C.run(fig2.Config, fig2.main, fig2.plot, [*argv, "--replot"]) == figure
    tables = T.read_published(ident / "all" / T.PUBLISHED)
    assert dropped not in tables["identify_families"]["data"]["results"]["addition"]["per_template"]
    assert "family" in T.render(tables["identify_families"])
