"""The `circuits finetune` / `circuits evaluate` subcommands, parsed and run on a tiny local HF model."""

from __future__ import annotations

import argparse
import json

import pytest
from finetune_helpers import smollm2_tokenizer

from circuits import evaluate_job, finetune_job


def _parser():
    parser = argparse.ArgumentParser(prog="circuits")
    sub = parser.add_subparsers(dest="command", required=True)
    finetune_job.register(sub)
    evaluate_job.register(sub)
    return parser


@pytest.fixture(scope="module")
def tiny_hf_dir(tmp_path_factory):
    from transformers import LlamaConfig, LlamaForCausalLM

    tok = smollm2_tokenizer()
    folder = tmp_path_factory.mktemp("tiny_llama")
    cfg = LlamaConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512)
    LlamaForCausalLM(cfg).save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


def test_finetune_args_select_heads(tmp_path):
    (tmp_path / "summary.json").write_text(json.dumps({"key_heads": [[1, 2, -0.1], [0, 1, -0.05]], "head_effects": [[0, -0.05, 0, 0], [0, 0, -0.1, 0]]}))
    args = _parser().parse_args(["finetune", "--heads-from", str(tmp_path), "--top-k", "1", "--out", "x", "--kv-policy", "never"])
    config = finetune_job.config_from_args(args)
    assert config.heads == ((1, 2),) and config.kv_policy == "never" and config.lr == 2e-5 and config.batch_size == 128
    args = _parser().parse_args(["finetune", "--heads", "1.0,0.3", "--mlps", "1", "--out", "x"])
    assert finetune_job.config_from_args(args).heads == ((1, 0), (0, 3))
    with pytest.raises(ValueError, match="say what to tune"):
        finetune_job.config_from_args(_parser().parse_args(["finetune", "--out", "x"]))


def test_finetune_then_evaluate_with_delta(tmp_path, tiny_hf_dir):
    out = tmp_path / "run"
    args = _parser().parse_args([
        "finetune", "--model", str(tiny_hf_dir), "--heads", "1.0", "--out", str(out), "--data", "arithmetic",
        "--n-arithmetic", "8", "--batch-size", "4", "--micro-batch-size", "4", "--epochs", "1", "--lr", "1e-3",
        "--no-progress", "--device", "cpu",
    ])
    assert args.func(args) == 0
    result = json.loads((out / "result.json").read_text())
    assert result["steps"] == 2 and result["plan"]["heads"] == [[1, 0]]
    assert json.loads((out / "config.json").read_text())["heads"] == [[1, 0]]
    eval_out = tmp_path / "eval.json"
    args = _parser().parse_args([
        "evaluate", "--model", str(tiny_hf_dir), "--delta", str(out / "delta.pt"), "--tasks", "arithmetic",
        "--limit", "3", "--out", str(eval_out), "--device", "cpu",
    ])
    assert args.func(args) == 0
    saved = json.loads(eval_out.read_text())
    assert saved["config"]["delta"] == str(out / "delta.pt") and saved["tasks"]["arithmetic"]["n"] == 3
