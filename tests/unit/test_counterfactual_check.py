"""A warning where the key heads change with the counterfactual kind (issue 29: on four hand-made pairs the key heads
changed completely between ``@`` and ``&`` and nothing warned). ``cc.compare_counterfactuals`` sweeps the same
references under each kind; its key heads and overlap equal separate sweeps', and it warns exactly when the overlap
is below its threshold."""

from __future__ import annotations

import warnings

import pytest

import circuits as cc
from circuits.identify.counterfactuals import CounterfactualWarning, counterfactual_kinds, jaccard
from circuits.types import Head


@pytest.fixture(scope="module")
def kinds(tiny_llama):
    return counterfactual_kinds(tiny_llama, "addition", 6, few_shot="on")


def test_the_kinds_share_their_references_and_differ_in_the_counterfactual(kinds):
    op, nd = kinds["operator"], kinds["operand"]
    assert len(op) == len(nd) == 6
    assert [p.reference for p in op] == [p.reference for p in nd]
    assert all(a.counterfactual != b.counterfactual for a, b in zip(op, nd))


def test_the_overlap_is_that_of_separate_sweeps_and_warns_below_the_threshold(tiny_llama, kinds):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        check = cc.compare_counterfactuals(tiny_llama, kinds, "top3", warn=False)
        plain = {k: [h for h, _ in cc.sweep(tiny_llama, v, progress=False).scores().key("top3")] for k, v in kinds.items()}
    assert check.key_heads == plain
    want = len(set(plain["operator"]) & set(plain["operand"])) / len(set(plain["operator"]) | set(plain["operand"]))
    assert check.overlap == {("operator", "operand"): want}
    for threshold in (0.0, want, min(1.0, want + 0.01)):
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            c = cc.compare_counterfactuals(tiny_llama, kinds, "top3", threshold=threshold)
        said = [w for w in seen if issubclass(w.category, CounterfactualWarning)]
        assert bool(said) == (want < threshold) == (not c.stable)
        if said:
            assert "The key heads change with the counterfactual" in str(said[0].message)
            assert f"Jaccard overlap {want:.2f}" in str(said[0].message)


def test_identical_counterfactuals_never_warn_and_bad_input_is_one_line(tiny_llama, kinds):
    with warnings.catch_warnings():
        warnings.simplefilter("error", CounterfactualWarning)
        warnings.simplefilter("ignore", UserWarning)
        check = cc.compare_counterfactuals(tiny_llama, {"@": kinds["operator"], "again": kinds["operator"]}, "top3")
    assert check.stable and check.lowest == 1.0
    with pytest.raises(ValueError, match="at least two counterfactual kinds"):
        cc.compare_counterfactuals(tiny_llama, {"@": kinds["operator"]})
    with pytest.raises(ValueError, match="other reference prompts"):
        cc.compare_counterfactuals(tiny_llama, {"@": kinds["operator"], "&": kinds["operand"][::-1]})


def test_jaccard():
    assert jaccard([Head(0, 1), Head(1, 2)], [Head(1, 2), Head(2, 0)]) == 1 / 3
    assert jaccard([], []) == 1.0 and jaccard([Head(0, 0)], []) == 0.0


@pytest.mark.parametrize("given, says", [
    ({"operator": "3 + 4 = ", "operand": "3 + 5 = "}, r"the pairs of 'operator' must be PromptPairs \(cc.make_pair, "
                                                        r"cc.build_pairs\), got str"),
    ({"operator": ["3 + 4 = "], "operand": ["3 + 5 = "]}, "the pairs of 'operator' must be PromptPairs"),
    ({"operator": 5, "operand": 6}, "got int 5"),
    (["operator", "operand"], r"takes \{counterfactual kind: \[PromptPair, ...\]\}, got list")])
def test_strings_instead_of_pairs_are_one_line(tiny_llama, given, says):
    """Issue 41 (UNCLEAR): strings gave a raw AttributeError ('str' object has no attribute 'reference')."""
    with pytest.raises(ValueError, match=says):
        cc.compare_counterfactuals(tiny_llama, given, "top3")
