"""Answers of several tokens on SmolLM2 (issue 42), the pairs of docs/identify.md's measured example: its tokenizer
writes 12 as "1", "2"; the model writes both tokens of these sums; the END sweep at the second answer token equals one
``run_with_hooks`` per component on the prompts with the first answer token appended by hand."""

import torch

from circuits.data.pairs import PairBatch, encode, make_pair
from circuits.patching.engines.end_sweep_answers import sweep_answer
from circuits.patching.engines.end_sweep_plain import sweep_plain
from circuits.types import Component

PREFIX = "2 + 3 = 5\n4 + 8 = 12\n"
TEXTS = [(f"{PREFIX}{a} + {b} = ", f"{PREFIX}{a} + {c} = ", str(a + b)) for a, b, c in ((8, 8, 0), (5, 7, 3), (9, 6, 0))]


def test_the_second_answer_token_on_smollm2(smollm2):
    tok = smollm2.tokenizer
    pairs = [make_pair(tok, *t) for t in TEXTS]
    assert all(len(p.answer_ids) == 2 and tok.decode(list(p.answer_ids[:1])) == "1" for p in pairs)
    n = len(encode(tok, TEXTS[0][0]))
    full = [encode(tok, p + a) for p, _, a in TEXTS]
    batch = PairBatch(torch.tensor([f[: n + 1] for f in full]),
                      torch.tensor([encode(tok, c) + f[n: n + 1] for (_, c, _), f in zip(TEXTS, full)]),
                      torch.full((3,), n), torch.tensor([f[n + 1] for f in full]))
    components = [Component("head", 21, 2), Component("head", 29, 7), Component("head", 14, 8), Component.mlp(22),
                  Component.mlp(24)]
    for mode in ("path", "activation"):
        ours = sweep_answer(smollm2, pairs, mode, 1, components=components, progress=False)
        base, plain = sweep_plain(smollm2, batch, mode, components)
        assert ours.baseline.answer_rank is not None and (ours.baseline.answer_rank == 0).all()  # it writes the digit
        torch.testing.assert_close(ours.baseline.logit, base.logit, atol=2e-3, rtol=1e-4)
        for c, values in plain.items():
            view = ours.heads.index((c.layer, c.head)) if c.kind == "head" else ours.mlps.index((c.layer,))
            for a, b in zip((view.logit, view.logit_diff, view.prob), values):
                torch.testing.assert_close(a, b, atol=2e-3, rtol=1e-4)
    assert (ours.mlp_logit[22] - ours.baseline.logit).abs().max() > 0.1  # MLP22 moves the units digit
