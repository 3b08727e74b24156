"""The distributed helpers in one process: how a global batch shards, the one-line errors for world sizes that do
not fit the work, pair blocks as work items, layers over devices (two processes: tests/integration/
test_distributed_ranks.py)."""

from __future__ import annotations

import pytest
import torch

import dist_cases as cases
from circuits import distributed as D
from circuits.sft.parallel import shard_of, strategy_for


def test_global_batch_shards():
    batch = list(range(7))
    shards = [shard_of(batch, r, 3) for r in range(3)]
    assert sum(shards, []) == batch and [len(s) for s in shards] == [2, 2, 3]
    assert shard_of([5], 0, 2) == [] and shard_of([5], 1, 2) == [5]


def test_bad_world_sizes(monkeypatch):
    monkeypatch.setattr(D, "world_size", lambda: 3)
    with pytest.raises(ValueError, match=r"global batch \(4\) does not split over 3 processes"):
        strategy_for(cases.sft_config("precise"))
    with pytest.raises(ValueError, match="3 processes but only 2 knockout runs"):
        D.check_enough_work(2, "knockout runs")
    assert D.assign([5.0, 1.0, 1.0, 3.0], 2) == [0, 1, 1, 1]  # longest first onto the least-loaded rank


def test_pair_blocks_are_work_items_and_give_the_same_sweep(tiny_llama, monkeypatch):
    """More pairs than PAIR_BLOCK run in blocks (each a work item's share); the result is the unblocked one, and the
    work items never depend on the number of ranks."""
    from circuits.patching.engines import end_sweep as engine
    from circuits.patching.engines.end_sweep_plain import sweep_plain

    pairs = cases.pairs(tiny_llama)
    whole = engine.sweep(tiny_llama, pairs, "activation", progress=False)
    monkeypatch.setattr(engine, "PAIR_BLOCK", 4)
    comps = engine.all_components(tiny_llama)
    blocks, items = engine.work_items(tiny_llama, len(pairs), comps, 1024)
    assert blocks == [slice(0, 4), slice(4, 6)] and len(items) == 2 * len(comps)  # 15 components < MIN_CHUNKS
    blocked = engine.sweep(tiny_llama, pairs, "activation", progress=False)
    for a, b in zip(whole.tensors().values(), blocked.tensors().values()):
        if isinstance(a, torch.Tensor):
            torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-5)
    from circuits.data.pairs import as_batch

    _, plain = sweep_plain(tiny_llama, as_batch(pairs, tiny_llama), "activation", comps[:3])
    for c, (logit, _, _) in plain.items():
        torch.testing.assert_close(blocked.head_logit[c.layer, c.head], logit, rtol=1e-4, atol=1e-4)


def test_layers_over_devices_follow_transformer_lens():
    """Where each block of a spread model goes (no GPU needed to compute it), and the one-line errors here."""
    from circuits.models.backend import block_devices

    devices = block_devices(32, "cuda:0", 4)
    assert [d.index for d in devices] == [i // 8 for i in range(32)]
    assert [d.index for d in block_devices(30, "cuda:2", 4)][::7] == [2, 2, 3, 4, 5]
    assert set(block_devices(3, "cpu", 1)) == {torch.device("cpu")}
    from helpers import tiny_model

    model = tiny_model("llama")
    assert model.backend.spread(1, "cpu") is model and model.cfg.device == "cpu"
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="spreads a model over GPUs; none is visible"):
            model.backend.spread(2, "cpu")
