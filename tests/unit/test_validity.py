"""A result says when it cannot be trusted (issue 40): the validity checks are measured from the sweep as a plain
forward pass measures them, past a soft threshold they warn (command line, summary.json, the report), past a hard one
the job refuses with one line unless --force."""

import json

import pytest
import torch

from circuits.cli import main as cli_main
from circuits.identify import IdentifyConfig, identify
from circuits.identify.validity import THRESHOLDS, Untrusted, Validity, ValidityWarning, refuse_untrusted


# Numbers measured on SmolLM2 (docs/identify.md, "Can this result be trusted?"): the demo's four operations at 64
# pairs, the README's former snippet (three prompts, no solved examples) and a pairs file answered 1 time in 6.
MEASURED = {
    "addition": dict(n_pairs=64, accuracy=1.0, accuracy_before_filtering=0.677, counterfactual_keeps_answer=0.172,
                     full_effect=0.0996, uncertain_share=4 / 8, n_key_heads=8),
    "subtraction": dict(n_pairs=64, accuracy=1.0, accuracy_before_filtering=0.157, counterfactual_keeps_answer=0.453,
                        full_effect=0.0999, uncertain_share=6 / 10, n_key_heads=10),
    "multiplication": dict(n_pairs=64, accuracy=1.0, accuracy_before_filtering=0.698, counterfactual_keeps_answer=0.3125,
                           full_effect=0.0926, uncertain_share=3 / 6, n_key_heads=6),
    "division": dict(n_pairs=64, accuracy=1.0, accuracy_before_filtering=0.363, counterfactual_keeps_answer=0.641,
                     full_effect=0.0749, uncertain_share=2 / 8, n_key_heads=8),
    "readme_before": dict(n_pairs=3, accuracy=0.0, counterfactual_keeps_answer=0.0, full_effect=0.049,
                          uncertain_share=35 / 36, n_key_heads=36),
    "one_in_six": dict(n_pairs=6, accuracy=1 / 6, counterfactual_keeps_answer=0.0, full_effect=0.03,
                       uncertain_share=1.0, n_key_heads=2),
}


def _plain(values: dict) -> tuple[set[str], set[str]]:
    """Which checks warn and which refuse, by hand from the documented thresholds."""
    warn, refuse = set(), set()
    for name, t in THRESHOLDS.items():
        v = values.get(name)
        if v is None:
            continue
        bad = (lambda lim: lim is not None and (v < lim if t.below else v > lim))
        if bad(t.hard):
            refuse.add(name)
        elif bad(t.warn):
            warn.add(name)
    return warn, refuse


@pytest.mark.parametrize("case", list(MEASURED))
def test_thresholds_sort_the_measured_runs(case):
    values = dict(MEASURED[case])
    v = Validity.measure(values.pop("n_pairs"), **values)
    warn, refuse = _plain({**values, "n_pairs": v.n_pairs})
    assert len(v.warnings) == len(warn) and len(v.refusals) == len(refuse)
    expected = {"addition": (0, 0), "multiplication": (0, 0), "all": (0, 0),
                "subtraction": (1, 0),  # 16% answered before filtering: the key heads describe the few it gets right
                "division": (1, 0),  # the counterfactual keeps the answer 64% of the time: warned, not refused
                "readme_before": (2, 1),  # no answer, a 4.9% move, 97% uncertain: refused (a job and from Python)
                "one_in_six": (2, 1)}[case]
    assert (len(v.warnings), len(v.refusals)) == expected, v.lines()
    if case == "division":
        assert "64%" in v.warnings[0] and "another counterfactual" in v.warnings[0]


def test_validity_round_trips_through_json():
    values = dict(MEASURED["readme_before"])
    v = Validity.measure(values.pop("n_pairs"), forced=True, **values)
    back = Validity.from_json(json.loads(json.dumps(v.to_json())))
    assert back == v and back.forced and back.refusals
    assert Validity.measure(4, accuracy=float("nan")).accuracy is None  # unmeasured: None, never a NaN that passes


def test_refusal_is_one_line_that_says_what_to_change(monkeypatch):
    monkeypatch.delenv("CIRCUITS_FORCE", raising=False)
    values = dict(MEASURED["one_in_six"])
    v = Validity.measure(values.pop("n_pairs"), **values)
    with pytest.raises(Untrusted) as err:
        refuse_untrusted(v, force=False)
    line = str(err.value)
    assert "\n" not in line and "17% of the pairs swept" in line and "few-shot" in line and "--force" in line
    refuse_untrusted(v, force=True)  # forced: goes on


def test_validity_is_what_a_plain_forward_pass_measures(tiny_llama):
    from circuits.data.pairs import make_pair

    tok = tiny_llama.tokenizer
    pairs = [make_pair(tok, f"{a} + {b} = ", f"{a} @ {b} = ", str(a + b)) for a, b in [(3, 4), (2, 5), (1, 6), (2, 2)]]
    with pytest.warns(ValidityWarning, match="answers 0% of the pairs"):
        r = identify(tiny_llama, pairs, IdentifyConfig(model="tiny", bootstrap=50), progress=False)
    v = r.validity()
    from helpers import plain_pair_checks

    want = plain_pair_checks(tiny_llama, pairs)
    assert v.accuracy == pytest.approx(want["accuracy"])
    assert v.counterfactual_keeps_answer == pytest.approx(want["counterfactual_keeps_answer"])
    assert v.full_effect == pytest.approx(want["full_effect"], rel=1e-3, abs=1e-5)
    unsure = sum(k.uncertain for k in r.key_heads())
    assert v.n_key_heads == len(r.key_heads()) and v.uncertain_share == pytest.approx(unsure / len(r.key_heads()))


def test_the_job_refuses_without_force_and_saves_the_warning_with_it(tmp_path, capsys, monkeypatch):
    from helpers import tiny_dir

    monkeypatch.delenv("CIRCUITS_FORCE", raising=False)
    model = str(tiny_dir("llama"))
    args = ["identify", "--model", model, "--pairs", "6", "--no-filter-correct", "--bootstrap", "50", "--no-progress"]
    out = tmp_path / "id"
    assert cli_main([*args, "--out", str(out)]) == 2
    err = "\n".join(line for line in capsys.readouterr().err.splitlines()
                    if line.strip() and "Loading weights" not in line)
    assert err.count("\n") == 0 and err.startswith("circuits identify: error:") and "refused" in err and "--force" in err and "of the pairs swept" in err
    assert not out.exists()  # nothing saved

    assert cli_main([*args, "--force", "--out", str(out)]) == 0
    printed = capsys.readouterr()
    assert "warning: refused without force" in printed.err
    s = json.loads((out / "summary.json").read_text())
    assert s["validity"]["refusals"] and s["validity"]["forced"] is True and s["config"]["force"] is True
    assert s["warnings"] and s["warnings"][0].startswith("refused without force")
    # "uncertain" beside each key head the command lists (at most 8)
    unsure = {tuple(h) for h in s["uncertain_key_heads"]}
    listed = [f"{l}.{h} (" for l, h, _ in s["key_heads"][:8]]
    line = printed.out
    for (l, h, _), text in zip(s["key_heads"][:8], listed):
        after = line[line.index(text):].split(")", 1)[0]
        assert ("uncertain" in after) == ((l, h) in unsure)

    from circuits.identify.result import load_identify

    back = load_identify(out)
    assert back.validity() == Validity.from_json(s["validity"])
    report = tmp_path / "report.html"
    assert cli_main(["report", str(out), "--out", str(report)]) == 0
    html = report.read_text()
    assert "Results that may not be trusted" in html and "saved with --force" in html
    assert html.index("Results that may not be trusted") < html.index("<h3>addition")  # above the run's figure
    assert "of the pairs swept" in html
    heads = (out / "heads.html").read_text()  # the run's own figure page says it too, above the figure
    assert heads.index("Warning (saved with --force):") < heads.index("Plotly.newPlot") and "of the pairs swept" in heads


def test_a_trusted_result_has_no_warning(tiny_llama):
    """Checks that pass leave no line anywhere (a report of a good run carries no warning box)."""
    v = Validity.measure(64, accuracy=1.0, counterfactual_keeps_answer=0.2, full_effect=0.1, uncertain_share=0.25,
                         n_key_heads=8)
    assert v.trusted and v.lines() == [] and not v.refusals


# --- labels say what was measured (issue 40, items 5 and 6) ----------------------------------------------------------

def test_a_key_rule_over_a_metric_measured_for_a_few_heads_is_refused(tiny_llama, tmp_path):
    from circuits.data.pairs import make_pair
    from circuits.identify.result import load_identify

    tok = tiny_llama.tokenizer
    pairs = [make_pair(tok, f"{a} + {b} = ", f"{a} @ {b} = ", str(a + b)) for a, b in [(3, 4), (2, 5), (1, 6)]]
    config = IdentifyConfig(model="tiny", key_rule="top2", bootstrap=0)
    r = identify(tiny_llama, pairs, config, progress=False, warn=False)  # prob='key': measured for the 2 key heads
    heads = r.scores("prob").heads
    n, measured = heads.numel(), int((~torch.isnan(heads)).sum())
    assert 0 < measured < n
    for result in (r, load_identify(r.save(tmp_path / "id"))):
        with pytest.raises(ValueError, match=f"prob was measured for {measured} of {n} heads only.*ignore the "
                                             f"{n - measured} unmeasured.*--prob all"):
            result.key_heads("prob<-0.02")
        assert len(result.key_heads("top2")) == 2  # the rule it was made with still reads
    everywhere = identify(tiny_llama, pairs, config.replace(prob="all"), progress=False, warn=False)
    picked = everywhere.key_heads("top3:prob")
    plain = sorted(((float(v), (l, h)) for (l, h), v in
                    ((divmod(i, heads.shape[1]), v) for i, v in enumerate(everywhere.scores("prob").heads.flatten()))))
    assert [tuple(h) for h, _ in picked] == [lh for _, lh in plain[:3]]  # prob's important sign is negative


def test_a_command_that_runs_identify_first_refuses_as_identify_does(tmp_path, capsys, monkeypatch):
    from helpers import tiny_dir

    monkeypatch.delenv("CIRCUITS_FORCE", raising=False)
    args = ["knockout", "--model", str(tiny_dir("llama")), "--pairs", "4", "--no-filter-correct", "--bootstrap", "20",
            "--ks", "0,1", "--seeds", "0", "--no-progress"]
    assert cli_main([*args, "--out", str(tmp_path / "ko")]) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("circuits knockout")]
    assert len(err) == 1 and "the identify run behind these key heads refused" in err[0] and "--force" in err[0]
    assert not (tmp_path / "ko").exists()
    assert cli_main([*args, "--force", "--out", str(tmp_path / "ko")]) == 0
    assert json.loads((tmp_path / "ko" / "config.json").read_text())["force"] is True


def test_the_position_sweep_saves_the_same_checks_as_identify(tiny_llama, tmp_path):
    """Positions sweeps the same unpatched runs: its summary.json carries identify's checks on the same pairs."""
    from circuits.beyond.positions.config import PositionConfig
    from circuits.beyond.positions.result import PositionResult
    from circuits.data.pairs import make_pair
    from circuits.patching.engines.position_sweep import sweep_positions

    tok = tiny_llama.tokenizer
    pairs = [make_pair(tok, f"{a} + {b} = ", f"{a} @ {b} = ", str(a + b)) for a, b in [(3, 4), (2, 5), (1, 6)]]
    made = identify(tiny_llama, pairs, IdentifyConfig(model="tiny", bootstrap=0), progress=False, warn=False)
    r = PositionResult(PositionConfig(), pairs, sweep_positions(tiny_llama, pairs, offsets=[0, 1], progress=False))
    v, w = r.validity(), made.validity()
    assert v.counterfactual_keeps_answer == w.counterfactual_keeps_answer
    assert v.full_effect == pytest.approx(w.full_effect, rel=1e-4)
    assert v.accuracy in (None, w.accuracy)
    r.save(tmp_path / "pos")
    s = json.loads((tmp_path / "pos" / "summary.json").read_text())
    assert Validity.from_json(s["validity"]) == v and s["warnings"] == v.lines() and v.lines()
