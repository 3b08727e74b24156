"""Every table of docs/results.md has one source: each marked block equals the rendering (experiments/_tables.py) of
what its script saved, committed as a fixture (tests/fixtures/published/<script>.json; README.md there says which
were re-measured and which carry the documented numbers over); and publish.py rewrites blocks from results."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import publish
import _tables as T

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "results.md"
FIXTURES = ROOT / "tests" / "fixtures" / "published"


def fixture_tables() -> dict[str, tuple[str, dict]]:
    out: dict[str, tuple[str, dict]] = {}
    for path in sorted(FIXTURES.glob("*.json")):
        for name, table in T.read_published(path).items():
            assert name not in out, f"{name} in both {out[name][0]} and {path.stem}"
            out[name] = (path.stem, table)
    return out


def test_every_block_of_the_document_has_a_fixture_and_every_fixture_a_block():
    marked = T.blocks(DOC.read_text(encoding="utf-8"))
    assert set(marked) == set(fixture_tables())
    scripts = {p.stem for p in (ROOT / "experiments").glob("*.py")}
    assert {script for script, _ in fixture_tables().values()} <= scripts  # each fixture is named after its script


@pytest.mark.parametrize("name", sorted(fixture_tables()))
def test_the_document_s_block_is_the_rendering_of_the_saved_data(name):
    script, table = fixture_tables()[name]
    assert T.blocks(DOC.read_text(encoding="utf-8"))[name] == T.render(table), (
        f"docs/results.md's table {name!r} differs from {script}'s saved data: run the script, then "
        "`python experiments/publish.py` (or update tests/fixtures/published/ from the new results)")


def test_figure_3_knockout_is_the_re_measured_run():
    """The drift the doc had (32 pairs, 0.06 at k = 10): now 64 pairs and the numbers of a real run at defaults."""
    d = fixture_tables()["fig3_knockout"][1]["data"]
    assert d["n_pairs"] == 64 and d["ks"] == [0, 1, 2, 3, 5, 10, 20] and len(d["random_accuracy"]) == 3
    assert [f"{x:.2f}" for x in d["effect_accuracy"]] == ["1.00", "0.52", "0.47", "0.48", "0.17", "0.14", "0.08"]


def test_renderers_compute_what_the_rows_say():
    header, rows = T.fig3_knockout({"ks": [0, 2], "effect_accuracy": [1.0, 0.25], "effect_prob": [0.5, 0.125],
                                    "random_accuracy": [[1.0, 0.5], [1.0, 0.75]], "random_prob": [[0.5, 0.5], [0.5, 0.25]]})
    assert header == ["k heads knocked out", "0", "2"]
    assert rows[1] == ["accuracy, random-rank (mean of 2 seeds)", "1.00", "0.62"]  # (0.5 + 0.75) / 2, rounded half even
    assert rows[2] == ["accuracy, random-rank (worst seed)", "1.00", "0.50"]
    assert rows[4] == ["answer prob., random-rank (mean)", "0.50", "0.38"]
    _, rows = T.fig15_overlap({"operations": ["a", "b"], "key_heads": {"a": [[1, 2], [3, 4]], "b": [[3, 4], [5, 6]]}})
    assert rows == [["a", "2", "1"], ["b", "1", "2"]]
    _, rows = T.identify_families({"forms": {"x/0": "equation", "x/1": "statement", "x/2": "statement", "x/3": "question"},
                                   "results": {"addition": {"per_template": {
                                       "x/0": {"counterfactual_accuracy": 0.0, "counterfactual_answer_prob": 0.1},
                                       "x/1": {"counterfactual_accuracy": 0.5, "counterfactual_answer_prob": 0.2},
                                       "x/2": {"counterfactual_accuracy": 1.0, "counterfactual_answer_prob": 0.4},
                                       "x/3": {"counterfactual_accuracy": 0.25, "counterfactual_answer_prob": 0.3}}}}})
    assert [r[1] for r in rows] == ["0% (0.10)", "75% (0.30)", "25% (0.30)"]  # the mean over a form's templates
    header, rows = T.sft_table({"rows": [
        {"name": "base", "tasks": {"mmlu": {"acc": 0.25}, "gsm8k": {"acc": 0.5}}},
        {"name": "full SFT", "tasks": {"mmlu": {"acc": 0.3}, "gsm8k": {"acc": 0.5}}, "delta": {"mmlu": 0.05, "gsm8k": 0.0},
         "train": {"samples_per_s": 15.2, "tuned_parameters": 6.7e9}}]})
    assert header == ["model", "train speed", "tuned params", "GSM8K", "MMLU"]
    assert rows[1] == ["+ full SFT", "15 sam./s", "6.7B", "50.0 (+0.0)", "30.0 (+5.0)"]


def test_blocks_are_parsed_and_replaced_and_bad_markers_are_one_clear_error():
    text = "# t\n<!-- table: a -->\n| x |\n|---|\n<!-- /table -->\nprose\n<!-- table: b -->\n| y |\n<!-- /table -->\n"
    assert T.blocks(text) == {"a": "| x |\n|---|\n", "b": "| y |\n"}
    new = T.replace_blocks(text, {"a": T.markdown(["z"], [["1"]])})
    assert T.blocks(new) == {"a": "| z |\n|---|\n| 1 |\n", "b": "| y |\n"} and new.startswith("# t\n") and "prose" in new
    with pytest.raises(ValueError, match="accepted: each `<!-- table: NAME -->`"):
        T.blocks("<!-- table: a -->\n| x |\n")
    with pytest.raises(ValueError, match="marked twice"):
        T.blocks("<!-- table: a -->\n<!-- /table -->\n<!-- table: a -->\n<!-- /table -->\n")
    with pytest.raises(ValueError, match="row 0 has 1 cells, the header 2"):
        T.markdown(["a", "b"], [["1"]])
    with pytest.raises(ValueError, match="unknown table renderer 'nope'; accepted: "):
        T.render({"render": "nope", "data": {}})


def test_publish_rewrites_the_blocks_from_saved_results(tmp_path, capsys):
    doc = tmp_path / "results.md"
    doc.write_text("intro\n<!-- table: fig3_knockout -->\n| old |\n<!-- /table -->\n<!-- table: kept -->\n| k |\n"
                   "<!-- /table -->\n", encoding="utf-8")
    results = tmp_path / "results"
    (results / "fig3_knockout").mkdir(parents=True)
    shutil.copy(FIXTURES / "fig3_knockout.json", results / "fig3_knockout" / T.PUBLISHED)
    T.write_published(results / "other", {"unused": {"render": "cells", "data": {"header": ["h"], "rows": [["1"]]}}})
    assert publish.main(["--results", str(results), "--doc", str(doc), "--check"]) == 1
    assert publish.main(["--results", str(results), "--doc", str(doc)]) == 0
    out = capsys.readouterr().out
    assert "fig3_knockout            changed" in out and "kept" in out and "no block in results.md" in out
    blocks = T.blocks(doc.read_text(encoding="utf-8"))
    assert blocks["fig3_knockout"] == T.render(fixture_tables()["fig3_knockout"][1]) and blocks["kept"] == "| k |\n"
    assert publish.main(["--results", str(results), "--doc", str(doc), "--check"]) == 0
    (results / "bad").mkdir()
    (results / "bad" / T.PUBLISHED).write_text("[1]")
    assert publish.main(["--results", str(results), "--doc", str(doc)]) == 2
    assert "accepted: {table name:" in capsys.readouterr().err


def test_write_published_rounds_only_where_the_tables_stay_the_same(tmp_path):
    table = {"t": {"render": "cells", "data": {"header": ["h"], "rows": [["x"]], "n": 0.123456789}}}
    path = T.write_published(tmp_path, table)
    assert json.loads(path.read_text())["t"]["data"]["n"] == 0.12346
    assert (tmp_path / "published.md").read_text() == "<!-- table: t -->\n| h |\n|---|\n| x |\n<!-- /table -->\n\n"


def test_more_renderers_compute_what_the_rows_say():
    header, rows = T.stability({"forms": ["equation", "question"], "per_operation": {"addition": {
        "mean_jaccard_seeds": 0.5, "mean_jaccard_forms": 0.25, "key_heads_per_form": {"question": 7, "equation": 3}}}})
    assert header[2] == "across template forms (equation / question)" and rows == [["addition", "0.50", "0.25", "3 / 7"]]
    header, rows = T.ablation_kinds({"ks": [1, 5], "curves": {
        "addition": {"mean": {"effect_accuracy": [0.5, 0.125], "random_accuracy_mean": [1.0, 0.875]}},
        "division": {"mean": {"effect_accuracy": [0.75, 0.7], "random_accuracy_mean": [0.9, 0.8]}}}})
    assert header == ["operation", "ablation", "k = 1", "k = 5"]
    assert rows == [["addition", "mean (the paper's)", "50 / 100", "12 / 88"], ["division", "mean", "75 / 90", "70 / 80"]]
    header, rows = T.fig4_transfer({"n_random_heads": 10, "results": {
        "decimal": {"accuracy_before": 0.5, "accuracy_after": 0.25, "accuracy_random_heads": 0.5},
        "odd": {"accuracy_before": 0.0, "accuracy_after": 0.0, "accuracy_random_heads": 0.0}}})
    assert header[-1] == "ours, 10 random heads"
    assert rows == [["decimals (`4.2 plus 2.5 equals to `)", "drops", "0.50 -> 0.25 (-50%)", "0.50"],
                    ["odd", "-", "0.00 -> 0.00", "0.00"]]


def test_the_scripts_publish_what_their_results_hold():
    """A script's ``published`` maps its typed result to the renderer's data: Figure 3's saved curve, put back into
    a KnockoutResult, gives the document's table again; Figure 3 under ablation kinds picks the shown ks."""
    import fig3_ablation_kinds
    import fig3_knockout

    from circuits.types import Head
    from circuits.validate import KnockoutResult
    from circuits.validate.ablation_kinds import AblationComparison, AblationKindsConfig
    from circuits.validate.knockout import KnockoutConfig, KnockoutCurve

    d = fixture_tables()["fig3_knockout"][1]["data"]
    curve = KnockoutCurve(d["ks"], [Head(0, 0)] * max(d["ks"]), d["effect_accuracy"], d["effect_prob"],
                          [[Head(0, 0)] * max(d["ks"])] * 3, d["random_accuracy"], d["random_prob"])
    table = fig3_knockout.published(KnockoutResult(KnockoutConfig(), curve, "addition", 64))["fig3_knockout"]
    assert T.render(table) == T.blocks(DOC.read_text(encoding="utf-8"))["fig3_knockout"]

    result = AblationComparison(AblationKindsConfig(), {"addition": {"mean": curve, "zero": curve}}, {"addition": 64})
    data = fig3_ablation_kinds.published(result)["ablation_kinds"]["data"]
    assert data["ks"] == [1, 3, 5, 10, 20] and list(data["curves"]["addition"]) == ["mean", "zero"]
    mean = data["curves"]["addition"]["mean"]
    assert mean["effect_accuracy"] == [d["effect_accuracy"][d["ks"].index(k)] for k in (1, 3, 5, 10, 20)]
    assert mean["random_accuracy_mean"][-1] == pytest.approx(sum(r[-1] for r in d["random_accuracy"]) / 3)


def test_the_renderers_of_issue_32_compute_what_the_rows_say():
    header, rows = T.heuristics_layers({"layers": {
        "19": {"n_top": 4, "top_effect": 0.5, "layer_total": 2.0, "n_classified": 3, "classified_effect": 0.4},
        "24": {"n_top": 4, "top_effect": 1.5, "layer_total": 2.0, "n_classified": 1, "classified_effect": 0.3}}})
    assert header == ["", "MLP19", "MLP24", "all"]
    assert rows == [["top-4 neurons' share of the layer's summed neuron effect", "25%", "75%", ""],
                    ["classified neurons of the top 4", "3", "1", "4 of 8"],
                    ["share of the top 4's effect the classified ones carry", "80%", "20%", "35%"]]  # 0.7 / 2.0 pooled
    _, rows = T.heuristics_layers({"layers": {
        "19": {"n_top": 4, "top_effect": 0.5, "layer_total": 2.0, "n_classified": 3, "classified_effect": 0.4}},
        "nulls": {"top": {"19": {"n": 4, "n_classified": 3}}, "random": {"19": {"n": 4, "n_classified": 1}}},
        "rates": {"top": {"n": 4, "n_classified": 3, "rate": 0.75, "low": 0.301, "high": 0.954},
                  "random": {"n": 4, "n_classified": 1, "rate": 0.25, "low": 0.046, "high": 0.699}}})
    assert rows[3:] == [["classified, all top neurons (95% Wilson interval)", "3 of 4", "3 of 4: 75% [30, 95]"],
                        ["classified, as many random neurons of the same MLPs (the null)", "1 of 4",
                         "1 of 4: 25% [5, 70]"]]
    drop = lambda m, n: {"mean": m, "low": m - 0.01, "high": m + 0.01, "n": n}  # noqa: E731
    header, rows = T.heuristics_knockout({"classes": {"b == 0": {
        "n_neurons": 17, "covered_drop": drop(0.0234, 10), "uncovered_drop": drop(-0.002, 90),
        "random_covered_drop": drop(0.0, 10), "random_uncovered_drop": drop(0.005, 90),
        "covered_vs_random": {**drop(0.02, 10), "level": 0.99375, "holm_apart": True}}}})
    assert header[-1] == "covered, class minus random (Holm over 1)"
    assert rows[0][-1] == "+0.020 [+0.010, +0.030] at 99.38%: apart"
    _, rows = T.heuristics_knockout({"classes": {"b == 0": {
        "n_neurons": 17, "covered_drop": drop(0.0234, 10), "uncovered_drop": drop(-0.002, 90),
        "random_covered_drop": drop(0.0, 10), "random_uncovered_drop": drop(0.005, 90)}}})
    assert rows == [["b == 0", "17", "+0.023 [+0.013, +0.033] (10)", "-0.002 [-0.012, +0.008] (90)",
                     "+0.000 [-0.010, +0.010]", "+0.005 [-0.005, +0.015]"]]
    ci = lambda m: {"mean": m, "low": m - 0.05, "high": m + 0.05}  # noqa: E731
    header, rows = T.heuristics_prompt_knockout({"n_prompts": 89, "prompts": "correct", "ablation": "zero", "limits": {
        "5": {"mean_ablated": 12.34, "before": {"mean": 1.0, "low": 1.0, "high": 1.0}, "associated": ci(0.5),
              "random": ci(0.9), "difference": {**ci(-0.4), "holm_apart": True}}}})
    assert header[2] == "accuracy before (89 correct prompts)" and header[-1] == "associated minus random (Holm over 1)"
    assert rows == [["5", "12.3", "1.000 [1.000, 1.000]", "0.500 [0.450, 0.550]", "0.900 [0.850, 0.950]",
                     "-0.400 [-0.450, -0.350]: apart"]]
    header, rows = T.fourier_periods({"periods": [10.0, 10 / 3], "by_kind": {"head": [0.25, 0.75]},
                                      "by_kind_ci": {"head": [[0.2, 0.3], [0.7, 0.8]]}})
    assert header == ["", "period 10", "period 3.33"] and rows == [["key heads", "25% [20, 30]", "75% [70, 80]"]]
    _, rows = T.fourier_periods({"periods": [4.0, 2.0], "by_kind": {"head": [0.25, 0.75], "mlp": [0.5, 0.5]},
                                 "by_kind_ci": {"head": [[0.2, 0.3], [0.7, 0.8]], "mlp": [[0.4, 0.6], [0.4, 0.6]]},
                                 "n_components": {"head": 3, "mlp": 1},
                                 "by_kind_component_ci": {"head": [[0.1, 0.4], [0.6, 0.9]], "mlp": [[0.5, 0.5], [0.5, 0.5]]},
                                 "chance": [2 / 3, 1 / 3], "trend": [0.8, 0.2],
                                 "mlp_minus_head": [[0.25, 0.1, 0.4, True], [-0.25, -0.4, 0.01, False]]})
    assert rows == [["key heads (over pairs; over the 3 heads)", "25% [20, 30]; [10, 40]", "75% [70, 80]; [60, 90]"],
                    ["key MLPs (over pairs; over the 1 MLPs)", "50% [40, 60]; [50, 50]", "50% [40, 60]; [50, 50]"],
                    ["white noise on the 4 numbers (chance)", "66.7%", "33.3%"],
                    ["a straight trend over 0..3", "80.0%", "20.0%"],
                    ["key MLPs minus key heads (over the components; Holm over the periods)", "+25 [+10, +40] apart",
                     "-25 [-40, +1] not apart"]]
    _, rows = T.fourier_components({"components": {
        "20.8": {"kind": "head", "dominant": [10 / 3, 10.0], "ramp_share": 0.09, "mean_share": 0.91},
        "MLP19": {"kind": "mlp", "dominant": [2.5], "ramp_share": 0.7, "mean_share": 0.666}}})
    assert rows == [["head 20.8", "3.33, 10", "9%", "91%"], ["MLP19", "2.5", "70%", "67%"]]


def test_the_issue_32_scripts_publish_their_tables_on_replot(tiny_llama, tmp_path):
    """fig_heuristics.py and fig_fourier.py, run with ``--replot`` on a saved result, write published.json; its tables
    say what the result's own summary says."""
    import _common as C
    import fig_fourier
    import fig_heuristics

    from circuits.beyond.heuristics.config import HeuristicsConfig
    from circuits.beyond.heuristics.job import run as run_heuristics
    from circuits.explain.numbers.config import NumbersConfig
    from circuits.explain.numbers.job import numbers
    from circuits.identify import identify
    from result_cases import IDENTIFY, SOURCE

    hc = HeuristicsConfig(**{**SOURCE, "n_pairs": 2}, few_shot="on", filter_correct=False, layers=(1,),
                          neurons_per_mlp=4, operands=(0, 4), threshold=0.3, alpha=1.0, n_random=2, n_boot=20,
                          knockout_classes=2)
    heur = run_heuristics(hc, tmp_path / "heuristics", model=tiny_llama, progress=False)
    C.run(fig_heuristics.Config, fig_heuristics.main, fig_heuristics.plot,
          ["--out", str(tmp_path / "heuristics"), "--replot"])
    tables = T.read_published(tmp_path / "heuristics" / T.PUBLISHED)
    s = heur.summary()
    _, rows = T.heuristics_layers(tables["heuristics_layers"]["data"])
    assert rows[1][-1] == f"{s['n_classified']} of {s['n_neurons']}"
    assert rows[2][-1] == f"{100 * s['share_carried']:.0f}%"
    assert set(tables.get("heuristics_knockout", {"data": {"classes": {}}})["data"]["classes"]) == set(s["knockout"])
    r = s["classified_rates"]["random"]  # the null row: the default null_neurons per MLP, classified by the same test
    assert rows[4][-1] == (f"{r['n_classified']} of {r['n']}: {100 * r['rate']:.0f}% [{100 * r['low']:.0f}, "
                           f"{100 * r['high']:.0f}]; Fisher p = {r['p_vs_top']:.2g} vs the top")
    assert (tmp_path / "heuristics" / "published.md").read_text().count("<!-- table: ") == len(tables)
    pk = tables["heuristics_prompt_knockout"]["data"]  # issue 43: the per-prompt knockout's rows, one per limit
    assert list(pk["limits"]) == [str(k) for k in hc.prompt_knockout_limits] and pk["n_grid"] == len(heur.grid_prompts)

    r = identify(tiny_llama, config=IDENTIFY, progress=False)
    nums = numbers(tiny_llama, r, NumbersConfig(**SOURCE, n_heads=2, n_mlps=2, n_problems=4), progress=False)
    nums.save(tmp_path / "numbers")
    C.run(fig_fourier.Config, fig_fourier.main, fig_fourier.plot, ["--out", str(tmp_path / "numbers"), "--replot"])
    tables = T.read_published(tmp_path / "numbers" / T.PUBLISHED)
    s = nums.summary()
    _, rows = T.fourier_components(tables["fourier_components"]["data"])
    assert len(rows) == 4 and [r[3] for r in rows] == [f"{100 * c['mean_share']:.0f}%" for c in s["components"].values()]
    _, rows = T.fourier_periods(tables["fourier_periods"]["data"])
    assert [r[0] for r in rows] == ["key heads (over pairs; over the 2 heads)", "key MLPs (over pairs; over the 2 MLPs)",
                                    "white noise on the 10 numbers (chance)", "a straight trend over 0..9",
                                    "key MLPs minus key heads (over the components; Holm over the periods)"]
    assert rows[0][1].startswith(f"{100 * s['by_kind']['head']['10']:.0f}% [")
    lo, hi = s["by_kind_component_ci"]["mlp"]["10"]
    assert rows[1][1].endswith(f"; [{100 * lo:.0f}, {100 * hi:.0f}]") and rows[2][1:] == ["22.2%"] * 4 + ["11.1%"]
