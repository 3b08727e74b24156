"""What users type, generated: every key rule, head list, template and pair ends in a result or in one clear
error (a ``ValueError`` whose message says what is accepted), never in another exception. Result folders:
tests/integration/test_script_results.py."""

from __future__ import annotations

import string

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from circuits.data.pairs import PromptError, make_pair
from circuits.data.templates import Template
from circuits.patching.core.metrics import METRICS
from circuits.patching.core.ranking import KeyRule
from circuits.types import Component, Head, parse_heads

SETTINGS = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
texts = st.text(alphabet=string.printable, max_size=30)


@SETTINGS
@given(st.one_of(texts, st.builds(lambda m, op, v: f"{m}{op}{v}", st.sampled_from([*METRICS, "speed", ""]),
                                  st.sampled_from(["<", "<=", ">", ">=", "=", "<<"]),
                                  st.one_of(st.floats(allow_nan=True), texts)),
                 st.builds(lambda k, m: f"top{k}{m}", st.integers(-3, 10**6), st.sampled_from(["", ":fraction", ":x"]))))
def test_key_rules_parse_or_say_what_is_accepted(text):
    try:
        rule = KeyRule.parse(text)
    except ValueError as err:
        assert "accepted" in str(err).lower() or "selects no heads" in str(err) or "finite" in str(err)
        return
    assert rule.metric in METRICS and KeyRule.parse(str(rule)) == rule  # a rule prints as text that parses back


@SETTINGS
@given(st.one_of(texts, st.lists(st.tuples(st.integers(0, 99), st.integers(0, 99)), max_size=5).map(
    lambda hs: ",".join(f"{l}.{h}" for l, h in hs))))
def test_head_lists_parse_or_say_how_to_write_them(text):
    try:
        heads = parse_heads(text)
    except ValueError as err:
        assert "LAYER.HEAD" in str(err)
        return
    assert all(isinstance(h, Head) for h in heads)
    assert parse_heads(",".join(map(str, heads))) == heads
    for h in heads:
        assert Component.parse(str(h)).as_head == h


@SETTINGS
@given(st.text(alphabet=string.ascii_letters + " {}ABOP.,?=", max_size=40), st.sampled_from(["symbol", "word", "nothing"]))
def test_templates_are_valid_or_refused(text, op_kind):
    try:
        Template("t", "addition", "equation", text, "+", op_kind)  # type: ignore[arg-type]
    except ValueError as err:
        assert str(err)
        return
    assert all(slot in text for slot in ("{A}", "{B}", "{OP}"))


@SETTINGS
@given(texts, texts, st.text(alphabet=string.digits + " x", min_size=0, max_size=3))
def test_make_pair_gives_a_checked_pair_or_a_prompt_error(tokenizer, ref, cf, answer):
    try:
        pair = make_pair(tokenizer, ref, cf, answer)
    except PromptError as err:
        assert str(err)
        return
    assert len(pair.reference_token_ids) == len(pair.counterfactual_token_ids) > 0
    assert pair.reference != pair.counterfactual
