"""Precise SFT invariants on a tiny GQA model: frozen slices bit-identical, selected slices changed,
H/h rescale, delta round-trip, resume, NaN stop."""

from __future__ import annotations

import json

import pytest
import torch

from circuits import sft as ft
from circuits.data.arithmetic import Example
from circuits.sft import data as sft_data
from circuits.sft import plan as hm
from circuits.sft import train
from circuits.sft.data import tokenize_examples
from circuits.sft.train import SliceOptimizer, batch_schedule, lr_at

HEADS = ((1, 0), (1, 3), (2, 1))  # layer 1: h=2 of H=4 -> scale 2; layer 2: h=1 -> scale 4
D, DH = 64, 16  # the tiny model's d_model and d_head


def tiny_model(seed: int = 0):
    """A fresh tiny GQA model with nonzero Q/K/V/O biases, so bias slices are exercised too."""
    import helpers

    model = helpers.tiny_model("llama")
    torch.manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.split(".")[-1].startswith(("b_", "_b_")):
                p.normal_(0, 0.02)
    return model


def _examples(model, n=12):
    exs = [Example(f"{a} + {b} = ", f"{a + b}\n") for a, b in zip(range(1, n + 1), range(3, n + 3))]
    return tokenize_examples(model.tokenizer, exs, max_length=32)


def _config(**kw):
    base = dict(heads=HEADS, lr=1e-2, batch_size=4, micro_batch_size=2, epochs=1, max_steps=3, warmup_ratio=0.0,
                checkpoint_every=1)
    base.update(kw)
    return ft.FinetuneConfig(**base)


def _snapshot(model):
    return {n: p.detach().clone() for n, p in model.named_parameters()}


def test_plan_gqa_shared_and_never():
    model = tiny_model()
    plan = hm.plan_tuning(model, HEADS, kv_policy="shared")
    rows = {t.name: (t.rows, t.scale) for t in plan.tensors}
    assert rows["blocks.1.attn.W_Q"] == ((0, 3), 2.0)
    assert rows["blocks.1.attn.W_O"] == ((0, 3), 2.0)
    assert rows["blocks.1.attn._W_K"] == ((0, 1), 2.0)  # heads 0 -> kv 0, 3 -> kv 1 (group of 2)
    assert rows["blocks.2.attn._W_V"] == ((0,), 4.0)
    assert "blocks.1.attn.b_O" not in rows
    assert set(plan.side_effect_heads) == {(1, 1), (1, 2), (2, 0)}
    never = hm.plan_tuning(model, HEADS, kv_policy="never")
    assert not any("_W_K" in n or "_W_V" in n for n in never.names)
    with_mlp = hm.plan_tuning(model, HEADS, mlps=[0])
    assert {n for n in with_mlp.names if ".mlp." in n} == {n for n, _ in model.named_parameters() if n.startswith("blocks.0.mlp.")}
    assert with_mlp.lowest_layer() == 0 and plan.lowest_layer() == 1


def test_tuned_parameter_count():
    model = tiny_model()
    plan = hm.plan_tuning(model, [(1, 0)], kv_policy="shared")
    d, dh = D, DH
    # W_Q, b_Q, W_O of one head + _W_K, _b_K, _W_V, _b_V of one kv head
    assert hm.count_tuned_parameters(model, plan) == d * dh + dh + dh * d + 2 * (d * dh + dh)
    assert hm.count_tuned_parameters(model, hm.full_plan(model)) == sum(p.numel() for p in model.parameters())


def test_gradient_mask_rescale_applied_as_stated():
    model = tiny_model()
    plan = hm.plan_tuning(model, HEADS)
    tokens = torch.tensor([model.tokenizer("3 + 4 = 7").input_ids])
    hm.freeze_except(model, plan)
    model(tokens, return_type="loss").backward()
    raw = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    model.zero_grad(set_to_none=True)
    handles = hm.register_gradient_masks(model, plan)
    try:
        model(tokens, return_type="loss").backward()
    finally:
        for h in handles:
            h.remove()
    params = dict(model.named_parameters())
    for entry in plan.tensors:
        g = params[entry.name].grad
        for r in range(g.shape[0]):
            expected = raw[entry.name][r] * entry.scale if r in entry.rows else torch.zeros_like(g[r])
            torch.testing.assert_close(g[r], expected, rtol=1e-6, atol=0)
    assert set(raw) == set(plan.names)  # nothing else got a gradient
    for p in model.parameters():
        p.requires_grad_(True)


def test_frozen_slices_bit_identical_and_selected_changed(tmp_path):
    model = tiny_model()
    before = _snapshot(model)
    config = _config()
    ft.finetune(model, _examples(model), config, tmp_path, progress=False)
    plan = ft.plan_for(model, config)
    tuned = {t.name: t.rows for t in plan.tensors}
    for name, p in model.named_parameters():
        if name not in tuned:
            assert torch.equal(p, before[name]), name
            continue
        for r in range(p.shape[0]):
            if r in tuned[name]:
                assert not torch.equal(p[r], before[name][r]), f"{name}[{r}] did not change"
            else:
                assert torch.equal(p[r], before[name][r]), f"{name}[{r}] frozen row changed"
        assert p.requires_grad  # restored after training


def test_optimizer_state_only_for_tuned_rows():
    model = tiny_model()
    config = _config()
    plan = ft.plan_for(model, config)
    hm.freeze_except(model, plan)
    opt = SliceOptimizer(model, plan, config)
    shapes = [p.shape for g in opt.optimizer.param_groups for p in g["params"]]
    params = dict(model.named_parameters())
    assert shapes == [(len(t.rows),) + params[t.name].shape[1:] for t in plan.tensors]


def test_full_sft_changes_everything_with_same_loop(tmp_path):
    model = tiny_model()
    before = _snapshot(model)
    result = ft.finetune(model, _examples(model), _config(heads=(), full=True, max_steps=2), tmp_path, progress=False)
    assert result.tuned_parameters == result.total_parameters
    changed = [n for n, p in model.named_parameters() if not torch.equal(p, before[n])]
    # embedding rows of unused tokens get weight decay only, so every tensor moves
    assert len(changed) == len(before)


def test_delta_round_trip(tmp_path):
    model = tiny_model()
    ft.finetune(model, _examples(model), _config(mlps=(0,)), tmp_path, progress=False)
    base = tiny_model()
    ft.apply_delta(base, tmp_path / "delta.pt")
    for (n, p), (_, q) in zip(model.named_parameters(), base.named_parameters()):
        assert torch.equal(p, q), n
    delta = torch.load(tmp_path / "delta.pt", weights_only=True)
    assert delta["tensors"]["blocks.1.attn.W_Q"].shape == (2, D, DH)  # only the tuned rows are stored
    result = json.loads((tmp_path / "result.json").read_text())
    assert result["steps"] == 3 and len(result["losses"]) == 3
    assert ft.FinetuneConfig.from_json(json.loads((tmp_path / "config.json").read_text())) == _config(mlps=(0,))
    saved = ft.FinetuneResult.load(tmp_path)
    assert saved.steps == 3 and saved.config.mlps == (0,)


def test_resume_equals_uninterrupted(tmp_path, monkeypatch):
    config = _config(max_steps=4, checkpoint_every=2)
    straight = tiny_model()
    ft.finetune(straight, _examples(straight), config, tmp_path / "a", progress=False)

    interrupted = tiny_model()
    calls = {"n": 0}
    real = train.collate

    def crash_on_step3(batch, pad_id):
        calls["n"] += 1
        if calls["n"] == 5:  # 2 micro-batches per step: call 5 starts step 3
            raise KeyboardInterrupt
        return real(batch, pad_id)

    monkeypatch.setattr(train, "collate", crash_on_step3)
    with pytest.raises(KeyboardInterrupt):
        ft.finetune(interrupted, _examples(interrupted), config, tmp_path / "b", progress=False)
    monkeypatch.setattr(train, "collate", real)
    resumed = tiny_model()
    result = ft.finetune(resumed, _examples(resumed), config, tmp_path / "b", progress=False)
    assert result.resumed_from == 2
    for (n, p), (_, q) in zip(straight.named_parameters(), resumed.named_parameters()):
        assert torch.equal(p, q), n
    with pytest.raises(ValueError, match="another config"):
        ft.finetune(tiny_model(), _examples(resumed), _config(max_steps=4, checkpoint_every=2, lr=1e-3), tmp_path / "b", progress=False)


def test_nan_loss_stops_and_keeps_last_good_checkpoint(tmp_path, monkeypatch):
    model = tiny_model()
    calls = {"n": 0}
    real = train.collate

    def poison_on_step2(batch, pad_id):
        calls["n"] += 1
        if calls["n"] == 3:
            with torch.no_grad():
                model.blocks[0].mlp.W_out[0, 0] = float("nan")  # attention patterns zero out NaNs
        return real(batch, pad_id)

    monkeypatch.setattr(train, "collate", poison_on_step2)
    with pytest.raises(ft.TrainingDiverged, match=r"Loss became nan at step 2.*after step 1"):
        ft.finetune(model, _examples(model), _config(), tmp_path, progress=False)
    ckpt = torch.load(tmp_path / "checkpoint.pt", weights_only=False)
    assert ckpt["step"] == 1
    assert all(torch.isfinite(t).all() for t in ckpt["delta"]["tensors"].values())
    assert not (tmp_path / "delta.pt").exists()


def test_config_validation():
    with pytest.raises(ValueError, match="heads or MLPs"):
        ft.FinetuneConfig()
    with pytest.raises(ValueError, match="multiple"):
        ft.FinetuneConfig(heads=((0, 0),), batch_size=10, micro_batch_size=4)
    with pytest.raises(ValueError, match="kv_policy"):
        ft.FinetuneConfig(heads=((0, 0),), kv_policy="sometimes")
    with pytest.raises(ValueError, match="full=True"):
        ft.FinetuneConfig(heads=((0, 0),), full=True)
    with pytest.raises(ValueError, match="out of range"):
        hm.plan_tuning(tiny_model(), [(5, 0)])


def test_lr_schedule_and_batch_schedule():
    config = ft.FinetuneConfig(heads=((0, 0),), lr=1.0, warmup_ratio=0.1, batch_size=4, micro_batch_size=2, epochs=2)
    assert lr_at(0, 20, config) == 0.5 and lr_at(1, 20, config) == 1.0
    assert lr_at(20, 20, config) == 0.0
    steps = batch_schedule(10, config)
    assert len(steps) == 6 and [len(s) for s in steps[:3]] == [2, 2, 1]
    assert sorted(i for s in steps[:3] for mb in s for i in mb) == list(range(10))


def test_heads_from_an_identify_result(tmp_path):
    """``top_heads``: the key heads first, then the rest of the same metric's ranking (every head is ranked)."""
    import helpers

    from circuits.identify import IdentifyConfig, identify, load_identify

    model = helpers.tiny_model("llama")
    result = identify(model, config=IdentifyConfig(n_pairs=4, few_shot="on", filter_correct=False, key_rule="top2"),
                      progress=False)
    result.save(tmp_path / "addition")
    loaded = load_identify(tmp_path / "addition")
    ranked = result.scores().top(None, "heads")
    assert loaded.top_heads(1) == ranked[:1] and loaded.top_heads(12) == ranked
    assert len(loaded.top_heads(12)) == 12 > len(loaded.key_heads())
    key_mlps = loaded.scores(None).key(loaded.key_rule, "mlps")
    assert loaded.scores(None).top(2, "mlps", first=loaded.key_rule)[0] == key_mlps[0][0] if key_mlps else True
    with pytest.raises(ValueError, match="ranks only 12 heads"):
        loaded.top_heads(13)


def test_collate_masks_only_targets():
    model = tiny_model()
    (ex,) = tokenize_examples(model.tokenizer, [Example("2 + 2 = ", "4\n")], max_length=32)
    tokens, mask = sft_data.collate([ex, ex], pad_id=0)
    n = len(ex.ids)
    assert mask[0].tolist() == [0.0] * (ex.n_prompt - 1) + [1.0] * (n - ex.n_prompt)
    assert model.tokenizer.decode(tokens[0, ex.n_prompt:]) == "4\n"




def test_hooks_are_registered_all_or_none():
    """A registration that fails midway leaves no hook behind (the gradient masks and the fp32 master's hooks)."""
    import pytest
    import torch

    from circuits.sft.plan import all_or_none

    w = torch.nn.Parameter(torch.ones(3))

    def two_then_fail():
        yield w.register_hook(lambda g: g * 2)
        yield w.register_hook(lambda g: g * 3)
        raise RuntimeError("third")

    with pytest.raises(RuntimeError, match="third"):
        all_or_none(two_then_fail())
    w.sum().backward()
    assert torch.equal(w.grad, torch.ones(3))  # neither hook left
    handles = all_or_none(w.register_hook(lambda g, k=k: g * k) for k in (2, 3))
    w.grad = None
    w.sum().backward()
    assert len(handles) == 2 and torch.equal(w.grad, torch.full((3,), 6.0))


def test_a_run_killed_between_its_config_and_its_marker_resumes(tmp_path, capsys):
    """A SIGKILL right after ``config.json`` and before the marker (write step 4 of 14 in
    tests/integration/test_kill_every_step.py) left the config alone, and the same command refused the folder ("holds
    files circuits did not write"); now it runs, and another run's config alone is refused in one line."""
    from circuits.cli import main as cli_main
    from circuits.sft.result import FinetuneResult
    from helpers import tiny_dir

    argv = ["finetune", "--model", str(tiny_dir("llama")), "--heads", "1.0", "--data", "arithmetic", "--n-arithmetic",
            "8", "--batch-size", "4", "--micro-batch-size", "4", "--epochs", "1", "--lr", "1e-3", "--no-progress",
            "--device", "cpu"]
    done = tmp_path / "done"
    assert cli_main([*argv, "--out", str(done)]) == 0
    killed = tmp_path / "killed"
    killed.mkdir()
    (killed / "config.json").write_bytes((done / "config.json").read_bytes())
    assert FinetuneResult.unfinished(killed)
    assert cli_main([*argv, "--out", str(killed)]) == 0
    a, b = (torch.load(f / "delta.pt", weights_only=True)["tensors"] for f in (done, killed))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert json.loads((killed / "result.json").read_text())["losses"] == \
        json.loads((done / "result.json").read_text())["losses"]
    other = tmp_path / "other"
    other.mkdir()
    (other / "config.json").write_text(json.dumps({**json.loads((done / "config.json").read_text()), "lr": 0.5}))
    capsys.readouterr()
    assert cli_main([*argv, "--out", str(other)]) == 2
    assert "holds a fine-tuning run of another config" in capsys.readouterr().err
    (other / "notes.txt").write_text("mine")
    assert not FinetuneResult.unfinished(other)
