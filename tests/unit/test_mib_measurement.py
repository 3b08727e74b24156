"""MIB's measurement in the faithfulness job (issue 43): the random counterfactual with its own label as the second
logit of the logit difference, position scores summed, and the job's defaults and records."""

import json
import re

import pytest
import torch

from circuits.cli import main as cli_main
from circuits.data.pair_config import PairConfig
from circuits.data.pairs import PairBatch, build_pairs, encode, second_answers
from circuits.data.templates import OPERATIONS, compute_answer
from helpers import tiny_dir

TINY = ["--model", str(tiny_dir("llama")), "--no-filter-correct", "--few-shot", "on"]


def label_text(pair):
    """The counterfactual's answer as its prompt is continued: written as the reference's answer is (a space inside
    it where the prompt ends without one)."""
    return pair.counterfactual_answer if pair.answer == pair.answer.strip() else " " + pair.counterfactual_answer


@pytest.mark.parametrize("operation", OPERATIONS)
def test_the_random_counterfactual_is_another_problem_with_its_own_label(tiny_llama, tokenizer, operation):
    """--counterfactual random: another problem of the same template (its operands read back from its own text give
    its recorded answer, another number than the reference's); --second-logit label records that answer's token,
    which is what the counterfactual prompt's tokens continue with (a plain tokenization)."""
    ps = build_pairs(tiny_llama, operation, n_pairs=12, filter_correct=False, few_shot="on", counterfactual="random",
                     second_logit="label", progress=False)
    assert len(ps) == 12
    for p in ps:
        question = tokenizer.decode(list(p.counterfactual_token_ids[p.prefix_length:]))
        a, b = (int(x) for x in re.findall(r"\d+", question)[:2])
        assert str(compute_answer(operation, a, b)) == p.counterfactual_answer != p.answer.strip()
        assert p.counterfactual_answer_token_id == encode(tokenizer, p.counterfactual + label_text(p))[-1]
        assert p.counterfactual_answer_token_id != p.answer_token_id
        assert len(p.reference_token_ids) == len(p.counterfactual_token_ids)
    # the same pairs without the label carry none (-1): the counterfactual run's top token is the second logit
    top = build_pairs(tiny_llama, operation, n_pairs=4, filter_correct=False, few_shot="on", counterfactual="random",
                      progress=False)
    assert all(p.counterfactual_answer_token_id == -1 and "counterfactual_answer_token_id" not in p.to_json() for p in top)


def test_the_second_logit_is_the_label_in_every_engine_and_curve(tiny_llama):
    """With labels, logit_diff = logit(answer) - logit(label) on the END logits of a plain forward pass, in the END
    engine's baseline, its plain reference, EAP-IG's baseline and the faithfulness curve's m(N) and m(empty); without
    them, the counterfactual run's top token (as before)."""
    from circuits.patching.circuit_curves import circuit_curve
    from circuits.patching.engines.eap_ig import eap_ig
    from circuits.patching.engines.end_sweep import sweep
    from circuits.patching.engines.end_sweep_plain import baseline_plain

    ps = build_pairs(tiny_llama, "addition", n_pairs=6, filter_correct=False, few_shot="on", counterfactual="random",
                     second_logit="label", progress=False).pairs
    label = torch.tensor([p.counterfactual_answer_token_id for p in ps])
    answer = torch.tensor([p.answer_token_id for p in ps])
    with torch.no_grad():
        ref = torch.stack([tiny_llama(torch.tensor([p.reference_token_ids]))[0, -1] for p in ps]).float()
        cf = torch.stack([tiny_llama(torch.tensor([p.counterfactual_token_ids]))[0, -1] for p in ps]).float()
    rows = torch.arange(len(ps))
    plain_full = ref[rows, answer] - ref[rows, label]
    plain_empty = cf[rows, answer] - cf[rows, label]
    assert not torch.equal(label, cf.argmax(-1))  # the label is not the counterfactual run's top token here

    base = sweep(tiny_llama, ps, "path", progress=False).baseline
    assert torch.equal(base.cf_answer, label)
    assert torch.allclose(base.logit_diff, plain_full, atol=1e-4) and torch.allclose(base.cf_logit_diff, plain_empty, atol=1e-4)
    batch = PairBatch.from_pairs(ps)
    assert torch.equal(batch.cf_label, label) and torch.equal(batch.select(slice(1, 3)).cf_label, label[1:3])
    assert torch.equal(baseline_plain(tiny_llama, batch).cf_answer, label)
    assert torch.equal(eap_ig(tiny_llama, ps, "logit_diff", steps=2, progress=False).baseline.cf_answer, label)
    c = circuit_curve(tiny_llama, ps, torch.rand(tiny_llama.cfg.n_layers, tiny_llama.cfg.n_heads),
                      torch.rand(tiny_llama.cfg.n_layers), sizes=(0.1, 0.5), n_boot=0)
    assert torch.allclose(c.m_full.float(), plain_full, atol=1e-4) and torch.allclose(c.m_empty.float(), plain_empty, atol=1e-4)

    # one pair without a label in the batch: its second token is the counterfactual run's top token
    mixed = torch.tensor([-1, *label[1:].tolist()])
    assert torch.equal(second_answers(mixed, cf), torch.cat([cf[:1].argmax(-1), label[1:]]))
    assert torch.equal(second_answers(None, cf), cf.argmax(-1))


def test_summed_position_scores_are_a_plain_sum():
    """Scores.over_positions("sum"): each component's effects added over offsets (NaN as 0), signed; "max" keeps
    the largest |effect|; a hand-made case where the two orders differ."""
    from circuits.beyond.faithfulness.job import signed_importance
    from circuits.patching.core.scores import Scores

    heads = torch.tensor([[[0.5, -0.4, float("nan")], [0.3, 0.3, 0.3]]])  # [layer 1, head 2, offset 3]
    mlps = torch.tensor([[0.1, -0.2, 0.05]])
    s = Scores({"heads": heads, "mlps": mlps}, "logit", 1, None, offsets=True)  # type: ignore[arg-type]
    summed = s.over_positions("sum")
    plain = [[sum(0.0 if x != x else x for x in head) for head in layer] for layer in heads.tolist()]
    assert torch.allclose(summed.parts["heads"], torch.tensor(plain)) and not summed.offsets
    assert torch.allclose(summed.parts["mlps"], torch.tensor([0.1 - 0.2 + 0.05]))
    assert summed.ranked(1)[0][0].head == 1  # summed: head 1 (0.9) above head 0 (0.1)
    maxed = s.over_positions("max")  # the largest |effect|: head 0 (0.5) above head 1 (0.3)
    assert maxed.ranked(1)[0][0].head == 0 and torch.allclose(maxed.parts["heads"], torch.tensor([[0.5, 0.3]]))
    got = signed_importance(s, "sum")
    assert torch.allclose(got["heads"], torch.tensor(plain)) and torch.allclose(got["mlps"], torch.tensor([-0.05]))
    assert torch.allclose(signed_importance(s, "max")["heads"], torch.tensor([[0.5, 0.3]]))
    assert torch.allclose(signed_importance(s, "max")["mlps"], torch.tensor([-0.2]))
    with pytest.raises(ValueError, match="accepted: max, sum"):
        s.over_positions("mean")


def test_faithfulness_writes_both_curves_and_cpr_is_not_one_minus_cmd(tmp_path):
    """The issue's check: `circuits faithfulness --task addition --pairs 16` (defaults: MIB's measurement) writes the
    absolute and the signed curves, and CPR + CMD differ from 1 for at least one ranking; the result records the
    counterfactual, its label and the position reduction, and what still departs from MIB."""
    from circuits.results import load_result

    out = tmp_path / "f"
    assert cli_main(["faithfulness", *TINY, "--task", "addition", "--pairs", "16", "--n-boot", "20", "--no-progress",
                     "--out", str(out)]) == 0
    r = load_result(out)
    summary = json.loads((out / "summary.json").read_text())
    assert set(summary["curves"]) == set(summary["signed_curves"]) == set(r.config.rankings)
    assert any(abs(row["cpr"] + row["cmd"] - 1) > 1e-3 for row in summary["table"])
    assert (summary["counterfactual"], summary["second_logit"], summary["position_scores"]) == ("random", "label", "sum")
    assert summary["pairs_with_label"] == len(r.scoring_pairs) == 16
    # no default departs (issue 43): EAP-IG's edges scored at every position, MIB's, beside END; the result records it
    assert summary["mib"]["departs"] == {}
    assert json.loads((out / "config.json").read_text())["edge_positions"] == ["end", "all"]
    assert r.config.edge_positions == ("end", "all")
    for curves in (r.curves, r.signed_curves):
        assert [k for k in curves["eap-ig"] if k.startswith("edges@")] == ["edges@end", "edges@all"]
        every = curves["eap-ig"]["edges@all"]
        assert (every.positions, every.level) == ("all", "edge") and every.f.isfinite().all()
    assert {row["setting"] for row in summary["table"] if row["ranking"] == "eap-ig"} >= {"edges@end", "edges@all"}
    assert "input_node" not in summary["mib"]["fixed"]
    # MIB's node graph: the input node ranked and counted by every ranking (each scores it by its own method)
    assert summary["input_node"] is True and summary["input_ranked"] == list(r.config.rankings)
    assert all(p.counterfactual_answer_token_id >= 0 for p in r.pairs + r.scoring_pairs)


def test_the_operator_counterfactual_with_its_label_is_one_clear_line(tmp_path, capsys):
    """The operator counterfactual asks for no number: with the job's default --second-logit label it is refused in
    one line, before the model loads, saying what to give instead."""
    out = tmp_path / "out"
    assert cli_main(["faithfulness", *TINY, "--counterfactual", "operator", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--second-logit label with --counterfactual operator" in err[0]
    assert "--second-logit top" in err[0] and not out.exists()


def test_saved_pairs_without_labels_are_refused_with_the_label(tmp_path):
    """--pairs-from a result whose pairs carry no label, read with --second-logit label: one line naming the folder
    (the second logit would silently be the top token otherwise); with top, their labels are dropped."""
    from circuits.data.source import with_second_logit

    ps = build_pairs(_tiny(), "addition", n_pairs=2, filter_correct=False, few_shot="on", counterfactual="random",
                     second_logit="label", progress=False).pairs
    assert with_second_logit(ps, "label", "x") == ps
    assert all(p.counterfactual_answer_token_id == -1 for p in with_second_logit(ps, "top", "x"))
    with pytest.raises(ValueError, match=r"--pairs-from saved: 2 of its 2 pairs carry no counterfactual label"):
        with_second_logit(with_second_logit(ps, "top", "x"), "label", "saved")
    with pytest.raises(ValueError, match="--second-logit label with --counterfactual operator"):
        PairConfig(counterfactual="operator", second_logit="label")


def test_a_pairs_file_gives_its_label(tmp_path, tokenizer):
    """--pairs-file with --second-logit label: each line's counterfactual_answer is the label (its first token); a
    line without one is one error naming the file and line."""
    from circuits.data.pairs import read_pairs_file

    model = _tiny()
    path = tmp_path / "p.jsonl"
    path.write_text(json.dumps({"prompt": "3 + 4 = ", "counterfactual": "2 + 6 = ", "answer": "7",
                                "counterfactual_answer": "8"}) + "\n")
    ps = read_pairs_file(model, path, label=True)
    assert ps.pairs[0].counterfactual_answer_token_id == encode(tokenizer, "2 + 6 = 8")[-1]
    path.write_text(json.dumps({"prompt": "3 + 4 = ", "counterfactual": "2 + 6 = ", "answer": "7"}) + "\n")
    with pytest.raises(ValueError, match=r"p.jsonl, line 1: --second-logit label needs each line's counterfactual_answer"):
        read_pairs_file(model, path, label=True)


def _tiny():
    from helpers import tiny_model

    return tiny_model("llama")


def test_jobs_other_than_faithfulness_refuse_the_label():
    """Identify's validity checks read the counterfactual run's top token as "the counterfactual keeps the answer":
    --second-logit label is refused there in one line, accepted by faithfulness."""
    from circuits.beyond.faithfulness.config import FaithfulnessConfig
    from circuits.identify.config import IdentifyConfig

    with pytest.raises(ValueError, match="--second-logit label is read by `circuits faithfulness` only"):
        IdentifyConfig(counterfactual="random", second_logit="label")
    assert IdentifyConfig(counterfactual="random").second_logit == "top"
    assert FaithfulnessConfig(counterfactual="operand", second_logit="label").second_logit == "label"
