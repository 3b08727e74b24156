"""Custom metrics that get the batch's answer ids (issue 21 item 7), and sweeps that reuse prepared runs."""

import pytest
import torch
from torch import Tensor
from helpers import mixed_pairs

from circuits.data.pairs import PairBatch
from circuits.patching import logits_metric, prepare, sweep, sweep_neurons, sweep_positions
from circuits.patching.engines import end_sweep as engine
from circuits.types import Neuron, as_components


def answer_logit(logits, answers):
    return logits[torch.arange(len(answers), device=logits.device), answers]


def answer_minus_cf(logits, answers, cf_answers):
    rows = torch.arange(len(answers), device=logits.device)
    return logits[rows, answers] - logits[rows, cf_answers]


def _close(a, b, atol=1e-4):
    torch.testing.assert_close(a, b, atol=atol, rtol=0, equal_nan=True)


@pytest.mark.parametrize("mode", ["path", "activation"])
def test_answers_metric_equals_builtin_logit_on_every_head_and_mlp(tiny_llama, tokenizer, mode):
    batch = PairBatch.from_pairs(mixed_pairs(tokenizer, 6), 0)
    ans = logits_metric(answer_logit, "ans", sign=1)
    diff = logits_metric(answer_minus_cf, "diff")
    result = sweep(tiny_llama, batch, mode, metrics=[ans, diff], progress=False)
    heads, mlps = result.custom["ans"]
    _close(heads, result.head_logit)
    _close(mlps, result.mlp_logit)
    _close(result.baseline.custom["ans"], result.baseline.logit)
    heads, mlps = result.custom["diff"]  # the third argument: the counterfactual run's top tokens, logit_diff's
    _close(heads, result.head_logit_diff)
    _close(mlps, result.mlp_logit_diff)
    # The patches move the logit, so equality is not that of two constants.
    assert (result.head_logit - result.baseline.logit).abs().max() > 1e-2
    # The effect is the change of the patched answer logit, as the built-in readout gives it.
    _close(result.scores("ans").heads, (result.head_logit - result.baseline.logit[None, None]).mean(-1))


def test_answers_metric_on_the_neuron_and_position_engines(tiny_llama, tokenizer):
    batch = PairBatch.from_pairs(mixed_pairs(tokenizer, 5), 0)
    ans = logits_metric(answer_logit, "ans", sign=1)
    neurons = [Neuron(0, 1), Neuron(1, 3), Neuron(1, 7)]
    ns = sweep_neurons(tiny_llama, batch, neurons=neurons, metrics=[ans], progress=False)
    _close(ns.readouts.custom["ans"], ns.readouts.logit)
    # Pairs in chunks of 2: each chunk's metric call gets that chunk's answers, in its order.
    ps = sweep_positions(tiny_llama, batch, offsets=[0, 1, 3], metrics=[ans], pairs_per_chunk=2, progress=False)
    for view in (ps.heads, ps.mlps):
        _close(view.custom["ans"], view.logit)
        assert not view.logit[..., 0, :].isnan().any()


def test_one_argument_metric_still_works_and_bad_signatures_are_refused(tiny_llama, tokenizer):
    batch = PairBatch.from_pairs(mixed_pairs(tokenizer, 4), 0)
    top = batch.answer.clone()
    old = logits_metric(lambda logits: logits[torch.arange(len(top)), top], "old", sign=1)
    new = logits_metric(answer_logit, "new", sign=1)
    result = sweep(tiny_llama, batch, metrics=[old, new], progress=False)
    _close(result.custom["old"][0], result.custom["new"][0], atol=0)
    assert (old.logits_args, new.logits_args) == (1, 2)
    assert logits_metric(lambda logits, answers, k=3: logits[:, 0], "d").logits_args == 2
    assert logits_metric(lambda *a: a[0][:, 0], "v").logits_args == 3
    with pytest.raises(ValueError, match="accepted: fn\\(logits\\), fn\\(logits, answers\\)"):
        logits_metric(lambda a, b, c, d: a, "four")
    with pytest.raises(ValueError, match="accepted"):
        logits_metric(lambda: 0, "none")


@pytest.mark.parametrize("mode", ["path", "activation"])
def test_sweep_with_prepared_runs_equals_one_without_exactly(tiny_llama, tokenizer, mode, monkeypatch):
    monkeypatch.setattr(engine, "PAIR_BLOCK", 3)  # several pair blocks, each with its own runs
    batch = PairBatch.from_pairs(mixed_pairs(tokenizer, 7), 0)
    ans = logits_metric(answer_logit, "ans", sign=1)
    comps = ["0.1", "1.2", "MLP0", "MLP1"]
    runs = prepare(tiny_llama, batch, mode)
    assert len(runs.blocks) == 3
    for kwargs in ({}, {"metrics": [ans]}, {"prob": lambda r: as_components(r.scores("logit_diff").ranked(2, "heads"))}):
        plain = sweep(tiny_llama, batch, mode, components=comps, progress=False, **kwargs)
        reused = sweep(tiny_llama, batch, mode, components=comps, progress=False, runs=runs, **kwargs)
        for a, b in zip(plain.tensors().items(), reused.tensors().items()):
            if isinstance(a[1], Tensor):
                torch.testing.assert_close(a[1], b[1], atol=0, rtol=0, equal_nan=True, msg=a[0])
        for f in ("logit", "logit_diff", "prob", "cf_logit", "answer", "cf_answer"):
            assert torch.equal(getattr(plain.baseline, f), getattr(reused.baseline, f)), f
        for k in plain.baseline.custom:
            assert torch.equal(plain.baseline.custom[k], reused.baseline.custom[k])
        for k in plain.custom:
            for x, y in zip(plain.custom[k], reused.custom[k]):
                torch.testing.assert_close(x, y, atol=0, rtol=0, equal_nan=True)
    # The list of pairs a PairBatch came from is accepted as the same pairs.
    pairs = mixed_pairs(tokenizer, 7)
    _close(sweep(tiny_llama, pairs, mode, components=comps, progress=False, runs=prepare(tiny_llama, pairs, mode)
                 ).head_logit, plain.head_logit, atol=0)


def test_prepared_runs_for_other_pairs_mode_or_model_are_refused(tiny_llama, tiny_mistral, tokenizer):
    batch = PairBatch.from_pairs(mixed_pairs(tokenizer, 4), 0)
    runs = prepare(tiny_llama, batch, "path")
    assert "path patching, 4 pairs" in repr(runs)
    with pytest.raises(ValueError, match="prepared for path patching, not activation"):
        sweep(tiny_llama, batch, "activation", runs=runs, progress=False)
    with pytest.raises(ValueError, match="prepared with another model"):
        sweep(tiny_mistral, batch, "path", runs=runs, progress=False)
    with pytest.raises(ValueError, match="prepared for other pairs"):
        sweep(tiny_llama, batch.select(slice(0, 3)), "path", runs=runs, progress=False)
    other = PairBatch.from_pairs(mixed_pairs(tokenizer, 4, seed=1), 0)
    with pytest.raises(ValueError, match="prepared for other pairs"):
        sweep(tiny_llama, other, "path", runs=runs, progress=False)
    with pytest.raises(ValueError, match="Unknown mode"):
        prepare(tiny_llama, batch, "paths")  # type: ignore[arg-type]
