"""Every job that ranks components checks its pairs as identify does (issue 40): the shared helper
(:func:`circuits.identify.validity.pair_checks`) measures what a plain forward pass per pair measures and what
identify's own sweep baseline gives; each job refuses pairs the random tiny model answers none of in one line without
``--force``, and with it saves the warning in ``summary.json``, prints it and puts it at the top of its report
section; a result saved before the check loads back without one."""

import json

import pytest
from helpers import plain_pair_checks, tiny_dir

from circuits.cli import main as cli_main
from circuits.identify.validity import FORCE_ENV, Validity, ValidityWarning, check_job, pair_checks
from circuits.results import load_result

TINY = ["--model", str(tiny_dir("llama")), "--no-filter-correct", "--no-progress"]

JOBS = {  # job -> its arguments beyond TINY (small: a few heads or neurons)
    "screen": ["--pairs", "4", "--verify", "2", "--no-audit", "--no-neurons"],
    "neurons": ["--pairs", "4", "--layers", "1", "--shares", "0.05"],
    "heuristics": ["--pairs", "4", "--layers", "1", "--neurons-per-mlp", "3", "--operands", "0,3", "--threshold",
                   "0.3", "--alpha", "1", "--n-random", "2", "--n-boot", "20", "--null-neurons", "0", "--knockout-classes", "1"],
    "carry": ["--n-boot", "5", "--n-splits", "5", "--n-random", "2"],
    "faithfulness": ["--pairs", "4", "--rankings", "exact-path", "--sizes", "0.2,0.5", "--n-boot", "0", "--no-held-out"],
    "positions": ["--pairs", "3", "--offsets", "0,1"],
}
FIGURE = {"screen": "screen.html", "neurons": "figure.html", "heuristics": "figure.html",
          "faithfulness": "figure.html", "positions": "flow.html"}  # carry writes no figure page


def _pairs(tok):
    from circuits.data.pairs import make_pair

    return [make_pair(tok, f"{a} + {b} = ", f"{a} @ {b} = ", str(a + b)) for a, b in [(3, 4), (2, 5), (1, 6), (2, 2), (4, 4)]]


def test_pair_checks_are_a_plain_forward_pass_and_identify_s_baseline(tiny_llama):
    pairs = _pairs(tiny_llama.tokenizer)
    got = pair_checks(tiny_llama, pairs, chunk=2)  # chunks of 2: the concatenation is checked too
    want = plain_pair_checks(tiny_llama, pairs)
    assert got["accuracy"] == pytest.approx(want["accuracy"])
    assert got["counterfactual_keeps_answer"] == pytest.approx(want["counterfactual_keeps_answer"])
    assert got["full_effect"] == pytest.approx(want["full_effect"], rel=1e-4, abs=1e-6)
    # a label (--second-logit label; here the answer itself) changes none of them: the checks read the top tokens
    import dataclasses

    labelled = [dataclasses.replace(p, counterfactual_answer_token_id=p.answer_token_id) for p in pairs]
    assert pair_checks(tiny_llama, labelled) == pytest.approx(got)

    # the peer: identify's sweep keeps a baseline, and its validity reads the same three numbers from it
    from circuits.identify.config import IdentifyConfig
    from circuits.identify.job import identify

    with pytest.warns(ValidityWarning):
        r = identify(tiny_llama, pairs, IdentifyConfig(model="tiny", bootstrap=0), progress=False)
    v = r.validity()
    assert (v.accuracy, v.counterfactual_keeps_answer) == (pytest.approx(got["accuracy"]),
                                                          pytest.approx(got["counterfactual_keeps_answer"]))
    assert v.full_effect == pytest.approx(got["full_effect"], rel=1e-4, abs=1e-6)


def test_check_job_adds_the_accuracy_before_filtering_only_for_filtered_pairs(tiny_llama, monkeypatch):
    from circuits.beyond.screen.config import ScreenConfig

    monkeypatch.delenv(FORCE_ENV, raising=False)
    pairs = _pairs(tiny_llama.tokenizer)
    cfg = ScreenConfig(model="tiny", force=True)
    with pytest.warns(ValidityWarning, match="screen on 5 pairs"):
        v = check_job(tiny_llama, pairs, {"accuracy": 0.2}, cfg, "screen")
    assert v.accuracy_before_filtering == pytest.approx(0.2) and v.forced and v.refusals
    with pytest.warns(ValidityWarning):
        v = check_job(tiny_llama, pairs, {"accuracy": 0.2}, cfg.replace(filter_correct=False), "screen")
    assert v.accuracy_before_filtering is None


@pytest.mark.parametrize("job", sorted(JOBS))
def test_a_job_refuses_pairs_the_model_cannot_answer_and_saves_the_warning_with_force(job, tmp_path, capsys,
                                                                                        monkeypatch):
    monkeypatch.delenv(FORCE_ENV, raising=False)
    args = [job, *TINY, *JOBS[job]]
    out = tmp_path / job
    assert cli_main([*args, "--out", str(out)]) == 2
    err = [line for line in capsys.readouterr().err.splitlines()
           if line.strip() and "Loading weights" not in line and not line.startswith("pairs (")]  # progress bars aside
    assert len(err) == 1 and err[0].startswith(f"circuits {job}: error: {job} refused") and "--force" in err[0]
    assert "the model answers 0% of the pairs swept" in err[0] and not out.exists()  # one line, nothing saved

    assert cli_main([*args, "--force", "--out", str(out)]) == 0
    printed = capsys.readouterr().err
    s = json.loads((out / "summary.json").read_text())
    v = Validity.from_json(s["validity"])
    assert v.accuracy == 0.0 and v.refusals and v.forced and json.loads((out / "config.json").read_text())["force"] is True
    assert s["warnings"] == v.lines() and s["warnings"][0].startswith("refused without force")
    assert f"warning: {s['warnings'][0]}" in printed  # on the command line, the same line
    back = load_result(out)
    assert back.validity() == v

    report = tmp_path / "report.html"
    assert cli_main(["report", str(out), "--out", str(report)]) == 0
    html = report.read_text()
    assert "Warning (saved with --force):" in html and "of the pairs swept" in html
    if job in FIGURE:  # and above the job's own figure page
        page = (out / FIGURE[job]).read_text()
        assert page.index("Warning (saved with --force):") < page.index("Plotly.newPlot") and "of the pairs swept" in page

    if job == "positions":  # its checks are recomputed from the saved sweep's baseline, never read from the summary
        return
    # a result saved before its job checked validity loads back without a record, and its page has no banner
    del s["validity"], s["warnings"]
    (out / "summary.json").write_text(json.dumps(s))
    assert load_result(out).validity() is None
    s["validity"] = {"accuracy": "0.5"}  # a number saved as text: one line naming the file and the field
    (out / "summary.json").write_text(json.dumps(s))
    with pytest.raises(ValueError, match="summary.json: field 'validity': accuracy must be a number"):
        load_result(out)


# The public Python entry of each ranking job (the function its job calls) and a call of it on pairs the random tiny
# model never answers (``force``: the config field, as a keyword, as --force on the command line). neurons and
# positions have no entry of their own beyond the engines (sweep_neurons, sweep_positions): their jobs check.
def _identify(model, pairs, **kw):
    from circuits.identify.config import IdentifyConfig
    from circuits.identify.job import identify

    return identify(model, pairs, IdentifyConfig(model="tiny", bootstrap=0), progress=False, **kw)


def _screen(model, pairs, **kw):
    from circuits.beyond.screen.config import ScreenConfig
    from circuits.beyond.screen.job import screen

    return screen(model, pairs, ScreenConfig(model="tiny", verify=0, audit=False, neurons=False), progress=False, **kw)


def _faithfulness(model, pairs, **kw):
    from circuits.beyond.faithfulness.config import FaithfulnessConfig
    from circuits.beyond.faithfulness.job import faithfulness

    return faithfulness(model, pairs, FaithfulnessConfig(model="tiny", rankings=("exact-path",), sizes=(0.5,),
                                                         positions=("end",), n_boot=0, held_out=False),
                        progress=False, **kw)


def _heuristics(model, pairs, **kw):
    from circuits.beyond.heuristics.config import HeuristicsConfig
    from circuits.beyond.heuristics.job import heuristics

    return heuristics(model, HeuristicsConfig(model="tiny", n_pairs=4, filter_correct=False, few_shot="off",
                                              layers=(1,), neurons_per_mlp=3, operands=(0, 3), threshold=0.3,
                                              alpha=1.0, n_random=2, n_boot=20, null_neurons=0, knockout_classes=1),
                      progress=False, **kw)


def _carry(model, pairs, force=False):
    from circuits.beyond.carry.config import CarryConfig
    from circuits.beyond.carry.job import carry_study

    return carry_study(model, CarryConfig(model="tiny", filter_correct=False, n_boot=5, n_splits=5, n_random=2,
                                          force=force))


ENTRIES = {"identify": _identify, "screen": _screen, "faithfulness": _faithfulness, "heuristics": _heuristics,
           "carry": _carry}


@pytest.mark.parametrize("entry", sorted(ENTRIES))
def test_a_python_entry_refuses_as_its_job_does_and_keeps_the_warning_with_force(entry, tiny_llama, monkeypatch):
    """Issue 40: ``faithfulness(...)`` from Python ran no validity check (the job did, around it), and ``identify``,
    ``screen``, ``heuristics`` and ``carry_study`` only warned: each now refuses pairs the model never answers with its
    job's one line unless ``force=True``, and with it returns the result with the refusal among its warnings, as the
    job saves it."""
    from circuits.identify.validity import Untrusted

    monkeypatch.delenv(FORCE_ENV, raising=False)
    pairs = _pairs(tiny_llama.tokenizer)
    with pytest.raises(Untrusted) as refused:
        ENTRIES[entry](tiny_llama, pairs)
    line = str(refused.value)
    assert "\n" not in line and line.startswith(f"{entry} refused, this result cannot be trusted: ")
    assert "the model answers 0% of the pairs swept" in line and "Pass --force (force=True)" in line
    with pytest.warns(ValidityWarning, match="refused without force: the model answers 0%"):
        r = ENTRIES[entry](tiny_llama, pairs, force=True)
    v = r.validity()
    assert v is not None and v.forced and v.accuracy == 0.0 and v.refusals
    assert v.lines()[0].startswith("refused without force: the model answers 0% of the pairs swept")
    assert r.summary()["warnings"] == v.lines()  # as the job saves it in summary.json


def test_built_pairs_give_a_python_entry_their_accuracy_before_filtering(tiny_llama):
    """A :class:`PairSet` (``build_pairs``) passed to ``screen`` or ``faithfulness`` brings its statistics, as the
    job's pairs do: with ``filter_correct`` the check reads the accuracy before filtering from them."""
    from circuits.data.pairs import build_pairs

    built = build_pairs(tiny_llama, "addition", n_pairs=3, filter_correct=False, few_shot="on", progress=False)
    for entry in (_screen, _faithfulness):
        with pytest.warns(ValidityWarning):
            v = entry(tiny_llama, built, force=True, filter_correct=True).validity()
        assert v.accuracy_before_filtering == pytest.approx(built.accuracy)
        with pytest.warns(ValidityWarning):
            v = entry(tiny_llama, built, force=True, filter_correct=False).validity()
        assert v.accuracy_before_filtering is None  # pairs not filtered: their own accuracy is the check
