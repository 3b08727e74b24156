"""The attribution screen: equal to plain attribution patching on full prompts (the TransformerLens demo's way),
AtP*'s QK fix equal to recomputing the pattern by brute force, GradDrop equal to its plain backward passes, and the
verify/audit step agreeing with the exact engines."""

import pytest
import torch
from helpers import mixed_pairs
from transformer_lens.utils import get_act_name

from circuits.data.pairs import PairBatch
from circuits.patching import logits_metric, sweep
from circuits.patching.engines.attribution import attribute
from circuits.patching.core.metrics import get_metric
from circuits.patching.engines.plain import attribute_plain
from circuits.beyond.screen.config import ScreenConfig
from circuits.beyond.screen.result import ScreenResult, audit_table
from circuits.beyond.screen.job import screen


def _assert_matches_plain(a, plain, batch, tol=1e-5):
    for i in range(len(batch)):
        e = int(batch.end[i])
        for k in range(e + 1):
            torch.testing.assert_close(a.head[:, :, k, i], plain["head"][:, i, e - k], atol=tol, rtol=0)
            torch.testing.assert_close(a.mlp[:, k, i], plain["mlp"][:, i, e - k], atol=tol, rtol=0)
            if k < a.neuron.shape[2]:
                torch.testing.assert_close(a.neuron[:, :, k, i], plain["neuron"][:, i, e - k], atol=tol, rtol=0)
            else:  # every later offset lies before the first difference: exactly 0
                assert plain["neuron"][:, i, e - k].abs().max() < tol


@pytest.mark.parametrize("mode", ["activation", "path"])
@pytest.mark.parametrize("metric", ["logit_diff", "fraction", "prob"])
def test_equals_plain_attribution_patching(tiny_llama, tokenizer, mode, metric):
    batch = PairBatch.from_pairs(mixed_pairs(tokenizer, 5), 0)
    m = get_metric(metric)
    a = attribute(tiny_llama, batch, m, mode=mode, pairs_per_batch=3, progress=False)
    plain = attribute_plain(tiny_llama, batch, m, a.readout, mode)
    _assert_matches_plain(a, plain, batch)
    # Estimates are not all 0 (answer probabilities of a random tiny model are ~1/vocab, so are their changes).
    assert a.head.nan_to_num().abs().max() > (1e-8 if metric == "prob" else 1e-4)
    if mode == "path":  # frozen heads: nothing but END reaches the logits
        assert a.head[:, :, 1:].nan_to_num().abs().max() == 0


def test_custom_metric_gradient(tiny_llama, tokenizer):
    batch = PairBatch.from_pairs(mixed_pairs(tokenizer, 3), 0)
    answer = batch.answer
    metric = logits_metric(lambda logits: logits.log_softmax(-1)[torch.arange(len(answer)), answer], "logprob")
    a = attribute(tiny_llama, batch, metric, neurons=True, qk_fix=False, progress=False)
    _assert_matches_plain(a, attribute_plain(tiny_llama, batch, metric, "logprob"), batch)


@pytest.mark.parametrize("arch", ["mistral", "mistral_window", "gemma3"])
def test_qk_fix_equals_the_recomputed_pattern(family_models, tokenizer, arch):
    """AtP* eq. 7-10: the pattern with one query (or one key) from the counterfactual run, computed exactly, then
    linear in the pattern: sum (A' - A) * dM/dA. With local layers whose window is shorter than the prompts
    (``mistral_window``; Gemma 3's local layers, with its QK norm), the recomputed row sees only its window."""
    batch = PairBatch.from_pairs(mixed_pairs(tokenizer, 2, seed=3), 0)
    model = family_models(arch)
    a = attribute(model, batch, "logit_diff", progress=False)
    plain = attribute_plain(model, batch, get_metric("logit_diff"), "logit_diff")
    _, ref = model.run_with_cache(batch.reference)
    _, cf = model.run_with_cache(batch.counterfactual)
    group = model.cfg.n_heads // model.cfg.n_key_value_heads
    checked = 0
    for i in range(len(batch)):
        e, first = int(batch.end[i]), int(a.first_diff[i])
        for layer, head in ((0, 1), (1, 3), (2, 2)):
            for t in (first, e):
                for chan, ours in (("q", a.head_q), ("k", a.head_k)):
                    name = f"blocks.{layer}.attn.hook_rot_{chan}"
                    idx = head if chan == "q" else head // group
                    got = {}

                    def patch(act, hook):
                        act = act.clone()
                        act[i, t, idx] = cf[name][i, t, idx]
                        return act

                    model.run_with_hooks(batch.reference, stop_at_layer=layer + 1, fwd_hooks=[
                        (name, patch), (get_act_name("pattern", layer), lambda act, hook: got.__setitem__("A", act))])
                    dA = got["A"][i, head] - ref[get_act_name("pattern", layer)][i, head]
                    expected = float((dA * plain["G"][layer][i, head]).sum())
                    assert float(ours[layer, head, e - t, i]) == pytest.approx(expected, abs=1e-5)
                    checked += 1
    assert checked == 24 and a.head_q.nan_to_num().abs().max() > 1e-5


def test_grad_drop_equals_its_plain_backward_passes(tiny_llama, tokenizer):
    batch = PairBatch.from_pairs(mixed_pairs(tokenizer, 3), 0)
    m = get_metric("logit_diff")
    a = attribute(tiny_llama, batch, m, grad_drop=True, qk_fix=False, progress=False)
    L = tiny_llama.cfg.n_layers
    total = sum(attribute_plain(tiny_llama, batch, m, "logit_diff", drop_layer=l)["mlp"].abs() for l in range(L))
    for k in range(3):
        rows = [total[:, i, int(batch.end[i]) - k] / (L - 1) for i in range(len(batch)) if int(batch.end[i]) >= k]
        torch.testing.assert_close(a.graddrop["mlp"][:, k], torch.stack(rows).mean(0), atol=1e-5, rtol=0)


def test_screen_verifies_with_the_exact_engines_and_saves(tiny_llama, tokenizer, tmp_path):
    pairs = mixed_pairs(tokenizer, 5)
    r = screen(tiny_llama, pairs, ScreenConfig(model="tiny", verify=4, metric="logit_diff"), progress=False)
    exact = sweep(tiny_llama, pairs, "activation", progress=False)
    heads, mlps = exact.scores("logit_diff").parts.values()
    torch.testing.assert_close(r.exact_end["heads"], heads)
    for v in r.verified:
        if v["offset"] == 0 and v["kind"] == "head":
            l, h = map(int, v["sender"].split("."))
            assert v["exact"] == pytest.approx(float(heads[l, h]), abs=1e-5)
    assert {v["kind"] for v in r.verified} >= {"neuron"} and len(r.verified) == 8
    assert -1 <= r.audit["spearman_end"] <= 1 and "exact_top10_missed_at_20" in r.audit
    r.save(tmp_path / "s")
    back = ScreenResult.load(tmp_path / "s")
    assert back.audit["spearman_end"] == r.audit["spearman_end"] and back.verified == r.verified
    torch.testing.assert_close(back.head_effects, r.head_effects, equal_nan=True)


def test_audit_table_counts_misses():
    exact = (torch.tensor([[5.0, 4.0], [3.0, 2.0]]), torch.tensor([1.0, 0.0]))
    screen_ = (torch.tensor([[0.0, 4.0], [3.0, 2.0]]), torch.tensor([1.0, 5.0]))  # head 0.0 underestimated, MLP1 over
    t = audit_table(screen_, exact, sign=1, ns=(1, 2))
    assert t["exact_top10_missed_at_1"] == 5  # the screen's top-1 (MLP1) is no exact top-10 member... of 6 components
    assert t["exact_top5pct_missed_at_1"] == 1 and t["exact_top5pct_missed_at_2"] == 1
    assert t["largest_misses"][0]["component"] == "0.0"
