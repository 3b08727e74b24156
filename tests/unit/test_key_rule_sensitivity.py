"""The key-head set's sensitivity to the rule's threshold (issue 43): counts at fraction 0.03..0.08 and under the
paper's relative_logit<-0.05, against hand-counted scores and a saved identify result."""

from __future__ import annotations

import math

import pytest
import torch

from circuits.identify.sensitivity import describe, threshold_counts
from circuits.patching.core.scores import Scores


def _scores(heads: list[list[float]], mlps: list[float], metric: str, sign: int) -> Scores:
    return Scores({"heads": torch.tensor(heads), "mlps": torch.tensor(mlps)}, metric, sign, engine="hand")


def test_threshold_counts_on_hand_counted_scores():
    # 2 layers x 3 heads. By fraction: 0.09, 0.065, 0.05 (exactly at 0.05: >= keeps it), 0.049, 0.031, NaN (never).
    fraction = _scores([[0.09, 0.049, math.nan], [0.065, 0.05, 0.031]], [0.2, 0.045], "fraction", 1)
    paper = _scores([[-0.06, -0.01, 0.0], [-0.051, -0.05, 0.02]], [-0.2, 0.0], "relative_logit", -1)
    got = threshold_counts(fraction, paper)
    counts = {t: v["n_heads"] for t, v in got["thresholds"].items()}
    assert counts == {"0.03": 5, "0.04": 4, "0.05": 3, "0.06": 2, "0.07": 1, "0.08": 1}  # counted by hand above
    assert got["thresholds"]["0.05"]["heads"] == ["0.0", "1.0", "1.1"]  # most important first
    assert got["thresholds"]["0.04"]["n_mlps"] == 2 and got["thresholds"]["0.05"]["n_mlps"] == 1
    assert got["thresholds"]["0.05"]["share_of_heads"] == pytest.approx(3 / 6) and got["n_heads"] == 6
    # the paper's rule is strict: -0.05 itself is not below -0.05
    assert got["paper_rule"]["heads"] == ["0.0", "1.0"] and got["paper_rule"]["n_mlps"] == 1
    assert describe(got) == ("key heads by fraction>=0.03: 5, 0.04: 4, 0.05: 3, 0.06: 2, 0.07: 1, 0.08: 1; by the "
                             "paper's relative_logit<-0.05: 2 (of 6)")
    assert "paper_rule" not in threshold_counts(fraction, thresholds=(0.05,))


def test_threshold_counts_refuses_other_metrics_and_thresholds():
    fraction = _scores([[0.1]], [0.1], "fraction", 1)
    with pytest.raises(ValueError, match="reads fraction scores"):
        threshold_counts(_scores([[0.1]], [0.1], "logit_diff", -1))
    with pytest.raises(ValueError, match="relative_logit scores"):
        threshold_counts(fraction, fraction)
    with pytest.raises(ValueError, match="thresholds must be fractions"):
        threshold_counts(fraction, thresholds=(0.05, 5.0))


def test_an_identify_result_saves_its_sensitivity_and_a_loaded_one_gives_the_same(tiny_llama, tmp_path, capsys):
    from circuits.identify import identify
    from circuits.identify.result import load_identify
    from result_cases import IDENTIFY

    r = identify(tiny_llama, config=IDENTIFY, progress=False)
    s = r.summary()["key_rule_sensitivity"]
    for t, v in s["thresholds"].items():  # the same count as the result's own key rule at that threshold
        assert v["n_heads"] == len(r.key_heads(f"fraction>={t}"))
    assert s["paper_rule"]["n_heads"] == len(r.key_heads("relative_logit<-0.05"))
    r.save(tmp_path / "id")
    back = load_identify(tmp_path / "id")
    assert back.summary()["key_rule_sensitivity"] == s
    from circuits.identify.job import _print_summary  # the command prints it as one line

    _print_summary("addition", back, tmp_path / "id")
    assert f"[addition] {describe(s)}\n" in capsys.readouterr().out
