"""Table helpers of the fine-tuning experiments and the train-speed FLOP model (no model runs)."""

from __future__ import annotations

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
