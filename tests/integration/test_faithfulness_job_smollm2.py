"""The faithfulness job on SmolLM2 with a few pairs: each ranking's scores are its engine's, each curve is the
faithfulness engine's on them, the result saves and loads equal, and the report page draws its section."""

import pytest
import torch
from helpers import aligned_pairs

from circuits.beyond.faithfulness.config import FaithfulnessConfig
from circuits.beyond.faithfulness.job import faithfulness
from circuits.beyond.faithfulness.result import FaithfulnessResult
from circuits.patching import circuit_curves as engine
from circuits.patching.engines.end_sweep import sweep


@pytest.fixture(scope="module")
def result(smollm2, tokenizer):
    # edges at END only, named: the job's default adds edges@all (issue 43), equal to the plain loop on SmolLM2 in
    # tests/backends/test_edges_everywhere.py and read from a default run in tests/unit/test_faithfulness_job.py
    cfg = FaithfulnessConfig(model="smollm2", rankings=("exact-path", "screen", "eap-ig"), sizes=(0.01, 0.1, 0.5),
                             n_boot=50, ig_steps=2, edge_positions=("end",))
    return faithfulness(smollm2, aligned_pairs(tokenizer, 3), cfg, progress=False)


def test_scores_and_curves_are_the_engines(smollm2, result):
    pairs = result.pairs
    h, m = sweep(smollm2, pairs, "path", progress=False).scores("logit_diff").parts.values()
    assert torch.equal(result.scores["exact-path"]["heads"], h.abs()) and torch.equal(result.scores["exact-path"]["mlps"], m.abs())
    n = smollm2.cfg.n_layers * (smollm2.cfg.n_heads + 1)
    for ranking in result.curves:
        for setting, c in result.curves[ranking].items():
            # nodes: heads and MLPs, and the input where the ranking scores it (every built-in ranking since issue 43:
            # MIB's node graph, 301)
            total = n + ("input" in result.scores[ranking]) if setting.startswith("nodes") else \
                int(engine.edge_valid(smollm2).sum())
            assert c.n_nodes == total and c.n_kept.tolist() == [int(s * total) for s in (0.01, 0.1, 0.5)]  # MIB's
            assert c.f_low.le(c.f + 1e-6).all() and c.f.le(c.f_high + 1e-6).all()
            assert c.cpr_interval[0] <= c.cpr <= c.cpr_interval[1] and c.positions == setting.split("@")[1]
    assert list(result.curves["eap-ig"]) == ["nodes@end", "nodes@all", "edges@end"]
    s = result.scores["screen"]
    again = engine.circuit_curve(smollm2, pairs, s["heads"], s["mlps"], input=s["input"], sizes=(0.01, 0.1, 0.5),
                                positions="all", n_boot=50, count="floor")
    assert torch.equal(again.f, result.curves["screen"]["nodes@all"].f)
    assert all(v > 0 for v in result.seconds.values())


def test_saves_loads_and_reports(result, tmp_path):
    from circuits.viz.report import build_report

    back = FaithfulnessResult.load(result.save(tmp_path / "f"))
    assert back == result
    page = build_report([tmp_path])
    assert "Lowest CMD: nodes@end: <b>" in page and page.count("faithfulness of each ranking") >= 1


def test_cli_writes_both_curves_and_cpr_is_not_one_minus_cmd(tmp_path):
    """Issue 43 on SmolLM2: `circuits faithfulness --task addition` (8 ranking pairs, 8 held-out scoring pairs, two
    rankings, nodes at END) writes the signed and the absolute ranking's curve of each ranking; CPR is read from the
    signed one and CMD from the absolute one, so for at least one ranking they do not add up to the axis' 0.999 (one
    curve's two areas do wherever f stays in [0, 1]); the scoring pairs, read back, share no prompt with the ranking
    pairs."""
    import json

    from circuits.cli import main as cli_main
    from circuits.results import load_result

    out = tmp_path / "f"
    assert cli_main(["faithfulness", "--model", "smollm2", "--task", "addition", "--pairs", "8", "--rankings",
                     "exact-path,screen", "--positions", "end", "--no-edges", "--n-boot", "20", "--no-progress",
                     "--out", str(out)]) == 0
    s = json.loads((out / "summary.json").read_text())
    assert s["cpr_ranking"] == "signed" and s["held_out"] and s["n_pairs"] == 8 == s["n_scoring_pairs"]
    for ranking in ("exact-path", "screen"):
        assert set(s["curves"][ranking]) == set(s["signed_curves"][ranking]) == {"nodes@end"}
    rows = {row["ranking"]: row for row in s["table"]}
    assert all(row["cpr"] == s["signed_curves"][k]["nodes@end"]["cpr"] for k, row in rows.items())
    assert all(row["cmd"] == s["curves"][k]["nodes@end"]["cmd"] for k, row in rows.items())
    assert any(abs(row["cpr"] + row["cmd"] - 1) > 0.01 for row in rows.values()), rows
    r = load_result(out)
    prompts = {p.reference for p in r.pairs} | {p.counterfactual for p in r.pairs}
    assert not prompts & ({p.reference for p in r.scoring_pairs} | {p.counterfactual for p in r.scoring_pairs})
    assert "exact-path, signed" in (out / "figure.html").read_text()
