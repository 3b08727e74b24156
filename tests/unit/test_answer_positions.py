"""Answers of several tokens (issue 42): pairs keep every answer token, the END sweep reads a later answer position
(both prompts teacher-forced with the answer's earlier tokens) or the whole answer, and each equals a plain reference
built here by hand: one ``run_with_hooks`` per component on the prompt with the first answer token appended,
TransformerLens's own patching at END + 1, and the sum of the answer tokens' log-probabilities from one forward pass.
"""

from __future__ import annotations

import json

import pytest
import torch
from helpers import tiny_dir

import circuits as cc
from circuits.cli import main as cli_main
from circuits.data.answers import at_answer_position, check_answer_position
from circuits.data.pairs import PairBatch, PromptError, PromptPair, encode, make_pair, read_pairs, write_pairs
from circuits.identify import identify
from circuits.identify.config import IdentifyConfig
from circuits.patching import all_components, sweep
from circuits.patching.core.metrics import METRICS
from circuits.patching.engines.end_sweep_answers import sweep_answer
from circuits.patching.engines.end_sweep_plain import sweep_plain
from circuits.results import load_result

# Single-digit sums with two-token answers for a tokenizer that splits digits (the tiny models' and SmolLM2's);
# two prompt lengths, so right padding and per-pair END are exercised.
TEXTS = [("7 + 5 = ", "7 @ 5 = ", "12"), ("8 + 6 = ", "8 @ 6 = ", "14"), ("so 9 + 9 = ", "so 9 @ 9 = ", "18"),
         ("6 + 7 = ", "6 @ 7 = ", "13")]


def _pairs(tokenizer, texts=TEXTS):
    return [make_pair(tokenizer, *t) for t in texts]


def _appended(tokenizer, texts, k):
    """The batch read at answer token ``k``, built from the tokenizer alone: the full text's tokens (prompt and
    answer) cut after the answer's first ``k`` tokens, for the reference and (with the same answer) the
    counterfactual; the answer is the full text's next token."""
    ref, cf, answer = [], [], []
    for prompt, counter, ans in texts:
        full, cf_full = encode(tokenizer, prompt + ans), encode(tokenizer, counter + ans)
        n = len(encode(tokenizer, prompt))
        ref.append(full[: n + k])
        cf.append(encode(tokenizer, counter) + full[n: n + k])
        assert cf_full[: n + k] == cf[-1]  # the counterfactual written with the reference's answer tokens
        answer.append(full[n + k])
    width = max(map(len, ref))
    pad = lambda rows: torch.tensor([r + [0] * (width - len(r)) for r in rows])  # noqa: E731
    return PairBatch(pad(ref), pad(cf), torch.tensor([len(r) - 1 for r in ref]), torch.tensor(answer))


# --- pairs ------------------------------------------------------------------------------------------------------------


def test_make_pair_keeps_every_answer_token_and_one_token_pairs_are_unchanged(tokenizer):
    pair = make_pair(tokenizer, "7 + 5 = ", "7 @ 5 = ", "12")
    full, n = encode(tokenizer, "7 + 5 = 12"), len(encode(tokenizer, "7 + 5 = "))
    assert pair.answer_ids == tuple(full[n:]) and len(pair.answer_ids) == 2 and pair.answer_token_id == full[n]
    assert PromptPair.from_json(json.loads(json.dumps(pair.to_json()))) == pair
    one = make_pair(tokenizer, "3 + 4 = ", "3 @ 4 = ", "7")
    # A one-token pair's saved line has exactly the keys it had before answers of several tokens.
    assert "answer_token_ids" not in one.to_json() and one.answer_ids == (one.answer_token_id,)
    assert set(one.to_json()) == {"reference", "counterfactual", "answer", "answer_token_id", "reference_token_ids",
                                  "counterfactual_token_ids", "template_id", "operation", "operands", "roles",
                                  "prefix_length", "counterfactual_answer"}
    with pytest.raises(PromptError, match="not a single token"):  # the templates' pairs keep to one token
        make_pair(tokenizer, "3 + 9 = ", "3 @ 9 = ", "12", max_answer_tokens=1)


def test_saved_pairs_round_trip_and_a_bad_answer_token_is_one_line(tokenizer, tmp_path):
    pairs = _pairs(tokenizer) + [make_pair(tokenizer, "3 + 4 = ", "3 @ 4 = ", "7")]
    write_pairs(tmp_path / "pairs.jsonl", pairs)
    assert read_pairs(tmp_path / "pairs.jsonl") == pairs
    line = pairs[0].to_json() | {"answer_token_ids": [33, -1]}
    (tmp_path / "bad.jsonl").write_text(json.dumps(line) + "\n")
    with pytest.raises(ValueError, match=r"line 1: answer_token_ids must be token ids"):
        read_pairs(tmp_path / "bad.jsonl")


def test_forcing_appends_the_reference_answer_to_both_prompts(tokenizer):
    forced = at_answer_position(_pairs(tokenizer), 1, tokenizer)
    batch = _appended(tokenizer, TEXTS, 1)
    for i, p in enumerate(forced):
        n = int(batch.end[i]) + 1
        assert list(p.reference_token_ids) == batch.reference[i, :n].tolist()
        assert list(p.counterfactual_token_ids) == batch.counterfactual[i, :n].tolist()
        assert p.answer_token_id == int(batch.answer[i]) and p.answer == TEXTS[i][2][1:]
        assert p.reference == TEXTS[i][0] + TEXTS[i][2][0]


def test_a_position_past_an_answer_is_one_line_before_the_work(tokenizer, tiny_llama):
    pairs = _pairs(tokenizer) + [make_pair(tokenizer, "3 + 4 = ", "3 @ 4 = ", "7")]
    with pytest.raises(ValueError, match=r"--answer-position 1: pair 5 .* has an answer of 1 token"):
        check_answer_position(pairs, 1)
    with pytest.raises(ValueError, match=r"--answer-position 2: pair 1 .* answer of 2 tokens"):
        sweep_answer(tiny_llama, pairs[:1], "path", 2, progress=False)
    with pytest.raises(ValueError, match="--answer-position 'last'"):
        IdentifyConfig(answer_position="last")
    with pytest.raises(ValueError, match="--answer-position '-1'"):
        IdentifyConfig(answer_position="-1")
    with pytest.raises(ValueError, match="--receivers with --answer-position whole"):
        IdentifyConfig(answer_position="whole", receivers="1.0")
    check_answer_position(pairs, "whole")  # any length is read whole


# --- the END sweep at answer position 1 ---------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["path", "activation"])
@pytest.mark.parametrize("arch", ["llama", "mistral"])
def test_sweep_at_position_1_equals_one_run_with_hooks_per_component(request, tokenizer, arch, mode):
    model = request.getfixturevalue(f"tiny_{arch}")
    ours = sweep_answer(model, _pairs(tokenizer), mode, 1, progress=False)
    base, plain = sweep_plain(model, _appended(tokenizer, TEXTS, 1), mode, all_components(model))
    worst = 0.0
    for c, values in plain.items():
        view = ours.heads.index((c.layer, c.head)) if c.kind == "head" else ours.mlps.index((c.layer,))
        worst = max(worst, *((a - b).abs().max().item() for a, b in zip((view.logit, view.logit_diff, view.prob), values)))
    assert worst <= 1e-4, f"the sweep at END + 1 differs from the plain loop by {worst}"
    for f in ("answer", "cf_answer", "logit", "logit_diff", "prob", "cf_logit"):
        torch.testing.assert_close(getattr(ours.baseline, f), getattr(base, f), atol=1e-4, rtol=0, msg=f)
    # END + 1 is another question than END: the readouts differ (else the equality would prove little)
    at_end = sweep(model, _pairs(tokenizer), mode, progress=False)
    assert not torch.equal(at_end.baseline.answer, ours.baseline.answer)
    assert (ours.head_logit - ours.baseline.logit).abs().max() > 1e-2


def test_position_1_equals_transformer_lens_patching(tiny_llama, tokenizer):
    """TransformerLens's own ``generic_activation_patch`` at END + 1, on prompts of one length with the first answer
    token appended by hand."""
    import pandas as pd
    from transformer_lens import patching

    texts = [t for t in TEXTS if not t[0].startswith("so")]
    batch = _appended(tokenizer, texts, 1)
    end = int(batch.end[0])
    assert (batch.end == end).all() and end == len(encode(tokenizer, texts[0][0]))
    answer = batch.answer

    def metric(logits):
        return logits[torch.arange(len(answer)), end, answer].mean()

    _, cf_cache = tiny_llama.run_with_cache(batch.counterfactual)
    L, H = tiny_llama.cfg.n_layers, tiny_llama.cfg.n_heads
    heads = pd.DataFrame([(l, end, h) for l in range(L) for h in range(H)], columns=["layer", "pos", "head_index"])
    theirs = patching.generic_activation_patch(tiny_llama, batch.reference, cf_cache, metric,
                                               patching.layer_pos_head_vector_patch_setter, "z", index_df=heads)
    ours = sweep_answer(tiny_llama, _pairs(tokenizer, texts), "activation", 1, progress=False)
    torch.testing.assert_close(ours.head_logit.mean(-1), theirs.reshape(L, H).float(), atol=1e-4, rtol=0)
    mlps = pd.DataFrame([(l, end) for l in range(L)], columns=["layer", "pos"])
    theirs_mlp = patching.generic_activation_patch(tiny_llama, batch.reference, cf_cache, metric,
                                                   patching.layer_pos_patch_setter, "mlp_out", index_df=mlps)
    torch.testing.assert_close(ours.mlp_logit.mean(-1), theirs_mlp.float(), atol=1e-4, rtol=0)


# --- the whole answer ------------------------------------------------------------------------------------------------


def test_the_whole_answer_is_the_sum_of_its_tokens_log_probabilities(tiny_llama, tokenizer):
    texts = [*TEXTS, ("3 + 4 = ", "3 @ 4 = ", "7")]  # a one-token answer among them: read at its one position
    pairs = _pairs(tokenizer, texts)
    whole = sweep_answer(tiny_llama, pairs, "path", "whole", progress=False)
    m = METRICS["answer_logprob"]
    # The reference run's value: one forward pass of prompt + answer, log-softmax at each answer token's position.
    for i, (prompt, _, ans) in enumerate(texts):
        full, n = encode(tokenizer, prompt + ans), len(encode(tokenizer, prompt))
        logp = tiny_llama(torch.tensor([full]))[0].float().log_softmax(-1)
        by_hand = sum(float(logp[j - 1, full[j]]) for j in range(n, len(full)))
        assert float(whole.baseline.prob[i].log()) == pytest.approx(by_hand, abs=1e-4)
    # Patched: the sum over answer positions of the plain loop's log-probability at that position, patched there.
    per_pair = torch.zeros(tiny_llama.cfg.n_layers, len(pairs))
    base_sum = torch.zeros(len(pairs))
    for k in (0, 1):
        idx = [i for i, t in enumerate(texts) if len(pairs[i].answer_ids) > k]
        base, plain = sweep_plain(tiny_llama, _appended(tokenizer, [texts[i] for i in idx], k), "path",
                                  [cc.Component.mlp(l) for l in range(tiny_llama.cfg.n_layers)])
        for c, (_, _, prob) in plain.items():
            per_pair[c.layer, idx] += prob.log()
        base_sum[idx] += base.prob.log()
    expected = (per_pair - base_sum).mean(-1)
    torch.testing.assert_close(whole.scores(m).mlps, expected, atol=2e-4, rtol=0)
    assert expected.abs().max() > 1e-2  # the patches move the whole answer
    # At one position the metric is the answer token's log-probability change.
    one = sweep_answer(tiny_llama, pairs[:4], "path", 1, progress=False)
    torch.testing.assert_close(one.scores(m).mlps, (one.mlp_prob.log() - one.baseline.prob.log()).mean(-1))


# --- identify and the command line -----------------------------------------------------------------------------------


def test_identify_at_position_0_is_todays_result(tiny_llama, tokenizer):
    pairs = _pairs(tokenizer)
    config = IdentifyConfig(model=str(tiny_dir("llama")), bootstrap=0)
    today = identify(tiny_llama, pairs, config, progress=False, warn=False)
    assert config.answer_position == "0" and today.pairs == pairs
    assert torch.equal(today.sweep.heads.logit, sweep(tiny_llama, pairs, "path", progress=False).heads.logit)
    assert torch.equal(today.sweep.baseline.answer, torch.tensor([p.answer_token_id for p in pairs]))


def _write(tmp_path, texts):
    path = tmp_path / "pairs.jsonl"
    path.write_text("".join(json.dumps({"prompt": p, "counterfactual": c, "answer": a}) + "\n" for p, c, a in texts))
    return path


def test_cli_identify_at_the_second_answer_token_and_the_whole_answer(tmp_path, tokenizer, capsys):
    path = _write(tmp_path, TEXTS)
    flags = ["--model", str(tiny_dir("llama")), "--pairs-file", str(path), "--no-filter-correct", "--few-shot", "off",
             "--no-progress", "--bootstrap", "0"]
    assert cli_main(["identify", *flags, "--answer-position", "1", "--out", str(tmp_path / "one")]) == 0
    r = load_result(tmp_path / "one")
    assert r.config.answer_position == "1" and "4 pairs (answer token 1, at END + 1)" in capsys.readouterr().out
    batch = _appended(tokenizer, TEXTS, 1)
    assert [list(p.reference_token_ids) for p in r.pairs] == [batch.reference[i, : int(batch.end[i]) + 1].tolist()
                                                             for i in range(len(TEXTS))]
    assert r.sweep.baseline.answer.tolist() == batch.answer.tolist()
    assert cli_main(["identify", *flags, "--answer-position", "whole", "--key-rule", "top3:answer_logprob",
                     "--out", str(tmp_path / "whole")]) == 0
    w = load_result(tmp_path / "whole")
    assert w.config.answer_position == "whole" and [p.reference for p in w.pairs] == [t[0] for t in TEXTS]
    assert len(w.key_heads()) == 3 and not torch.isnan(w.sweep.head_prob).any()


def test_cli_refusals_are_one_line_before_the_model_loads(tmp_path, capsys):
    path = _write(tmp_path, [*TEXTS, ("3 + 4 = ", "3 @ 4 = ", "7")])
    assert cli_main(["identify", "--model", "no-such-model", "--answer-position", "1", "--out", str(tmp_path / "t")]) == 2
    err = capsys.readouterr().err
    assert "--answer-position 1: the task's templates give one-token answers only" in err and "Cannot load" not in err
    assert cli_main(["identify", "--answer-position", "next", "--out", str(tmp_path / "u")]) == 2
    assert "--answer-position 'next': accepted: 0..63" in capsys.readouterr().err
    assert cli_main(["identify", "--model", str(tiny_dir("llama")), "--pairs-file", str(path), "--no-filter-correct",
                     "--few-shot", "off", "--no-progress", "--answer-position", "1", "--out", str(tmp_path / "v")]) == 2
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if "weights" not in line and "shards" not in line and line.strip()]
    assert len(lines) == 1 and "--answer-position 1: pair 5" in lines[0]


def test_a_pairs_file_scores_every_answer_token_teacher_forced(tiny_llama, tokenizer, tmp_path):
    """A pair is answered when the top token is the answer's at every answer position (the earlier ones written),
    its answer probability the product over positions; a one-token answer is scored at END as before."""
    from circuits.data.pairs import read_pairs_file

    texts = [*TEXTS, ("3 + 4 = ", "3 @ 4 = ", "7")]
    got = read_pairs_file(tiny_llama, _write(tmp_path, texts))
    hits, probs = [], []
    for prompt, _, ans in texts:
        full, n = encode(tokenizer, prompt + ans), len(encode(tokenizer, prompt))
        p = tiny_llama(torch.tensor([full]))[0].float().softmax(-1)
        hits.append(all(int(p[j - 1].argmax()) == full[j] for j in range(n, len(full))))
        probs.append(float(torch.stack([p[j - 1, full[j]] for j in range(n, len(full))]).prod()))
    assert got.accuracy == pytest.approx(sum(hits) / len(hits))
    assert got.mean_answer_prob == pytest.approx(sum(probs) / len(probs), rel=1e-4)
    assert len(got.pairs) == len(texts)  # --no-filter-correct: every pair kept


# --- the per-position engine (circuits positions) ------------------------------------------------------------------


def test_the_positions_job_at_answer_position_1_equals_the_plain_loop(tiny_llama, tokenizer, tmp_path):
    """``circuits positions --answer-position 1``: offsets count back from END + 1 (offset 1 is the forced first answer
    token), and each node equals one ``run_with_hooks`` patching it there on the prompts with that token appended."""
    from circuits.beyond.positions.config import PositionConfig
    from circuits.beyond.positions.job import run
    from circuits.patching.engines.plain import cf_answer_plain, patch_at_plain

    config = PositionConfig(model=str(tiny_dir("llama")), pairs_file=str(_write(tmp_path, TEXTS)), filter_correct=False,
                            few_shot="off", answer_position="1")
    result = run(config, tmp_path / "positions", model=tiny_llama, progress=False)
    assert load_result(tmp_path / "positions").config.answer_position == "1"
    batch = _appended(tokenizer, TEXTS, 1)
    cf_answer = cf_answer_plain(tiny_llama, batch)
    worst = 0.0
    for s, k in [(cc.Component("head", 1, 2), 0), (cc.Component("head", 0, 1), 1), (cc.Component.mlp(0), 1),
                 (cc.Component.mlp(1), 0), (cc.Component("head", 1, 0), 3)]:
        plain = patch_at_plain(tiny_llama, batch, s, k, cf_answer)
        view = result.sweep.heads.index((s.layer, s.head, k)) if s.kind == "head" else result.sweep.mlps.index((s.layer, k))
        for r in ("logit", "logit_diff", "prob"):
            worst = max(worst, (getattr(view, r) - plain[r]).abs().max().item())
        assert (view.logit - result.sweep.baseline.logit).abs().max() > 1e-3 or k == 3  # the patch moves the answer
    assert worst < 1e-4


def test_the_positions_job_refuses_whole_and_the_templates_at_a_later_position():
    from circuits.beyond.positions.config import PositionConfig

    with pytest.raises(ValueError, match="--answer-position whole: the per-position sweep reads one answer token"):
        PositionConfig(answer_position="whole", pairs_file="x.jsonl")
    with pytest.raises(ValueError, match="--answer-position 1: the task's templates give one-token answers only"):
        PositionConfig(answer_position="1")


# --- faithfulness ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("positions", ["end", "all"])
def test_faithfulness_at_answer_position_1_equals_the_plain_loop(tiny_llama, tokenizer, tmp_path, positions):
    """``circuits faithfulness --answer-position 1``: each circuit of the ranking (found at END + 1) scored as one
    ``run_with_hooks`` that ablates the rest on the prompts with the first answer token appended by hand."""
    from circuits.beyond.faithfulness.config import FaithfulnessConfig
    from circuits.beyond.faithfulness.job import run
    from circuits.patching.circuit_curves.curve import metric_of
    from circuits.patching.core.ranking import order
    from circuits.patching.engines.plain import ablate_plain, ablation_values_plain, cf_answer_plain

    sizes = (0.2, 0.4, 0.6, 1.0)  # 3, 6, 9 and 16 of the 16 nodes (the input, 12 heads, 3 MLPs), MIB's int(s * n)
    config = FaithfulnessConfig(model=str(tiny_dir("llama")), pairs_file=str(_write(tmp_path, TEXTS)),
                                filter_correct=False, few_shot="off", held_out=False, rankings=("exact-path",),
                                edges=False, positions=(positions,), sizes=sizes, n_boot=0, answer_position="1",
                                second_logit="top")  # the operator counterfactual has no label
    result = run(config, tmp_path / "faithfulness", model=tiny_llama, progress=False)
    curve = result.curves["exact-path"][f"nodes@{positions}"]
    batch = _appended(tokenizer, TEXTS, 1)
    scores = result.scores["exact-path"]
    # the ranking itself: the END sweep's logit_diff effects at END + 1, as the plain loop gives them
    base, reference = sweep_plain(tiny_llama, batch, "path", [cc.Component("head", 1, 2), cc.Component.mlp(2)])
    effect = {c: float((v[1] - base.logit_diff).mean()) for c, v in reference.items()}
    assert abs(float(scores["heads"][1, 2])) == pytest.approx(abs(effect[cc.Component("head", 1, 2)]), abs=1e-4)
    assert abs(float(scores["mlps"][2])) == pytest.approx(abs(effect[cc.Component.mlp(2)]), abs=1e-4)
    cf_answer = cf_answer_plain(tiny_llama, batch)
    values = ablation_values_plain(tiny_llama, batch, "counterfactual")
    L, H = tiny_llama.cfg.n_layers, tiny_llama.cfg.n_heads
    # MIB's node graph (issue 43): the input node first, scored by the ranking's own path patching at END + 1
    nodes = [("input", None)] + [("head", (l, h)) for l in range(L) for h in range(H)] + [("mlp", l) for l in range(L)]
    flat = torch.cat([scores["input"].reshape(1), scores["heads"].flatten(), scores["mlps"]])
    for i, size in enumerate(sizes):
        kept = {nodes[j] for j in order(flat, +1)[: int(size * len(nodes))].tolist()}
        hs = [x for kind, x in nodes if kind == "head" and (kind, x) not in kept]
        ms = [x for kind, x in nodes if kind == "mlp" and (kind, x) not in kept]
        logits = ablate_plain(tiny_llama, batch, hs, ms, {}, values, positions, input=("input", None) not in kept)
        torch.testing.assert_close(curve.m[i], metric_of(logits, batch.answer, cf_answer, "logit_diff"), atol=1e-5,
                                   rtol=0)
    assert (curve.m_full - curve.m_empty).abs().max() > 1e-2  # ablating everything moves the answer


def test_faithfulness_refusals_at_answer_positions():
    from circuits.beyond.faithfulness.config import FaithfulnessConfig

    with pytest.raises(ValueError, match="--answer-position whole: a faithfulness curve reads one answer token"):
        FaithfulnessConfig(answer_position="whole", pairs_file="x.jsonl")
    with pytest.raises(ValueError, match="--answer-position 2: the task's templates give one-token answers only"):
        FaithfulnessConfig(answer_position="2")
    with pytest.raises(ValueError, match="--metric answer_logprob: faithfulness reads"):
        FaithfulnessConfig(metric="answer_logprob")
    with pytest.raises(ValueError, match="--answer-position 1 with --second-logit label: the counterfactual's label"):
        FaithfulnessConfig(answer_position="1", pairs_file="x.jsonl")


def test_faithfulness_held_out_from_a_pairs_file_scores_the_later_lines_forced(tiny_llama, tokenizer, tmp_path):
    from circuits.beyond.faithfulness.config import FaithfulnessConfig
    from circuits.beyond.faithfulness.job import run

    texts = [*TEXTS, ("5 + 8 = ", "5 @ 8 = ", "13"), ("9 + 3 = ", "9 @ 3 = ", "12"), ("7 + 7 = ", "7 @ 7 = ", "14"),
             ("6 + 9 = ", "6 @ 9 = ", "15")]
    config = FaithfulnessConfig(model=str(tiny_dir("llama")), pairs_file=str(_write(tmp_path, texts)), n_pairs=4,
                                filter_correct=False, few_shot="off", rankings=("exact-path",), edges=False,
                                positions=("end",), sizes=(0.5, 1.0), n_boot=0, answer_position="1",
                                second_logit="top")
    result = run(config, tmp_path / "faithfulness", model=tiny_llama, progress=False)
    assert [p.reference for p in result.pairs] == [p + a[0] for p, _, a in texts[:4]]
    assert [p.reference for p in result.scoring_pairs] == [p + a[0] for p, _, a in texts[4:]]
    assert [p.answer for p in result.scoring_pairs] == [a[1] for *_, a in texts[4:]]


# --- the screen, numbers and heuristics --------------------------------------------------------------------------------


def test_the_screen_at_answer_position_1_equals_plain_gradients_and_the_plain_loop(tiny_llama, tokenizer, tmp_path):
    """``circuits screen --answer-position 1``: each MLP's attribution estimate at END + 1 equals the gradient of the
    logit difference times the counterfactual's change of the MLP's output there, from one forward and backward pass
    per pair on the prompts with the first answer token appended by hand; the audit's exact END effects equal one
    ``run_with_hooks`` per component on them."""
    from circuits.beyond.screen.config import ScreenConfig
    from circuits.beyond.screen.job import run
    from circuits.models.backend import act_name

    config = ScreenConfig(model=str(tiny_dir("llama")), pairs_file=str(_write(tmp_path, TEXTS)), filter_correct=False,
                          few_shot="off", metric="logit_diff", verify=3, answer_position="1")
    result = run(config, tmp_path / "screen", model=tiny_llama, progress=False)
    assert load_result(tmp_path / "screen").config.answer_position == "1"
    batch = _appended(tokenizer, TEXTS, 1)
    model, L = tiny_llama, tiny_llama.cfg.n_layers
    estimate = torch.zeros(L, len(TEXTS))
    for i in range(len(TEXTS)):
        end = int(batch.end[i])
        ref, cf = batch.reference[i: i + 1, : end + 1], batch.counterfactual[i: i + 1, : end + 1]
        cf_logits, cf_cache = model.run_with_cache(cf)
        second = int(cf_logits[0, end].argmax())
        for l in range(L):  # one MLP made a leaf at a time (a detached later one would cut the paths through it)
            name, outs = act_name("mlp_out", l), {}

            def keep(act, hook):  # the MLP's output as a leaf: its gradient is the metric's through everything after
                outs["leaf"] = act.detach().requires_grad_(True)
                return outs["leaf"]

            with torch.enable_grad():
                logits = model.run_with_hooks(ref, fwd_hooks=[(name, keep)])
                (logits[0, end, int(batch.answer[i])] - logits[0, end, second]).backward()
            leaf = outs["leaf"]
            estimate[l, i] = leaf.grad[0, end] @ (cf_cache[name][0, end] - leaf[0, end]).detach()
    torch.testing.assert_close(result.mlp_effects[:, 0], estimate.mean(1), atol=1e-4, rtol=1e-4)
    base, plain = sweep_plain(model, batch, "activation", all_components(model))
    for c, (_, logit_diff, _) in plain.items():
        exact = result.exact_end["heads"][c.layer, c.head] if c.kind == "head" else result.exact_end["mlps"][c.layer]
        assert float(exact) == pytest.approx(float((logit_diff - base.logit_diff).mean()), abs=1e-4)
    at_end = run(config.replace(answer_position="0"), tmp_path / "screen0", model=model, progress=False)
    assert not torch.allclose(at_end.mlp_effects[:, 0], result.mlp_effects[:, 0], atol=1e-3)  # another token is read


def test_the_screen_refuses_whole_and_the_templates_at_a_later_position(tiny_llama, tokenizer, tmp_path):
    from circuits.beyond.screen.config import ScreenConfig
    from circuits.beyond.screen.job import screen

    with pytest.raises(ValueError, match="--answer-position whole: the screen estimates one answer token"):
        ScreenConfig(answer_position="whole", pairs_file="x.jsonl")
    with pytest.raises(ValueError, match="--answer-position 1: the task's templates give one-token answers only"):
        ScreenConfig(answer_position="1")
    with pytest.raises(ValueError, match=r"--answer-position 2: pair 1 .* answer of 2 tokens"):
        screen(tiny_llama, _pairs(tokenizer), answer_position="2", pairs_file="x.jsonl", progress=False)


def _appended_pairs(tokenizer, texts, k):
    """The pairs read at answer token ``k`` built from :func:`_appended`'s token rows (the tokenizer alone): each
    prompt's tokens with the answer's first ``k`` appended, the answer the next token."""
    from dataclasses import replace

    batch = _appended(tokenizer, texts, k)
    out = []
    for i, p in enumerate(_pairs(tokenizer, texts)):
        n = int(batch.end[i]) + 1
        out.append(replace(p, reference=texts[i][0] + texts[i][2][:k], counterfactual=texts[i][1] + texts[i][2][:k],
                           answer=texts[i][2][k:], answer_token_id=int(batch.answer[i]), answer_token_ids=(),
                           reference_token_ids=tuple(batch.reference[i, :n].tolist()),
                           counterfactual_token_ids=tuple(batch.counterfactual[i, :n].tolist())))
    return out


def test_numbers_at_answer_position_1_reads_the_appended_prompts(tiny_llama, tokenizer, tmp_path):
    """``circuits numbers --answer-position 1``: the identify run, the key components' direct effects on the number
    line and the digit part's neuron ranking are those of the prompts with the first answer token appended by hand
    (the same engines on them: one forward with that token appended); ``whole`` is refused in one line."""
    from circuits.explain.fourier import number_spectra
    from circuits.explain.numbers.config import NumbersConfig
    from circuits.explain.numbers.job import run
    from circuits.patching.engines.neuron_sweep import sweep_neurons

    config = NumbersConfig(model=str(tiny_dir("llama")), pairs_file=str(_write(tmp_path, TEXTS)), filter_correct=False,
                           few_shot="off", answer_position="1", n_heads=2, n_mlps=2, numbers=10, digit_floor=0.0,
                           digit_mlps=1, top_neurons=3, n_problems=4, metric="logit_diff")
    result = run(config, tmp_path / "numbers", model=tiny_llama, progress=False)
    assert load_result(tmp_path / "numbers").config.answer_position == "1"
    hand = _appended_pairs(tokenizer, TEXTS, 1)
    made = identify(tiny_llama, hand, config=IdentifyConfig(model="tiny", mode=config.mode), progress=False)
    components = [cc.Component.of(h) for h in made.top_heads(2)] + made.scores(None).top(2, "mlps", first=made.key_rule)
    assert [str(c) for c in result.spectra.components] == [str(c) for c in components]
    plain = number_spectra(tiny_llama, hand, components, 10)
    torch.testing.assert_close(result.spectra.effects, plain.effects, atol=1e-5, rtol=1e-5)
    layer = made.scores(None).top(1, "mlps", first=made.key_rule)[0].layer
    e = sweep_neurons(tiny_llama, hand, config.mode, layers=[layer], prob=False).scores("logit_diff").by_layer()[layer]
    top = sorted(range(len(e)), key=lambda i: (float(e[i]), i))[:3]  # logit_diff: a drop is important
    assert [(n.layer, n.index) for n in result.neurons] == [(layer, i) for i in top]
    assert result.neuron_effects == pytest.approx([float(e[i]) for i in top], abs=1e-5)
    at_end = number_spectra(tiny_llama, _pairs(tokenizer), components, 10)
    assert not torch.allclose(at_end.effects, plain.effects, atol=1e-3)  # another token is read
    with pytest.raises(ValueError, match="--answer-position whole: circuits numbers reads one answer token"):
        NumbersConfig(answer_position="whole", pairs_file="x.jsonl")


def test_heuristics_at_answer_position_1_equal_the_appended_prompts(tiny_llama, tokenizer, tmp_path):
    """``circuits heuristics --answer-position 1``: the neurons ranked by the neuron sweep on the prompts with the
    first answer token appended by hand, the grid the two-digit sums only, each neuron's activation there one
    ``run_with_cache`` on the grid prompt with its first answer token appended, and the classes the classifier's on
    those activations."""
    from circuits.beyond.heuristics.config import HeuristicsConfig
    from circuits.beyond.heuristics.job import run
    from circuits.data.grid import grid_at_answer_position, operand_grid
    from circuits.explain.heuristics.rules import classify
    from circuits.models.backend import act_name
    from circuits.patching.engines.neuron_sweep import sweep_neurons

    config = HeuristicsConfig(model=str(tiny_dir("llama")), pairs_file=str(_write(tmp_path, TEXTS)),
                              filter_correct=False, few_shot="off", answer_position="1", layers=(1, 2),
                              neurons_per_mlp=3, null_neurons=2, knockout_classes=1, threshold=0.3, alpha=1.0,
                              n_random=2, n_boot=20, metric="logit_diff")
    result = run(config, tmp_path / "heuristics", model=tiny_llama, progress=False)
    back = load_result(tmp_path / "heuristics")
    assert back.config.answer_position == "1" and back == result
    e = sweep_neurons(tiny_llama, _appended_pairs(tokenizer, TEXTS, 1), config.mode, layers=[1, 2],
                      prob=False).scores("logit_diff").by_layer()
    top = [(l, i) for l in (1, 2) for i in sorted(range(len(e[l])), key=lambda i: (float(e[l][i]), i))[:3]]
    assert [(n.layer, n.index) for n in result.neurons] == top
    grid = operand_grid(tokenizer, "addition", 0, 9, few_shot=False)
    kept = [p for p in grid.prompts if p.operands[2] >= 10]
    assert len(result.grid_prompts) == len(kept) == 45
    plain = torch.zeros(len(top), len(kept))
    for j, p in enumerate(kept):
        full = encode(tokenizer, p.reference + p.answer)
        n = len(p.reference_token_ids)
        assert list(result.grid_prompts[j].reference_token_ids) == full[: n + 1]
        assert result.grid_prompts[j].answer_token_id == full[n + 1]  # the units digit
        _, cache = tiny_llama.run_with_cache(torch.tensor([full[: n + 1]]))
        for i, (l, ix) in enumerate(top):
            plain[i, j] = cache[act_name("post", l)][0, -1, ix]
    torch.testing.assert_close(result.activations, plain, atol=1e-5, rtol=1e-5)
    a = torch.tensor([p.operands[0] for p in kept])
    b = torch.tensor([p.operands[1] for p in kept])
    fitted = classify(plain, a, b, a + b, threshold=0.3, alpha=1.0)
    assert [c["classes"] for c in result.classes] == [f.classes for f in fitted]
    assert grid_at_answer_position(grid, 0, tokenizer) is grid
    with pytest.raises(ValueError, match="--answer-position 2: no cell of the operand grid 0..9"):
        grid_at_answer_position(grid, 2, tokenizer)


def test_heuristics_refusals_at_answer_positions():
    from circuits.beyond.heuristics.config import HeuristicsConfig

    with pytest.raises(ValueError, match="--answer-position whole: the heuristics read neurons at one answer token"):
        HeuristicsConfig(answer_position="whole", pairs_file="x.jsonl")
    with pytest.raises(ValueError, match="--answer-position 1 with --neurons-from"):
        HeuristicsConfig(answer_position="1", pairs_file="x.jsonl", neurons_from="n")
    with pytest.raises(ValueError, match="--answer-position 1: the task's templates give one-token answers only"):
        HeuristicsConfig(answer_position="1")
