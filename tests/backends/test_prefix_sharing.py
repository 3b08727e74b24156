"""Attribution (the screen), EAP-IG and the per-position engine share each pair's prompt prefix through the
backend's capability (:meth:`~circuits.models.backend.Backend.run_prefixes` and :meth:`~circuits.models.backend.Backend.continue_prefixes`,
or :meth:`~circuits.models.backend.Backend.block_runner` where single blocks run after a cache) on whichever
TransformerLens line this environment has: the prefix route is taken (only the bodies run, fewer tokens than the
prompts) and gives the whole-prompt route's numbers (``prefix_sharing`` off)."""

from __future__ import annotations

import pytest
import torch
from helpers import mixed_pairs

from circuits.data.pairs import PairBatch
from circuits.patching.core.readouts import first_difference
from circuits.types import Component, Neuron

NODES = [(Component("head", 1, 2), 1), (Component.mlp(0), 2), (Neuron(1, 7), 1), (Component("head", 2, 0), 3),
         (Component.mlp(2), 0)]


def _run_all(model, batch, log: list):
    from circuits.patching.engines.attribution import attribute
    from circuits.patching.engines.eap_ig import eap_ig
    from circuits.patching.engines.position_sweep import sweep_positions

    out = {"atp": attribute(model, batch, "logit_diff", pairs_per_batch=3, progress=False),
           "eap": eap_ig(model, batch, "logit_diff", steps=2, pairs_per_batch=3, progress=False)}
    n = len(log)
    out["pos"] = sweep_positions(model, batch, nodes=NODES, progress=False)
    out["pos_calls"] = log[n:]
    if not model.backend.post_norms():
        out["edge"] = eap_ig(model, batch, "logit_diff", steps=2, level="edge", pairs_per_batch=3, progress=False)
    return out


@pytest.mark.parametrize("arch", ["llama", "qwen3", "gemma3"])
def test_engines_share_prefixes_and_equal_whole_prompts(family_models, tokenizer, arch, monkeypatch):
    model = family_models(arch)
    batch = PairBatch.from_pairs(mixed_pairs(tokenizer, 4, seed=1), 0)
    assert (first_difference(batch) > 0).all()  # every pair has a prefix to share
    assert model.backend.prefix_sharing()  # transformers < 5.24 on the Bridge (the TL 4 environment pins it)
    # Both lines' caches hold keys after the QK norm (3.9's block runner applies it to hook_k's keys): the
    # per-position engine shares prefixes on Qwen3 and Gemma 3 too.
    assert model.backend.prefix_kv_hooks(0) is not None
    bodies: list[tuple[bool, int]] = []  # (after a prefix, tokens per row)
    blocks: list[int] = []
    cls = type(model.backend)  # the model's backend class: its methods counted
    cont, runner = cls.continue_prefixes, cls.block_runner

    def counting_continue(self, body, prefix, **kw):
        bodies.append((prefix is not None, body.shape[1]))
        return cont(self, body, prefix, **kw)

    def counting_runner(self, *args):
        run = runner(self, *args)

        def counting(layer, x):
            blocks.append(x.shape[1])
            return run(layer, x)
        return None if run is None else counting

    monkeypatch.setattr(cls, "continue_prefixes", counting_continue)
    monkeypatch.setattr(cls, "block_runner", counting_runner)
    shared = _run_all(model, batch, bodies)
    width = batch.reference.shape[1]
    assert bodies and all(after for after, _ in bodies) and max(n for _, n in bodies) < width
    assert blocks and max(blocks) < width  # positions run suffixes block by block from the sender's layer

    bodies.clear()
    monkeypatch.setattr(cls, "prefix_sharing", lambda self: False)
    whole = _run_all(model, batch, bodies)
    assert bodies and not any(after for after, _ in bodies)

    a, b = shared["atp"], whole["atp"]
    for k in ("head", "mlp", "neuron", "head_q", "head_k"):
        torch.testing.assert_close(getattr(a, k), getattr(b, k), atol=1e-5, rtol=0, equal_nan=True)
    assert a.head.nan_to_num().abs().max() > 1e-4
    for key in ("eap", "edge"):
        if key in shared:
            for k in ("input", "head", "mlp", "edge"):
                x, y = getattr(shared[key], k), getattr(whole[key], k)
                if x is not None:
                    torch.testing.assert_close(x, y, atol=1e-5, rtol=0, equal_nan=True)
    p, q = shared["pos"], whole["pos"]
    for view in ("heads", "mlps", "neurons"):
        for r in ("logit", "logit_diff", "prob"):
            torch.testing.assert_close(getattr(getattr(p, view), r), getattr(getattr(q, view), r), atol=1e-4,
                                       rtol=0, equal_nan=True)
