"""Table helpers of the fine-tuning experiments and the train-speed FLOP model (no model runs)."""

from __future__ import annotations

import dataclasses

import pytest

from experiments.table1_precise_sft import Table1Config, markdown_table
from experiments.table2_components import scaled_counts


def test_scaled_head_counts():
    assert scaled_counts(1024) == [8, 16, 32, 48, 64]
    assert scaled_counts(270) == [2, 4, 8, 13, 17]
    assert scaled_counts(12) == [1]


def test_markdown_table_shows_deltas_in_points():
    rows = [
        {"name": "base", "tasks": {"arithmetic": {"acc": 0.5, "n": 10}, "perplexity": {"word_perplexity": 20.0, "n": 4}}},
        {"name": "precise", "train": {"samples_per_s": 1.5, "tuned_parameters": 2_500_000},
         "tasks": {"arithmetic": {"acc": 0.6, "n": 10}, "perplexity": {"word_perplexity": 21.0, "n": 4}},
         "delta": {"arithmetic": 0.1, "perplexity": 1.0}},
    ]
    table = markdown_table(rows, ("arithmetic", "perplexity"))
    assert "| precise | 1.50 sam./s | 2.50M | 60.0 (+10.0) | 21.00 (+1.0) |" in table
    assert "| base | - | - | 50.0 | 20.00 |" in table


def test_table1_config_validates_and_full_size():
    with pytest.raises(ValueError):
        Table1Config(eval_tasks=("nope",))
    full = Table1Config.full_size()
    assert (full.top_k, full.lr, full.batch_size, full.epochs, full.eval_limit) == (32, 2e-5, 128, 2, None)


def test_train_speed_flops():
    from types import SimpleNamespace

    from benchmarks.train_speed import layer_flops_per_token

    cfg = SimpleNamespace(n_key_value_heads=3, n_heads=9, d_model=576, d_head=64, d_mlp=1536, gated_mlp=True)
    assert layer_flops_per_token(cfg) == 2.0 * (576 * 64 * (18 + 6) + 576 * 1536 * 3)


def test_table_args_shared_and_full_size_overrides():
    from experiments import table1_precise_sft as t1
    from experiments import table2_components as t2

    c1 = t1.parse_args(["--eval-limit", "5", "--lr", "3e-4", "--eval-batch-size", "64", "--data-dir", "/d"])
    assert (c1.eval_limit, c1.lr, c1.eval_batch_size, c1.data_dir, c1.math_limit) == (5, 3e-4, 64, "/d", 8)
    c2 = t2.parse_args(["--full-size", "--epochs", "1", "--limit-per-source", "100", "--mlp-counts", "1,2"])
    assert (c2.base.epochs, c2.base.limit_per_source, c2.base.lr, c2.base.out) == (1, 100, 2e-5, "results/table2")
    assert c2.base.eval_tasks == ("gsm8k", "arithmetic", "mmlu") and c2.mlp_counts == (1, 2)


def test_table_rows_resume(tmp_path, monkeypatch):
    """Finished rows are saved with their config; a rerun skips them, a changed config redoes them."""
    import torch

    from experiments import table1_precise_sft as t1

    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.zeros(2))
            self.tokenizer = None

    calls = {"eval": 0, "train": 0}

    def fake_eval(model, config):
        calls["eval"] += 1
        return {"tasks": {"arithmetic": {"acc": float(model.w.sum()), "n": 4}}}

    class Result:
        def to_json(self):
            return {"samples_per_s": 1.0, "tuned_parameters": 2, "plan": "x"}

    def fake_finetune(model, tokenized, cfg, out_dir, progress=True):
        calls["train"] += 1
        with torch.no_grad():
            model.w.add_(1.0)  # each variant must start again from the base weights
        return Result()

    monkeypatch.setattr(t1, "load_model", lambda name: Model())
    monkeypatch.setattr(t1, "build_training_set", lambda *a, **k: [])
    monkeypatch.setattr(t1, "tokenize_examples", lambda *a, **k: [])
    monkeypatch.setattr(t1, "evaluate", fake_eval)
    monkeypatch.setattr(t1.ft, "finetune", fake_finetune)
    config = t1.Table1Config(eval_tasks=("arithmetic",), out=str(tmp_path))
    variants = [("full SFT", {"full": True}), ("top-2 heads", {"heads": ((1, 0), (2, 3))})]
    rows = t1.run_rows(config, variants, tmp_path)
    assert calls == {"eval": 3, "train": 2}
    assert [r["tasks"]["arithmetic"]["acc"] for r in rows] == [0.0, 2.0, 2.0]
    assert rows[2]["delta"] == {"arithmetic": 2.0}
    again = t1.run_rows(config, variants, tmp_path)
    assert calls == {"eval": 3, "train": 2} and again == rows
    t1.run_rows(dataclasses.replace(config, lr=1e-3), variants, tmp_path)
    assert calls == {"eval": 6, "train": 4}
