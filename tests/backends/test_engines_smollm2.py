"""The embedded SmolLM2 on whichever backend this environment has: ``load_model("smollm2")`` (on TransformerLens 4
a Bridge booted from the HF folder its GGUF converts to) gives transformers' logits and the toolkit's tokens, and the
END engine's path and activation sweeps on few-shot pairs (shared prefixes) equal the plain loop on a sample of
components."""

from __future__ import annotations

import pytest
import torch

from circuits.data.pairs import PairBatch, build_pairs
from circuits.models import load_hf_reference
from circuits.patching import sweep
from circuits.patching.engines.end_sweep_plain import sweep_plain
from circuits.types import Component


def test_smollm2_logits_equal_transformers(smollm2, tokenizer):
    text = "Question: what is 12 plus 7?\nAnswer: 19\nQuestion: what is 3 plus 4?\nAnswer:"
    ids = torch.tensor([tokenizer(text).input_ids])
    assert smollm2.to_tokens(text).tolist() == ids.tolist()  # no BOS added beyond the tokenizer's own
    hf = load_hf_reference("smollm2")
    with torch.no_grad():
        ours, theirs = smollm2(ids), hf(ids).logits
    assert (ours - theirs).abs().max().item() < 2e-4 * max(1.0, theirs.abs().max().item())
    assert smollm2.cfg.n_layers == 30 and smollm2.backend.n_kv_heads() == 3 and smollm2.cfg.n_heads == 9


@pytest.fixture(scope="module")
def pairs4(smollm2):
    """Four answered addition pairs, built once for both modes (building them runs candidates through the model until
    four are answered; issue 44). The sweeps do not change them."""
    return build_pairs(smollm2, "addition", n_pairs=4, few_shot="on", progress=False).pairs


@pytest.mark.parametrize("mode", ["path", "activation"])
def test_smollm2_sweep_equals_the_plain_loop(smollm2, pairs4, mode):
    batch = PairBatch.from_pairs(pairs4, pad_token_id=0)
    comps = [Component("head", 14, 3), Component("head", 20, 8), Component.mlp(0), Component.mlp(15)]
    result = sweep(smollm2, batch, mode, components=comps, progress=False)
    base, plain = sweep_plain(smollm2, batch, mode, comps)
    for c, (logit, ld, _) in plain.items():
        ours = result.head_logit[c.layer, c.head] if c.kind == "head" else result.mlp_logit[c.layer]
        torch.testing.assert_close(ours, logit, atol=2e-4, rtol=1e-5, msg=str(c))
    torch.testing.assert_close(result.baseline.logit, base.logit, atol=2e-4, rtol=1e-5)
