"""The faithfulness job (issue 24): its config refuses bad input in one line, its figure draws one line and one band
per ranking on a log size axis with the f = 1 and f = 0 references, its table and report section say which ranking
has the lowest CMD, and, on a tiny model, config -> run -> load gives the same result, resumes from its parts, and
agrees with the engine called directly."""

from __future__ import annotations

import json
import math
import shutil

import pytest
import torch
from helpers import tiny_dir

from circuits.beyond.faithfulness.config import MIB_SIZES, RANKINGS, FaithfulnessConfig
from circuits.beyond.faithfulness.result import FaithfulnessResult
from circuits.cli import main as cli_main
from circuits.patching import circuit_curves as engine
from circuits.patching.circuit_curves import FaithfulnessCurve
from circuits.viz.analysis_figures import faithfulness_figure, faithfulness_table

TINY = ["--model", str(tiny_dir("llama")), "--no-filter-correct", "--few-shot", "on"]


def curve(f: list[float], cpr: float, cmd: float, seconds: float = 0.5, level: str = "node") -> FaithfulnessCurve:
    t = torch.tensor(f)
    S = len(f)
    return FaithfulnessCurve(torch.tensor(MIB_SIZES[:S], dtype=torch.float64), torch.arange(1, S + 1), 300,
                             torch.rand(S, 4), torch.full((4,), 2.5), torch.full((4,), -0.5), t, torch.rand(S, 4),
                             t - 0.1, t + 0.1, cpr, cmd, (cpr - 0.1, cpr + 0.1), (cmd - 0.1, cmd + 0.1), "logit_diff",
                             "counterfactual", "end", level, 0.95, 100, seconds)


@pytest.mark.parametrize("kw, message", [
    ({"rankings": ("exact-path", "foo")}, "Unknown ranking 'foo'; accepted: exact-path"),
    ({"rankings": ("screen", "screen")}, "names a ranking twice"),
    ({"rankings": ()}, "at least one ranking"),
    ({"sizes": (0.0, 0.5)}, "fractions in (0, 1]"),
    ({"sizes": (1.0, 5.0)}, "fractions in (0, 1]"),
    ({"sizes": (0.5, 0.1)}, "must increase"),
    ({"positions": ("middle",)}, "accepted: end, all"),
    ({"edge_positions": ("end", "end")}, "accepted: end, all (one or both, once each)"),
    ({"ablation": "resample"}, "accepted: counterfactual, mean, zero"),
    ({"task": "all"}, "scores one operation"),
    ({"ig_steps": 0}, "--ig-steps 0: must be at least 1"),
    ({"metric": "kl"}, "Unknown metric 'kl'"),
    ({"cpr_ranking": "sum"}, "accepted: signed, absolute"),
    ({"seed": 3, "scoring_seed": 3}, "--scoring-seed 3 is --seed"),
    ({"scoring_seed": -2}, "--scoring-seed -2: must be at least -1"),
])
def test_config_refuses_bad_input_in_one_line(kw, message):
    with pytest.raises(ValueError) as err:
        FaithfulnessConfig(**kw)
    assert message in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize("argv, message", [
    (["--rankings", "exact-path,gradients"], "Unknown ranking 'gradients'"),
    (["--sizes", "0.1,20"], "fractions in (0, 1]"),
    (["--positions", "end,start"], "accepted: end, all"),
    (["--edge-positions", "start"], "Unknown --edge-positions start"),
    (["--task", "all"], "scores one operation"),
])
def test_cli_bad_input_is_one_clear_line(tmp_path, capsys, argv, message):
    out = tmp_path / "out"
    assert cli_main(["faithfulness", *TINY, *argv, "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("circuits faithfulness: error:") and message in err[0]
    assert not out.exists()


@pytest.mark.parametrize("argv, want", [
    ([], ("end", "all")),  # the default (issue 43): MIB's every position beside the paper's END
    (["--edge-positions", "end"], ("end",)),
    (["--edge-positions", "all"], ("all",)),
    (["--edge-positions", "all,end"], ("all", "end")),
])
def test_edge_positions_flag_in_the_cli_and_the_study(argv, want):
    """``--edge-positions`` as ``circuits faithfulness`` and experiments/faithfulness.py read it: absent, the default;
    given, what it names, in its order."""
    import argparse
    import importlib

    from circuits.cli import build_parser
    from circuits.config import add_arguments, from_arguments

    args = build_parser().parse_args(["faithfulness", *TINY, *argv, "--out", "unused"])
    assert from_arguments(FaithfulnessConfig, args).edge_positions == want
    exp = importlib.import_module("faithfulness")
    parser = argparse.ArgumentParser()
    add_arguments(parser, exp.Config)
    study = from_arguments(exp.Config, parser.parse_args(argv))
    assert study.run_config("smollm2", "addition").edge_positions == want


def test_defaults_are_mib_s():
    c = FaithfulnessConfig()
    assert c.sizes == engine.MIB_SIZES == (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5)
    assert c.ablation == "counterfactual" and c.metric == "logit_diff"
    # MIB's counterfactual (another problem of the operation, its own label the second logit: issue 43), its sizes
    # (int(s * n)), its pinned EAP-IG's alphas and its scores summed over positions
    assert c.counterfactual == "random" and c.second_logit == "label" and c.count == "floor" and c.ig_grid == "left"
    assert c.position_scores == "sum"
    # every MIB choice is the default: nothing departs but what no config value selects yet (named in docs/mib.md);
    # edges at every position (MIB's evaluate_graph) beside the paper's END view by default (issue 43); END only is
    # the one edge setting that departs
    assert c.mib()["departs"] == {} and set(c.mib()["fixed"]) == {"prompts"}
    assert c.edge_positions == ("end", "all") and c.edge_settings() == ["edges@end", "edges@all"]
    departs = {"edge_positions": {"here": ["end"], "mib": ["all"]}}
    assert c.replace(edge_positions=("end",)).edge_settings() == ["edges@end"]
    assert c.replace(edge_positions=("end",)).mib()["departs"] == departs
    assert c.replace(edge_positions=("all",)).mib()["departs"] == {}
    assert c.replace(edges=False, edge_positions=("end",)).mib()["departs"] == {}  # no edge curve measured
    old = {k: v for k, v in c.to_json().items() if k != "edge_positions"}  # saved before the field: END only
    assert FaithfulnessConfig.from_json(old).edge_positions == ("end",)
    assert c.input_node  # MIB's node graph: the input ranked and counted where a ranking scores it
    assert c.replace(second_logit="top", edge_positions=("end",)).mib()["departs"] == {
        "second_logit": {"here": "top", "mib": "label"}, **departs}
    # MIB's CPR (the signed ranking's curve), scored on pairs held out from the ranking (issue 43)
    assert c.cpr_ranking == "signed" and c.held_out and c.score_seed == c.seed + 1 == 1
    assert FaithfulnessConfig(seed=4, held_out=False, scoring_seed=4).score_seed == 4
    from circuits.beyond.faithfulness import config as light
    from circuits.patching.engines.eap_ig import GRIDS
    assert light.IG_GRIDS == GRIDS and light.COUNTS == engine.COUNTS
    assert c.rankings == RANKINGS and c.settings() == ["nodes@end", "nodes@all"]
    assert FaithfulnessConfig.from_json(json.loads(json.dumps(c.to_json()))) == c


def test_figure_draws_each_ranking_on_the_linear_axis_cpr_integrates_and_a_log_view():
    """Left: linear to 100%, the curve closed at (100%, f = 1) as the areas are, the area under each curve shaded;
    right: the same curves on a log axis. Bands where an interval is given."""
    sizes = torch.tensor(MIB_SIZES, dtype=torch.float64)
    f = {"exact-path": torch.linspace(0.1, 0.9, 9), "eap-ig": torch.linspace(0.0, 0.8, 9)}
    low = {"exact-path": f["exact-path"] - 0.05}
    high = {"exact-path": f["exact-path"] + 0.05}
    fig = faithfulness_figure(sizes, f, low, high, "addition")
    lines = [t for t in fig.data if t.mode == "lines+markers"]
    assert [t.name for t in lines] == ["exact-path", "exact-path", "eap-ig", "eap-ig"]  # one per view
    assert [t.showlegend for t in lines] == [True, False, True, False]
    percent = [100 * s for s in MIB_SIZES]
    assert list(lines[0].y) == pytest.approx(f["exact-path"].tolist()) and list(lines[2].x) == pytest.approx(percent)
    bands = [t for t in fig.data if t.fill == "tonexty"]
    assert len(bands) == 2 and {b.legendgroup for b in bands} == {"exact-path"}  # eap-ig has no interval: no band
    assert list(bands[0].y) == pytest.approx(low["exact-path"].tolist())
    areas = [t for t in fig.data if t.fill == "tozeroy"]
    assert [t.legendgroup for t in areas] == ["exact-path", "eap-ig"]
    assert areas[0].x[-1] == 100 and areas[0].y[-1] == 1  # closed at 100%, where f = 1, as CPR integrates it
    assert fig.layout.xaxis.type in (None, "linear", "-") and list(fig.layout.xaxis.range) == [0, 100]
    assert fig.layout.xaxis2.type == "log" and list(fig.layout.xaxis2.tickvals) == pytest.approx(percent)
    assert list(fig.layout.xaxis2.ticktext) == ["0.1%", "0.2%", "0.5%", "1%", "2%", "5%", "10%", "20%", "50%"]
    assert list(fig.layout.yaxis.range) == pytest.approx([-0.2, 1.2])
    refs = sorted(s.y0 for s in fig.layout.shapes)
    assert refs == [0, 0, 1, 1]
    assert sorted(a.text for a in fig.layout.annotations if a.text.startswith("f =")) == [
        "f = 0: all ablated", "f = 1: the full model"]  # named once


def hand_result() -> FaithfulnessResult:
    cfg = FaithfulnessConfig(model="tiny", rankings=("exact-path", "eap-ig"), positions=("end",),
                             edge_positions=("end",))
    scores = {"exact-path": {"heads": torch.rand(3, 4), "mlps": torch.rand(3)},
              "eap-ig": {"heads": torch.rand(3, 4), "mlps": torch.rand(3), "edges": torch.rand(16, 40)}}  # 1 + 3 x 5 senders, 3 x 13 + 1 receivers
    curves = {"exact-path": {"nodes@end": curve([0.2, 0.5, 0.9], 0.6, 0.3)},
              "eap-ig": {"nodes@end": curve([0.1, 0.4, 0.8], 0.5, 0.4),
                         "edges@end": curve([0.3, 0.6, 0.95], 0.7, 0.2, level="edge")}}
    return FaithfulnessResult(cfg, [], scores, curves, {"exact-path": 1.5, "eap-ig": 0.25})


def test_table_best_and_section_say_which_ranking_wins(tmp_path):
    from circuits.viz.analysis_sections import _faithfulness_text

    r = hand_result()
    assert r.best("nodes@end") == ("exact-path", 0.3) and r.best("edges@end") == ("eap-ig", 0.2) and r.best("x") is None
    rows = r.table()
    assert [(x["ranking"], x["setting"]) for x in rows] == [("exact-path", "nodes@end"), ("eap-ig", "nodes@end"),
                                                            ("eap-ig", "edges@end")]
    assert rows[1]["ranking_seconds"] == 0.25 and rows[2]["curve_seconds"] == 0.5
    html = _faithfulness_text(r)
    assert "<b>exact-path</b> (0.300)" in html and "0.600 [0.500, 0.700]" in html
    tab = faithfulness_table(rows, "t")
    assert list(tab.data[0].cells.values[0]) == ["exact-path", "eap-ig", "eap-ig"]
    back = FaithfulnessResult.load(r.save(tmp_path / "f"))
    assert back == r and back.curves["eap-ig"]["edges@end"].cmd_interval == pytest.approx((0.1, 0.3))
    s = json.loads((tmp_path / "f" / "summary.json").read_text())
    assert s["best_cmd"]["nodes@end"] == ["exact-path", 0.3] and (tmp_path / "f" / "figure.html").is_file()
    assert "FaithfulnessResult[faithfulness]" in repr(r) and "text/plain" in r._repr_mimebundle_()
    # an edge circuit keeps edges from its senders, the input always among them (sender 0 of the 16 scored here); a
    # node circuit keeps nodes, the input only where the ranking scored it
    def title(setting: str) -> str:  # the title as read, its wrapping undone
        return r.figure(setting).layout.title.text.replace("<br>", " ")

    assert "; nodes: heads and MLPs (MIB also ranks the input node)" in title("nodes@end")
    assert "; senders: the input, heads and MLPs (MIB's edge graph)" in title("edges@end")


def test_a_result_saved_before_edge_positions_reads_back_as_end_only(tmp_path):
    """A result written before ``edge_positions`` existed (its config.json without the field) scored edges at END
    only: it loads with END (not the job's default, END and every position), equal to what was saved, its table,
    summary and figures as before, and its summary names the departure from MIB."""
    r = hand_result()
    folder = r.save(tmp_path / "f")
    saved = json.loads((folder / "config.json").read_text())
    assert saved["edge_positions"] == ["end"]  # a result records its edge positions
    (folder / "config.json").write_text(json.dumps({k: v for k, v in saved.items() if k != "edge_positions"}))
    back = FaithfulnessResult.load(folder)
    assert back.config.edge_positions == ("end",) != FaithfulnessConfig().edge_positions == ("end", "all")
    assert back == r and back.settings == ["nodes@end", "edges@end"]
    assert json.dumps(back.summary()) == json.dumps(r.summary())  # NaN seconds compare as text
    assert back.summary()["mib"]["departs"] == {"edge_positions": {"here": ["end"], "mib": ["all"]}}
    assert back.figure("edges@end").to_json() == r.figure("edges@end").to_json()


def test_cpr_from_the_signed_ranking_is_mib_s_and_not_one_minus_cmd(tmp_path):
    """Issue 43: a hand-made ranking of 100 nodes (heads [10, 10]) whose metric adds up per kept node (an ablated node
    adds 0): node 0 adds +6, node 1 -4 (a negative-scored node among the top by |score|), node 2 +3, node 3 +2,
    node 4 +1, the other 95 +0.02 each; m(N) = 9.9, m(empty) = 0. MIB's sizes, int(s * 100) nodes: 0, 0, 0, 1, 2, 5,
    10, 20, 50 (and 100). The absolute ranking keeps node 1 second (f = 6, 2, 8, 8.1, 8.3, 8.9 / 9.9 from 1 node
    on), the signed one last (f = 6, 9, 12.02, 12.12, 12.32, 12.92 / 9.9: above 1).

    MIB's evaluate_area_under_curve (MIB_circuit_track/evaluation.py at hannamw/MIB-circuit-track; read, not run
    here) on the same f values, over its percentages 0.001 ... 0.5, 1 with trapezoids of linear width, gives
    area_under = 1.184020202020202 for the signed f values (its CPR, run without --absolute) and
    area_from_1 = 0.11945454545454544 for the absolute ones (its CMD, run with --absolute); the absolute curve's own
    area_under is 0.8795454545454546 = 0.999 - CMD, what the study's CPR column printed before."""
    from circuits.patching.circuit_curves import circuit_masks, curve_from

    contribution = torch.tensor([6.0, -4.0, 3.0, 2.0, 1.0] + [0.02] * 95, dtype=torch.float64)

    def curve_of(scores: torch.Tensor) -> FaithfulnessCurve:
        masks = circuit_masks(scores.reshape(10, 10), None, sizes=MIB_SIZES, count="floor")
        m = (masks.heads.reshape(len(MIB_SIZES), 100).double() * contribution).sum(-1)[:, None].repeat(1, 2)
        return curve_from(MIB_SIZES, masks.n_kept, 100, m, torch.full((2,), 9.9, dtype=torch.float64),
                          torch.zeros(2, dtype=torch.float64), metric="logit_diff", ablation="counterfactual",
                          positions="end", level="node", n_boot=0, ci_level=0.95, seed=0, seconds=0.0)

    absolute, signed = curve_of(contribution.abs()), curve_of(contribution)
    assert absolute.n_kept.tolist() == [0, 0, 0, 1, 2, 5, 10, 20, 50]
    assert signed.f.tolist() == pytest.approx([0, 0, 0, 6 / 9.9, 9 / 9.9, 12.02 / 9.9, 12.12 / 9.9, 12.32 / 9.9,
                                               12.92 / 9.9], abs=1e-6)
    assert signed.cpr == pytest.approx(1.184020202020202, abs=1e-12)  # MIB's CPR
    assert absolute.cmd == pytest.approx(0.11945454545454544, abs=1e-12)  # MIB's CMD
    # with f in [0, 1] the two areas of one curve add up to the axis' width, 0.999 (MIB's axis starts at 0.1%)
    assert absolute.cpr == pytest.approx(0.8795454545454546, abs=1e-12) == pytest.approx(0.999 - absolute.cmd)
    assert abs(signed.cpr - (1 - absolute.cmd)) > 0.3  # the CPR column now carries information of its own

    cfg = FaithfulnessConfig(model="tiny", rankings=("exact-path",), positions=("end",))
    assert cfg.cpr_ranking == "signed"  # MIB's, the job's default
    r = FaithfulnessResult(cfg, [], {"exact-path": {"heads": contribution.abs().reshape(10, 10)}},
                           {"exact-path": {"nodes@end": absolute}}, signed_curves={"exact-path": {"nodes@end": signed}})
    row = r.table()[0]
    assert (row["cpr"], row["cmd"], row["cpr_ranking"]) == (signed.cpr, absolute.cmd, "signed")
    assert row["cpr"] + row["cmd"] == pytest.approx(1.303474747474747, abs=1e-12)  # not 1
    old = FaithfulnessResult(cfg.replace(cpr_ranking="absolute"), [], r.scores, r.curves, signed_curves=r.signed_curves)
    assert old.table()[0]["cpr"] == absolute.cpr and old.table()[0]["cpr_signed"] == signed.cpr
    back = FaithfulnessResult.load(r.save(tmp_path / "f"))
    assert back == r and back.signed_curves["exact-path"]["nodes@end"].cpr == signed.cpr
    s = json.loads((tmp_path / "f" / "summary.json").read_text())
    assert s["cpr_ranking"] == "signed" and s["signed_curves"]["exact-path"]["nodes@end"]["cpr"] == signed.cpr
    # both curves drawn, the signed one dotted in its ranking's colour
    fig = r.figure("nodes@end")
    names = {t.name: t for t in fig.data if t.mode == "lines+markers"}
    assert {"exact-path, absolute", "exact-path, signed"} <= set(names)
    assert names["exact-path, signed"].line.dash == "dot" and names["exact-path, absolute"].line.dash is None
    assert names["exact-path, signed"].line.color == names["exact-path, absolute"].line.color


NODE_RANKINGS = "exact-path,exact-activation,positions,screen,graddrop,eap-ig"


def test_job_end_to_end_loads_equal_agrees_with_the_engines_and_resumes(tmp_path, capsys, monkeypatch):
    from circuits.beyond.faithfulness import job
    from circuits.models.loading import load_model
    from circuits.patching.engines.attribution import attribute
    from circuits.patching.engines.eap_ig import eap_ig
    from circuits.types import Component, Receiver
    from circuits.patching.engines.end_sweep import sweep
    from circuits.patching.engines.position_sweep import sweep_positions
    from circuits.results import load_result

    out = tmp_path / "f"
    argv = ["faithfulness", *TINY, "--pairs", "3", "--rankings", NODE_RANKINGS, "--sizes", "0.05,0.2,0.5",
            "--n-boot", "20", "--edge-positions", "end,all", "--no-progress", "--out", str(out)]
    assert cli_main(argv) == 0
    printed = capsys.readouterr().out
    assert "lowest CMD, nodes@end:" in printed and "graddrop" in printed
    r = load_result(out)
    assert isinstance(r, FaithfulnessResult) and list(r.curves) == NODE_RANKINGS.split(",")
    assert r.settings == ["nodes@end", "nodes@all", "edges@end", "edges@all"] and all(v > 0 for v in r.seconds.values())
    assert set(r.cpu_seconds["exact-path"]) == {"ranking", "nodes@end", "nodes@all"} and r.table()[0]["curve_cpu_seconds"] >= 0
    assert sorted(p.name for p in (out / "parts").iterdir()) == sorted(f"{k}.pt" for k in r.curves)
    assert (out / "figure.html").is_file() and json.loads((out / "summary.json").read_text())["n_pairs"] == 3

    # found on one set, scored on another (issue 43): read back from the saved result, the scoring pairs share no
    # prompt with the ranking pairs; the summary records both splits with their seeds
    summary = json.loads((out / "summary.json").read_text())
    assert r.held_out and r.config.held_out and len(r.scoring_pairs) == 3 == summary["n_scoring_pairs"]
    prompts = {p.reference for p in r.pairs} | {p.counterfactual for p in r.pairs}
    assert not prompts & ({p.reference for p in r.scoring_pairs} | {p.counterfactual for p in r.scoring_pairs})
    assert summary["splits"]["ranking"]["seed"] == 0 and summary["splits"]["scoring"]["seed"] == 1
    assert summary["splits"]["scoring"]["references"] == [p.reference for p in r.scoring_pairs]
    assert summary["cpr_ranking"] == "signed" and summary["table"][0]["cpr_ranking"] == "signed"

    model = load_model(r.config.model, dtype="float32", device="cpu")
    pairs, scoring = r.pairs, r.scoring_pairs
    # each ranking is the library engine's own effects, |.|, over positions summed (MIB's, --position-scores sum):
    # the signed score of a head is a plain sum of its effects at each position, position by position
    h, m = sweep(model, pairs, "path", progress=False).scores("logit_diff").parts.values()
    assert torch.equal(r.scores["exact-path"]["heads"], h.abs()) and torch.equal(r.scores["exact-path"]["mlps"], m.abs())
    h, m = sweep_positions(model, pairs, progress=False).scores("logit_diff").parts.values()
    plain = torch.zeros(h.shape[:-1])
    for k in range(h.shape[-1]):
        plain -= h[..., k].nan_to_num(0)  # importance = -effect for logit_diff (a drop is importance)
    assert torch.allclose(r.scores["positions"]["heads_signed"], plain, rtol=1e-6, atol=1e-8)
    assert torch.allclose(r.scores["positions"]["heads"], plain.abs(), rtol=1e-6, atol=1e-8)
    assert not torch.allclose(plain.abs(), h.abs().nan_to_num(0).amax(-1))  # the sum is not the largest |effect|
    att = attribute(model, pairs, "logit_diff", neurons=False, qk_fix=False, grad_drop=True, progress=False)
    assert torch.allclose(r.scores["graddrop"]["mlps"], att.graddrop["mlp"].nan_to_num(0).sum(-1).abs())
    ig = eap_ig(model, pairs, "logit_diff", steps=5, level="edge", progress=False)
    assert torch.equal(r.scores["eap-ig"]["heads"], ig.heads.abs()) and r.config.ig_steps == 5
    # EAP-IG's edges, re-ordered as the edge engine reads them (each head's q, k, v together), at edge level
    edges, effects = r.scores["eap-ig"]["edges"], ig["edges"]
    senders, receivers = engine.edge_senders(model), engine.edge_receivers(model)
    for rcv in (Receiver(Component("head", 2, 1), "k"), Receiver(Component.mlp(1)), "logits"):
        col = edges[:, receivers.index(rcv)]
        want = effects[:, ig.receivers.index(rcv)].abs().nan_to_num(0)
        assert torch.equal(col, torch.stack([want[ig.senders.index(x)] for x in senders]))
    assert list(r.curves["eap-ig"]) == ["nodes@end", "nodes@all", "edges@end", "edges@all"]
    c = engine.circuit_curve(model, scoring, edges=edges, sizes=(0.05, 0.2, 0.5), n_boot=20, count="floor")
    assert torch.equal(r.curves["eap-ig"]["edges@end"].f, c.f) and c.level == "edge"
    c = engine.circuit_curve(model, scoring, edges=edges, sizes=(0.05, 0.2, 0.5), n_boot=20, count="floor",
                             positions="all")  # MIB's: every position
    assert torch.equal(r.curves["eap-ig"]["edges@all"].f, c.f) and c.positions == "all"
    assert summary["mib"]["departs"] == {} and "edge_positions" not in summary["mib"]["fixed"]  # end,all: MIB's
    # the signed ranking: sign * effect (larger is more important), |signed| the absolute ranking's score
    h, m = sweep(model, pairs, "path", progress=False).scores("logit_diff").parts.values()
    assert torch.equal(r.scores["exact-path"]["heads_signed"], -h) and torch.equal(r.scores["exact-path"]["mlps_signed"], -m)
    for k in ("heads", "mlps", "edges"):
        assert torch.equal(r.scores["eap-ig"][f"{k}_signed"].abs(), r.scores["eap-ig"][k])
    # each curve is the faithfulness engine's on those scores, measured on the scoring pairs; CPR from the signed
    # ranking's curve, CMD from the absolute one's
    for setting in ("nodes@end", "nodes@all"):
        c = engine.circuit_curve(model, scoring, r.scores["exact-path"]["heads"], r.scores["exact-path"]["mlps"],
                                input=r.scores["exact-path"]["input"],  # MIB's input node, path-patched (issue 43)
                                sizes=(0.05, 0.2, 0.5), positions=setting[6:], n_boot=20, count="floor")
        got = r.curves["exact-path"][setting]
        assert torch.equal(got.f, c.f) and got.cmd == c.cmd and got.positions == setting[6:]
        assert got.f_low.le(got.f_high).all()
        c = engine.circuit_curve(model, scoring, r.scores["exact-path"]["heads_signed"],
                                r.scores["exact-path"]["mlps_signed"], input=r.scores["exact-path"]["input_signed"],
                                sizes=(0.05, 0.2, 0.5), positions=setting[6:], n_boot=20, count="floor")
        assert torch.equal(r.signed_curves["exact-path"][setting].f, c.f)
        row = next(x for x in r.table() if x["ranking"] == "exact-path" and x["setting"] == setting)
        assert row["cpr"] == c.cpr == row["cpr_signed"] and row["cmd"] == got.cmd and row["cpr_absolute"] == got.cpr
        # in-sample: the absolute ranking's circuits on the pairs that found them, and the gap to the held-out CMD
        c = engine.circuit_curve(model, pairs, r.scores["exact-path"]["heads"], r.scores["exact-path"]["mlps"],
                                input=r.scores["exact-path"]["input"], sizes=(0.05, 0.2, 0.5), positions=setting[6:],
                                n_boot=20, count="floor")
        assert torch.equal(r.in_sample_curves["exact-path"][setting].f, c.f)
        assert row["cmd_in_sample"] == c.cmd and row["cmd_gap"] == c.cmd - got.cmd
    assert "CMD gap" in printed and "held-out pairs" in printed

    # a rerun of the same command reuses every part (nothing is ranked again) and gives the same result
    def again(*a, **k):
        raise RuntimeError("a finished ranking was computed again")

    monkeypatch.setattr(job, "rank", again)
    assert cli_main([*argv[:-2], "--out", str(out)]) == 0
    again = load_result(out)
    assert again.curves == r.curves and again.seconds == r.seconds
    # a stopped run (only parts/ written) resumes; a part made with another config is not reused
    for p in out.iterdir():
        if p.name != "parts":
            shutil.rmtree(p) if p.is_dir() else p.unlink()
    assert FaithfulnessResult.unfinished(out) and cli_main([*argv[:-2], "--out", str(out)]) == 0
    assert load_result(out).curves == r.curves
    with pytest.raises(RuntimeError, match="a finished ranking was computed again"):
        job.run(r.config.replace(ablation="zero"), out, model=model, progress=False)


def test_published_tables_name_the_winner_its_margin_and_the_costs():
    import _tables as T

    rows = [{"model": "smollm2", "operation": "addition", "setting": "nodes@end", "ranking": k, "cpr": cpr, "cmd": cmd,
             "ranking_seconds": 2.0 * i, "curve_seconds": 1.0, "ranking_cpu_seconds": 1.5 * i,
             "curve_cpu_seconds": 0.5} for i, (k, cpr, cmd) in enumerate([("exact-path", 0.8, 0.25),
                                                                           ("eap-ig", 0.7, 0.125)], 1)]
    rows.append({**rows[1], "setting": "nodes@all", "cmd": 0.5, "cpr": 0.5})
    d = {"rankings": ["exact-path", "eap-ig"], "rows": rows}
    header, table = T.faithfulness(d)
    assert header == ["model", "operation", "circuit", "exact-path CMD / CPR", "eap-ig CMD / CPR", "lowest CMD"]
    assert table[0] == ["SmolLM2-135M", "addition", "nodes at END", "0.250 / 0.800", "0.125 / 0.700",
                        "eap-ig (next: exact-path, +0.125)"]
    assert table[1][3:] == ["-", "0.500 / 0.500", "eap-ig"]
    # a margin with a Holm-corrected interval (issue 43) and one saved before it (95% per comparison)
    d["margins"] = {"smollm2/addition": {"nodes@end": ["eap-ig", "exact-path", 0.125, 0.0123, 0.2, 0.004, 0.975,
                                                       True]}}
    rows[0]["cmd_ci"] = [0.7485, 0.75047]
    assert T.faithfulness(d)[1][0][3:] == ["0.250 [0.749, 0.750] / 0.800", "0.125 / 0.700",
                                           "eap-ig (next: exact-path, +0.125 [0.012, 0.200] at 97.50%, Holm over 1: "
                                           "apart)"]
    d["margins"]["smollm2/addition"]["nodes@end"] = ["eap-ig", "exact-path", 0.125, -0.01, 0.2]
    assert T.faithfulness(d)[1][0][-1] == ("eap-ig (next: exact-path, +0.125 [-0.010, 0.200], 95% uncorrected; the "
                                           "interval crosses 0)")
    del rows[0]["cmd_ci"], d["margins"]
    header, table = T.faithfulness_seconds(d)
    assert table == [["SmolLM2-135M", "addition", "2 + 0 (2 + 1)", "3 + 1 (4 + 2)"]]
    assert T.render({"render": "faithfulness", "data": d}).count("\n") == 4


def test_experiment_script_runs_replots_and_publishes(tmp_path, capsys):
    import importlib

    import _tables as T

    exp = importlib.import_module("faithfulness")
    argv = ["--model", str(tiny_dir("llama")), "--no-filter-correct", "--few-shot", "on", "--pairs", "2",
            "--operations", "addition,subtraction", "--rankings", "exact-path,eap-ig", "--sizes", "0.1,0.5",
            "--n-boot", "10", "--out", str(tmp_path / "run")]
    path = exp.cli(argv)
    tables = T.read_published(path)
    assert set(tables) == {"faithfulness", "faithfulness_seconds", "faithfulness_counterfactuals"}
    header, shares = T.faithfulness_counterfactuals(tables["faithfulness_counterfactuals"]["data"])
    assert header[2:] == [f"{k} counterfactual: pairs whose metric can move" for k in ("operator", "operand", "random")]
    assert [r[1] for r in shares] == ["addition", "subtraction"] and all(" of 2" in c for r in shares for c in r[2:])
    margins = tables["faithfulness"]["data"]["margins"]
    family = [v for by in margins.values() for v in by.values()]  # winner, runner-up, +d [lo, hi], p, level, apart
    assert family and all(len(v) == 8 and v[3] <= v[4] and 0 < v[5] <= 1 for v in family)
    # Holm over the table's 4 comparisons (2 operations x 2 node settings): levels 1 - 0.05 / (4 - i)
    assert sorted(v[6] for v in family) == pytest.approx(sorted(1 - 0.05 / k for k in range(1, len(family) + 1)),
                                                        abs=1e-4)  # published.json keeps 5 digits
    assert all(not v[7] or v[3] > 0 for v in family)  # apart only where the corrected interval excludes 0
    header, rows = T.faithfulness(tables["faithfulness"]["data"])
    # the study's default edge positions (issue 43): EAP-IG's edges at END and at every position (MIB's)
    assert [r[1:3] for r in rows] == [[op, s] for op in ("addition", "subtraction")
                                      for s in ("nodes at END", "nodes, every position", "edges at END",
                                                "edges, every position")]
    assert rows[2][3] == rows[3][3] == "-" and rows[2][-1] == rows[3][-1] == "eap-ig"  # edges: EAP-IG's alone
    assert (tmp_path / "run" / exp.slug(str(tiny_dir("llama"))) / "addition" / "figure-nodes-all.html").is_file()
    again = exp.cli([*argv, "--replot"])
    assert T.read_published(again) == tables
    with pytest.raises(SystemExit):
        exp.cli([*argv[:-2], "--out", str(tmp_path / "none"), "--replot"])
    assert "no saved faithfulness results" in capsys.readouterr().err


def test_experiment_script_refuses_an_out_folder_of_other_things_before_any_work(tmp_path, capsys):
    """The study writes counterfactuals.json, published.json/.md and <model>/<operation>/ into --out: a folder of
    anything else (a repository, a user's notes) is refused in one line before a model loads, and nothing is written
    there; a folder a killed study left (its files, its folders, circuits.io's temporaries and locks) is taken."""
    import importlib

    exp = importlib.import_module("faithfulness")
    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    (repo / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (repo / "notes.md").write_text("mine\n")
    before = sorted(p.relative_to(repo) for p in repo.rglob("*"))
    with pytest.raises(SystemExit) as err:
        exp.cli(["--model", "no-such-model", "--pairs", "2", "--out", str(repo)])
    assert err.value.code == 2
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert ".git/" in line and "notes.md" in line and "did not write" in line
    assert sorted(p.relative_to(repo) for p in repo.rglob("*")) == before
    left = tmp_path / "left"
    (left / "smollm2" / "addition").mkdir(parents=True)
    (left / "smollm2" / ".addition.lock").write_text("")
    (left / ".counterfactuals.json.circuits-tmp-abcd1234").write_text("")
    (left / "counterfactuals.json").write_text("{}")
    assert exp.study_refusal(left) is None and exp.study_refusal(tmp_path / "new") is None
    (left / "smollm2" / "mine.txt").write_text("x")
    assert "smollm2/" in exp.study_refusal(left)


def test_experiment_script_names_a_tampered_counterfactuals_file_in_one_line(tmp_path):
    """counterfactuals.json read back is checked: a count now a string or a share that is a <script> is named with
    its entry; the file the script writes reads back as it is."""
    import importlib
    import json

    exp = importlib.import_module("faithfulness")
    path = tmp_path / "counterfactuals.json"
    good = {"m/addition": {"operator": {"n_pairs": 4, "movable": 0.5}, "operand": {"n_pairs": 4, "movable": 1.0}}}
    path.write_text(json.dumps(good))
    assert exp.read_shares(path) == good and exp.read_shares(tmp_path / "none.json") == {}
    for bad, where in (({"n_pairs": "4", "movable": 0.5}, "m/addition/operator"),
                       ({"n_pairs": 4, "movable": "<script>alert(1)</script>"}, "m/addition/operator")):
        path.write_text(json.dumps({"m/addition": {"operator": bad}}))
        with pytest.raises(ValueError, match=where):
            exp.read_shares(path)
    path.write_text("[1, 2]")
    with pytest.raises(ValueError):
        exp.read_shares(path)


def test_experiment_workers_stop_on_a_worker_s_error_in_one_line(tmp_path):
    import importlib

    exp = importlib.import_module("faithfulness")
    argv = ["--model", str(tmp_path / "no-such-model"), "--pairs", "2", "--operations", "addition,subtraction",
            "--workers", "2", "--out", str(tmp_path / "run")]
    with pytest.raises(exp.WorkerError, match=r"^worker \d: \w+Error: .*no-such-model") as err:
        exp.cli(argv)
    assert "\n" not in str(err.value)


def test_a_failing_worker_ignores_the_parent_s_stop_while_it_exits(monkeypatch):
    """A worker's error stops the others: the parent SIGTERMs every worker still alive, the failing one too while it
    flushes its queue on the way out. Its SIGTERM handler raised KeyboardInterrupt there, and the error came out as
    three chained tracebacks (a held-out run with no disjoint scoring pair, on SmolLM2 subtraction at 64 + 64). The
    worker now ignores SIGTERM once it has its exit, on both paths."""
    import importlib
    import queue
    import signal

    exp = importlib.import_module("faithfulness")
    at_exit = []

    def exit_(code):
        at_exit.append((code, signal.getsignal(signal.SIGTERM)))
        raise SystemExit(code)

    def fail(*a, **k):
        raise ValueError("No scoring pair disjoint from the ranking pairs (seed 1)")

    monkeypatch.setattr(exp.sys, "exit", exit_)
    monkeypatch.setattr(exp.C, "model_for", lambda name, dtype: object())
    monkeypatch.setattr(exp.C, "configure_threads", lambda: None)
    previous = signal.getsignal(signal.SIGTERM)
    try:
        for raised, code, kind in ((fail, 1, "error"), (KeyboardInterrupt, 130, "stopped")):
            monkeypatch.setattr(exp, "run_one", raised if raised is fail else
                                (lambda *a, **k: (_ for _ in ()).throw(KeyboardInterrupt)))
            tasks, messages = queue.Queue(), queue.Queue()
            tasks.put(("smollm2", "subtraction"))
            with pytest.raises(SystemExit):
                exp._worker(exp.Config(), tasks, messages, 1)
            assert at_exit[-1] == (code, signal.SIG_IGN)
            said = [messages.get_nowait() for _ in range(messages.qsize())]
            assert said[0][0] == "start" and said[-1][0] == kind
        assert said and at_exit[0][0] == 1
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_pairs_whose_metric_cannot_move_are_named():
    from circuits.beyond.faithfulness.job import _warn_flat_pairs

    c = curve([0.2, 0.5], 0.6, 0.3)
    c.m_full[:2] = 0.0
    c.m_empty[:2] = 0.0
    with pytest.warns(UserWarning, match=r"2 of 4 pairs have m\(N\) = m\(empty\) .*add nothing to f$"):
        _warn_flat_pairs({"exact-path": {"nodes@end": c}}, 4)
    c.m_full[:] = c.m_empty[:] = 0.0
    with pytest.warns(UserWarning, match=r"4 of 4 pairs .* f is undefined \(NaN\)"):
        _warn_flat_pairs({"exact-path": {"nodes@end": c}}, 4)


@pytest.mark.parametrize("kind,second", [("operand", "top"), ("random", "label")])
def test_division_with_the_operand_counterfactual_gives_finite_scores_for_every_ranking(tmp_path, kind, second):
    """With the paper's counterfactual, division's logit difference could not move (the counterfactual's top token
    was the answer); the operand counterfactual, and the random one with its label (the default here, MIB's), give
    every ranking finite CPR and CMD."""
    from circuits.results import load_result

    out = tmp_path / "division"
    argv = ["faithfulness", *TINY, "--task", "division", "--pairs", "16", "--rankings", NODE_RANKINGS,
            "--n-boot", "20", "--no-progress", "--out", str(out)] + \
        (["--counterfactual", kind, "--second-logit", second] if kind != "random" else [])
    assert cli_main(argv) == 0
    r = load_result(out)
    assert r.config.counterfactual == kind and r.config.second_logit == second and len(r.pairs) == 16
    assert all((p.counterfactual_answer_token_id >= 0) == (second == "label") for p in r.pairs + r.scoring_pairs)
    assert all(p.counterfactual_answer != p.answer for p in r.pairs)
    rows = r.table()
    assert {row["ranking"] for row in rows} == set(NODE_RANKINGS.split(","))
    for row in rows:
        assert math.isfinite(row["cpr"]) and math.isfinite(row["cmd"]), row
    c = r.curves["exact-path"]["nodes@end"]
    assert (c.m_full != c.m_empty).all()  # every pair's metric can move


def test_cmd_margin_is_a_paired_bootstrap_of_the_cmd_difference():
    from circuits.patching.circuit_curves import area_scores, cmd_margin, curve_from

    g = torch.Generator().manual_seed(0)
    sizes = (0.05, 0.2, 0.5)
    mf, me = 2.0 + torch.rand(12, generator=g), -torch.rand(12, generator=g)
    kw = dict(metric="logit_diff", ablation="counterfactual", positions="end", level="node", n_boot=200,
              ci_level=0.95, seed=0, seconds=0.0)
    a = curve_from(sizes, torch.tensor([1, 2, 3]), 60, mf * torch.tensor([[0.8], [0.9], [1.0]]), mf, me, **kw)
    b = curve_from(sizes, torch.tensor([1, 2, 3]), 60, mf * torch.tensor([[0.2], [0.5], [0.7]]), mf, me, **kw)
    d, lo, hi = cmd_margin(a, b, 200)
    assert d == pytest.approx(b.cmd - a.cmd) and 0 < lo <= d <= hi  # b's circuits are worse on every pair
    assert cmd_margin(a, a, 200) == (0.0, 0.0, 0.0)  # the same pairs in both: no spread
    assert float(area_scores(sizes, a.f.double())[1]) == pytest.approx(a.cmd, abs=1e-6)
    from circuits.patching.circuit_curves import cmd_margin_draws
    from circuits.patching.core.uncertainty import bootstrap_p

    diff, draws = cmd_margin_draws(a, b, 200)
    assert diff == d and draws.shape == (200,) and bootstrap_p(draws) == pytest.approx(2 / 201)  # none <= 0
    assert cmd_margin_draws(a, b, 0) == (d, None)


def test_bootstrap_p_and_holm_against_hand_computed_values():
    """Holm (1979): the i-th smallest of m p-values is tested at alpha / (m - i), in order, stopping at the first
    that fails. p = 0.01, 0.04, 0.03, 0.005 with alpha 0.05 and m = 4: sorted 0.005 (<= 0.0125, rejected), 0.01
    (<= 0.01667, rejected), 0.03 (> 0.025: not, and every later one not), 0.04 (not, although <= 0.05)."""
    from circuits.patching.core.uncertainty import bootstrap_p, holm

    rejected, levels = holm([0.01, 0.04, 0.03, 0.005], 0.05)
    assert rejected == [True, False, False, True]
    assert levels == pytest.approx([1 - 0.05 / 3, 1 - 0.05 / 1, 1 - 0.05 / 2, 1 - 0.05 / 4])
    rejected, levels = holm([0.01, float("nan")], 0.05)  # no resamples: never apart, outside the family
    assert rejected == [True, False] and levels[0] == pytest.approx(0.95) and levels[1] != levels[1]
    with pytest.raises(ValueError, match="alpha must lie in"):
        holm([0.1], 1.5)
    # 3 of 9 resamples at or below 0, 7 at or above (0 counts both sides): 2 * min(4, 8) / 10
    assert bootstrap_p(torch.tensor([-2.0, -1.0, 0.0, 1, 2, 3, 4, 5, 6])) == pytest.approx(0.8)
    assert bootstrap_p(torch.tensor([float("nan")])) != bootstrap_p(torch.tensor([float("nan")]))


def test_edges_on_a_model_with_post_norms_are_refused_before_the_work(tmp_path, capsys, monkeypatch):
    """Gemma 2/3 normalise the sum of their heads, so EAP-IG's edges cannot be scored there: the job says so in one
    line before any ranking runs (it used to run every node ranking first, then stop at the edge level), and
    ``--no-edges`` scores the nodes."""
    import circuits.beyond.faithfulness.job as job

    gemma = ["--model", str(tiny_dir("gemma3")), "--no-filter-correct", "--few-shot", "on"]
    ran = []
    real_rank = job.rank
    monkeypatch.setattr(job, "rank", lambda *a, **k: ran.append(a[2]) or real_rank(*a, **k))
    argv = ["faithfulness", *gemma, "--task", "addition", "--pairs", "2", "--rankings", "exact-path,eap-ig",
            "--n-boot", "10", "--no-progress"]
    assert cli_main([*argv, "--out", str(tmp_path / "edges")]) != 0
    err = capsys.readouterr().err.strip().splitlines()[-1]  # the lines above it: loading the model
    assert "normalises the sum of its heads" in err and "--no-edges" in err and "Traceback" not in err, err
    assert ran == [] and not (tmp_path / "edges").exists()
    assert cli_main([*argv, "--no-edges", "--out", str(tmp_path / "nodes")]) == 0
    assert ran == ["exact-path", "eap-ig"]


def _pair(ref: str, cf: str):
    from types import SimpleNamespace

    return SimpleNamespace(reference=ref, counterfactual=cf)


def _plain_balance(ranking, scoring):
    """The rule written out plainly: from the last ranking pair, move it when no other staying ranking pair has
    either of its prompts, until the sides differ by at most one."""
    stay, moved = list(ranking), []
    for p in reversed(list(ranking)):
        if len(scoring) + len(moved) >= len(stay) - 1:
            break
        others = [q for q in stay if q is not p]
        if not {p.reference, p.counterfactual} & {x for q in others for x in (q.reference, q.counterfactual)}:
            stay.remove(p)
            moved.append(p)
    return stay, list(scoring) + moved[::-1]


def test_a_short_held_out_split_moves_ranking_pairs_that_share_no_prompt():
    """Held-out scoring on a task with few answerable problems (issue 43's four-operation study: SmolLM2's
    subtraction at 64 + 64 had no scoring pair left): the last ranking pairs move to the scoring side until the two
    differ by at most one, never one whose prompt a staying ranking pair has; equal to the rule written plainly, on
    hand-made and random cases."""
    import random

    from circuits.beyond.faithfulness.job import balance_split

    six = [_pair(f"r{i}", f"c{i}") for i in range(6)]
    ranking, scoring = balance_split(six, [])
    assert ranking == six[:3] and scoring == six[3:]  # the order kept on both sides
    shared = [*six[:5], _pair("r5", "r0")]  # the last pair's counterfactual is the first pair's reference
    ranking, scoring = balance_split(shared, [])
    assert scoring == shared[2:5] and ranking == [*shared[:2], shared[5]]  # the stuck pair stays, the next ones move
    assert balance_split(six[:3], six[3:]) == (six[:3], six[3:])  # balanced already: as given
    assert balance_split(six[:4], six[4:5]) == (six[:3], [six[4], six[3]])  # 4 against 1: one moves
    rng = random.Random(0)
    for _ in range(300):
        prompts = [f"p{i}" for i in range(rng.randint(2, 14))]
        ranking = [_pair(*rng.sample(prompts, 2)) for _ in range(rng.randint(1, 12))]
        scoring = [_pair(f"s{i}", f"t{i}") for i in range(rng.randint(0, 3))]
        got = balance_split(ranking, scoring)
        assert got == _plain_balance(ranking, scoring)
        stay = {x for p in got[0] for x in (p.reference, p.counterfactual)}
        assert not stay & {x for p in got[1] for x in (p.reference, p.counterfactual)}
        assert len(got[0]) + len(got[1]) == len(ranking) + len(scoring)


def test_the_job_balances_a_short_split_and_refuses_an_empty_one_in_one_line(monkeypatch):
    from circuits.beyond.faithfulness import job
    from circuits.beyond.faithfulness.config import FaithfulnessConfig
    from circuits.data.pairs import FewerPairsWarning

    six = [_pair(f"r{i}", f"c{i}") for i in range(6)]
    monkeypatch.setattr(FaithfulnessConfig, "load_pairs", lambda self, model: (six, {"accuracy": 1.0}))
    monkeypatch.setattr(job, "held_out_pairs", lambda config, model, pairs: [])
    with pytest.warns(FewerPairsWarning, match=r"^6 pairs in all for both sides: ranking on 3 and scoring on 3 \(the "
                                                 r"last 3 ranking pairs moved.*going on with them$"):
        ranking, scoring, stats = job.split_pairs(FaithfulnessConfig(n_pairs=6), model=None)
    assert (ranking, scoring, stats) == (six[:3], six[3:], {"accuracy": 1.0})
    assert job.split_pairs(FaithfulnessConfig(n_pairs=6, held_out=False), model=None)[1] is None
    one = [_pair("a", "b")]
    monkeypatch.setattr(FaithfulnessConfig, "load_pairs", lambda self, model: (one, {}))
    with pytest.raises(ValueError, match=r"^No scoring pair disjoint from the 1 ranking pairs, and none of them can "
                                         r"move to the scoring side; pass --no-held-out"):
        job.split_pairs(FaithfulnessConfig(n_pairs=1), model=None)


def test_ranking_boot_resamples_both_splits_as_a_plain_rerun_does(tmp_path, monkeypatch, capsys):
    """--ranking-boot (issue 43: the ranking pairs' variance in an interval): each resample re-ranks on a resample of
    the ranking pairs and scores on a resample of the scoring pairs; a resample equals ranking and scoring those
    resampled pair lists directly; only the named rankings are resampled; a rerun reuses the parts; bad values are
    one line."""
    from circuits.beyond.faithfulness import job
    from circuits.beyond.faithfulness.config import RANKING_BOOT_SEED
    from circuits.models.loading import load_model
    from circuits.patching.core.uncertainty import resample_pairs

    out = tmp_path / "f"
    argv = ["faithfulness", "--model", str(tiny_dir("llama")), "--no-filter-correct", "--few-shot", "on", "--pairs", "4",
            "--rankings", "exact-path,screen", "--sizes", "0.05,0.5", "--n-boot", "0", "--no-edges", "--ranking-boot",
            "3", "--ranking-boot-rankings", "screen", "--no-progress", "--out", str(out)]
    assert cli_main(argv) == 0
    r = FaithfulnessResult.load(out)
    assert list(r.ranking_boot) == ["screen"] and set(r.ranking_boot["screen"]) == {"nodes@end", "nodes@all"}
    assert all(v.shape == (3,) and v.isfinite().all() for v in r.ranking_boot["screen"].values())
    rows = {(row["ranking"], row["setting"]): row for row in json.loads((out / "summary.json").read_text())["table"]}
    assert rows[("exact-path", "nodes@end")]["cmd_ci_ranking_boot"] is None
    low, high = rows[("screen", "nodes@end")]["cmd_ci_ranking_boot"]
    assert low <= high and low >= float(r.ranking_boot["screen"]["nodes@end"].min()) - 1e-12

    # the plain reference: resample 1 as a fresh run on the resampled lists (duplicates kept), no column trick
    model = load_model(str(tiny_dir("llama")))
    quick = r.config.replace(n_boot=0, edges=False, ranking_boot=0)
    b = 1
    rows_b = resample_pairs(len(r.pairs), 3, RANKING_BOOT_SEED)[b]
    cols_b = resample_pairs(len(r.scoring_pairs), 3, RANKING_BOOT_SEED + 1)[b]
    s = job.rank(model, [r.pairs[int(i)] for i in rows_b], "screen", quick)
    for setting in ("nodes@end", "nodes@all"):
        plain = job.measure(model, [r.scoring_pairs[int(j)] for j in cols_b], s, setting, quick).cmd
        assert abs(plain - float(r.ranking_boot["screen"][setting][b])) < 1e-5, (setting, plain)

    calls = []
    monkeypatch.setattr(job, "ranking_bootstrap", lambda *a, **k: calls.append(a) or {})
    assert cli_main(argv) == 0  # the same run: every part, resamples included, reused
    assert not calls and torch.equal(FaithfulnessResult.load(out).ranking_boot["screen"]["nodes@end"],
                                     r.ranking_boot["screen"]["nodes@end"])

    capsys.readouterr()
    for bad, said in ((["--ranking-boot", "3", "--no-held-out"], "give --held-out"),
                      (["--ranking-boot-rankings", "nope"], "unknown ranking 'nope'"),
                      (["--ranking-boot-rankings", ","], "--ranking-boot-rankings"),
                      (["--ranking-boot", "-1"], "--ranking-boot"), (["--ranking-boot", "99999999"], "--ranking-boot")):
        assert cli_main(argv[:-2] + bad + ["--out", str(tmp_path / "bad")]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and said in err[0], err
        assert not (tmp_path / "bad").exists()
