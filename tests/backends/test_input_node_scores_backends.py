"""The input node (MIB's node graph: the embeddings, ``blocks.0.hook_resid_pre``) scored by every exact ranking as its
own method scores a head (issue 43), on whichever TransformerLens line this environment has (3.9 in ``.venv``, 4.3's
TransformerBridge in ``.venv-tl4``). Each engine's ``input`` part equals a reference written out here, by hand:
one ``run_with_hooks`` per pair with the counterfactual's ``blocks.0.hook_resid_pre`` written at one position
(path patching: every ``hook_z`` frozen at the reference's too), or, for attribution, one backward per pair and the
gradient there times the change. The pairs' END tokens differ, so the END engines' input scores are not 0 (with the
task's own pairs both prompts end in the same token, and patching the input at END changes nothing)."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from helpers import mixed_pairs

from circuits.data.pairs import PairBatch, second_answers
from circuits.models.backend import act_name
from circuits.patching.engines.registry import ENGINES

SITE = "blocks.0.hook_resid_pre"
ARCHS = ("llama", "gemma2", "qwen2")


def _batch(tokenizer, model):
    """Mixed pairs whose counterfactual END token differs from the reference's too."""
    b = PairBatch.from_pairs(mixed_pairs(tokenizer, 3), 0)
    cf = b.counterfactual.clone()
    rows = torch.arange(len(b))
    cf[rows, b.end] = (b.reference[rows, b.end] + 7) % model.cfg.d_vocab
    return dataclasses.replace(b, counterfactual=cf)


def _end_ld(model, tokens, end, answer, cf_answer, hooks=()):
    logits = model.run_with_hooks(tokens, fwd_hooks=list(hooks))[0, end].float()
    return logits[answer] - logits[cf_answer]


@torch.no_grad()
def _by_hand(model, b, offset, path=False):
    """Per pair (pairs whose prompt has ``offset``): logit difference after writing the counterfactual's input at
    ``END - offset``, minus the unpatched one."""
    out = []
    for i in range(len(b)):
        e = int(b.end[i])
        if e < offset:
            continue
        ref, cf = b.reference[i : i + 1, : e + 1], b.counterfactual[i : i + 1, : e + 1]
        cf_logits, cf_cache = model.run_with_cache(cf, names_filter=lambda n: n == SITE)
        cf_answer = int(second_answers(None if b.cf_label is None else b.cf_label[i : i + 1],
                                       cf_logits[:, e].float())[0])
        _, ref_cache = model.run_with_cache(ref, names_filter=lambda n: n.endswith("hook_z"))
        pos = e - offset

        def write(act, hook):
            act = act.clone()
            act[0, pos] = cf_cache[SITE][0, pos]
            return act

        hooks = [(SITE, write)]
        if path:
            hooks += [(act_name("z", l), lambda z, hook: ref_cache[hook.name].clone()) for l in range(model.cfg.n_layers)]
        answer = int(b.answer[i])
        out.append(float(_end_ld(model, ref, e, answer, cf_answer, hooks) - _end_ld(model, ref, e, answer, cf_answer)))
    return torch.tensor(out)


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("name,path", [("exact-path", True), ("exact-activation", False)])
def test_end_engines_score_the_input_as_a_hand_written_patch(family_models, tokenizer, arch, name, path):
    model = family_models(arch)
    b = _batch(tokenizer, model)
    s = ENGINES[name].run(model, b, metric="logit_diff")
    want = _by_hand(model, b, 0, path=path)
    assert s.parts["input"].shape == () and want.abs().max() > 1e-3
    torch.testing.assert_close(s.parts["input"], want.mean(), atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(s.per_pair["input"], want, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("arch", ARCHS)
def test_positions_engine_scores_the_input_at_every_offset(family_models, tokenizer, arch):
    model = family_models(arch)
    b = _batch(tokenizer, model)
    offsets = [0, 1, 3, 5]
    s = ENGINES["positions"].run(model, b, metric="logit_diff", positions="all", offsets=offsets)
    got = s.parts["input"]
    assert got.shape == (int(b.end.max()) + 1,) and torch.isnan(got[2])  # offsets not asked: NaN
    for k in offsets:
        want = _by_hand(model, b, k)
        torch.testing.assert_close(got[k], want.mean(), atol=1e-4, rtol=1e-4)
    assert got[[0, 1, 3, 5]].abs().max() > 1e-3


def _gradient_by_hand(model, b, drop: int | None = None):
    """Per pair ``[pos]``: d(logit difference)/d(input) . (input_cf - input_ref), one backward per pair; ``drop``:
    that layer's attention and MLP outputs pass no gradient (GradDrop)."""
    out = []
    for i in range(len(b)):
        e = int(b.end[i])
        ref, cf = b.reference[i : i + 1, : e + 1], b.counterfactual[i : i + 1, : e + 1]
        with torch.no_grad():
            cf_logits, cf_cache = model.run_with_cache(cf, names_filter=lambda n: n == SITE)
        cf_answer = int(second_answers(None if b.cf_label is None else b.cf_label[i : i + 1],
                                       cf_logits[:, e].float())[0])
        store = {}

        def leaf(act, hook):
            store["x"] = act = act.detach().requires_grad_(True)
            return act

        hooks = [(SITE, leaf)]
        if drop is not None:
            hooks += [(act_name(s, drop), lambda act, hook: act.detach()) for s in ("attn_out", "mlp_out")]
        with torch.enable_grad():
            ld = _end_ld(model, ref, e, int(b.answer[i]), cf_answer, hooks)
            (g,) = torch.autograd.grad(ld, [store["x"]])
        out.append(((cf_cache[SITE] - store["x"].detach()) * g).sum(-1)[0].flip(0).float())  # by offset from END
    return out


@pytest.mark.parametrize("arch", ARCHS)
def test_attribution_engines_score_the_input_as_gradient_times_change(family_models, tokenizer, arch):
    model = family_models(arch)
    b = _batch(tokenizer, model)
    K = int(b.end.max()) + 1
    est = _gradient_by_hand(model, b)
    screen = ENGINES["screen"].run(model, b, metric="logit_diff", positions="all").parts["input"]
    # logit_diff is linear in the estimate: the effect is the estimate's mean over the pairs that have the offset
    want = torch.stack([torch.stack([x[k] for x in est if len(x) > k]).mean() for k in range(K)])
    assert want.abs().max() > 1e-3
    torch.testing.assert_close(screen, want, atol=1e-4, rtol=1e-4)
    L = model.cfg.n_layers
    drops = [_gradient_by_hand(model, b, drop=l) for l in range(L)]
    gd = ENGINES["graddrop"].run(model, b, metric="logit_diff", positions="all").parts["input"]
    per_pair = [sum(d[i].abs() for d in drops) / (L - 1) for i in range(len(b))]  # AtP* eq. 11, as the engine reads it
    want = torch.stack([torch.stack([x[k] for x in per_pair if len(x) > k]).mean() for k in range(K)])
    torch.testing.assert_close(gd, want, atol=1e-4, rtol=1e-4)
