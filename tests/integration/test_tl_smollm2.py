"""docs/for-transformerlens-users.md on the embedded SmolLM2: the calls run with their defaults on its tokenizer (digits
0-9 and "=" are single tokens), the direct attributions add up to its logit difference, and noising with pairs is
the activation sweep."""

import pytest
import torch

import circuits as cc


@pytest.fixture(scope="module")
def pairs(smollm2):
    return cc.build_pairs(smollm2, "addition", n_pairs=4, progress=False).pairs


def test_the_transformerlens_page_on_smollm2(smollm2, pairs):
    r = cc.patch(smollm2, pairs, progress=False)
    s = cc.sweep(smollm2, pairs, "activation", progress=False, prob=False)
    clean = r.clean
    # The default metric is the logit difference to the corrupted run's top token: the sweep's logit_diff readout.
    torch.testing.assert_close(r.heads, s.head_logit_diff.mean(-1), atol=1e-3, rtol=1e-4)
    assert clean == pytest.approx(float(s.baseline.logit_diff.mean()), abs=1e-3)
    dla = cc.direct_logit_attribution(smollm2, pairs)
    total = dla.heads.sum((0, 1)) + dla.mlps.sum(0) + dla.embed + dla.biases + dla.unembed_bias
    torch.testing.assert_close(total, dla.logit_diff, atol=2e-3, rtol=1e-4)
    torch.testing.assert_close(dla.logit_diff, s.baseline.logit_diff, atol=2e-3, rtol=1e-4)
    lens = cc.residual_lens(smollm2, pairs)
    assert lens.labels[-1] == "final_post" and (lens.answer_rank[-1] == 0).all()  # the kept pairs are answered
    torch.testing.assert_close(lens.logit_diff[-1], s.baseline.logit_diff, atol=2e-3, rtol=1e-4)
    hc = cc.head_circuits(smollm2, s.scores().key("top2"))
    assert hc.ov.shape == (2, 10, 10) and hc.sources == [str(d) for d in range(10)] and len(hc.figure().data) == 2
