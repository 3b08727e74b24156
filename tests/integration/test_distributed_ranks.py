"""Two processes (torchrun, gloo, CPU) against one: Precise SFT (data-parallel) and full SFT (FSDP2) give the same
per-step losses and tuned values within 1e-5 in fp32, after an interruption and a resume; the identify sweep split
across ranks equals a one-process run exactly, the identify job and a knockout curve to the last bits (the same
rankings and key heads). (The helpers in one process, and their bad inputs: tests/unit/test_distributed.py.)"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import dist_cases as cases
from circuits.identify import IdentifyConfig
from circuits.identify.job import run as run_identify
from circuits.identify.result import load_identify

ROOT = Path(__file__).resolve().parents[2]
TIMEOUT_S = 420


@pytest.fixture(autouse=True)
def one_thread():
    """The one-process reference runs on one thread, as each rank does: a matmul's sums are ordered by its thread
    split, so two thread counts differ in the last bits (and Adam turns last bits of near-zero gradients into steps)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory):
    """One torchrun launch of ``tests/dist_worker.py`` on 2 processes; returns (model dir, its output folder)."""
    from helpers import tiny_dir

    model_dir = tiny_dir("llama")
    out = tmp_path_factory.mktemp("two_ranks")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-addr", "127.0.0.1",
           "--master-port", str(_free_port()), str(ROOT / "tests" / "dist_worker.py"), str(model_dir), str(out)]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=TIMEOUT_S)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
    return model_dir, out, torch.load(out / "saved.pt", weights_only=False)


def _one_process(model_dir, name, tmp_path):
    from circuits.models import load_model

    model = load_model(model_dir, device="cpu")
    result = cases.finetune(model, cases.examples(model), cases.sft_config(name), tmp_path / name)
    return result, torch.load(tmp_path / name / "delta.pt", weights_only=True)


@pytest.mark.parametrize("name", ["precise", "full"])
def test_finetune_on_two_ranks_equals_one_process(two_ranks, tmp_path, name):
    model_dir, out, saved = two_ranks
    one, one_delta = _one_process(model_dir, name, tmp_path)
    two_delta = torch.load(out / name / "delta.pt", weights_only=True)
    assert saved[f"{name}_resumed_from"] == 2  # the 2-rank run was interrupted before step 3 and resumed
    assert len(one.losses) == len(saved[f"{name}_losses"]) == (6 if name == "precise" else 3)
    torch.testing.assert_close(torch.tensor(saved[f"{name}_losses"]), torch.tensor(one.losses), rtol=0, atol=1e-5)
    assert one_delta["tensors"].keys() == two_delta["tensors"].keys()
    from circuits.models import load_model

    base = dict(load_model(model_dir, device="cpu").named_parameters())
    moved = 0.0
    for t in one_delta["plan"]["tensors"]:
        k, v = t["name"], one_delta["tensors"][t["name"]]
        assert v.dtype == two_delta["tensors"][k].dtype == torch.float32
        torch.testing.assert_close(two_delta["tensors"][k], v, rtol=0, atol=1e-5, msg=k)
        start = base[k].detach() if t["rows"] is None else base[k].detach()[t["rows"]]
        moved = max(moved, float((v - start).abs().max()))
    assert moved > 1e-3  # the runs trained (lr 1e-3), so equality is not two untouched models
    result = (out / name / "result.json").read_text()
    assert '"world_size": 2' in result
    if name == "full":
        assert (out / name / "checkpoint" / "meta.json").is_file() and not (out / name / "checkpoint.pt").exists()


def test_sharded_bf16_compute_trains(two_ranks):
    _, _, saved = two_ranks
    losses = torch.tensor(saved["full_bf16_losses"])
    fp32 = torch.tensor(saved["full_losses"])
    assert torch.isfinite(losses).all()
    torch.testing.assert_close(losses, fp32, rtol=0.05, atol=0)  # bf16 compute, fp32 masters: close, not equal


def test_sweep_and_knockout_on_two_ranks_equal_one_process_exactly(two_ranks):
    from circuits.models import load_model

    model_dir, out, saved = two_ranks
    model = load_model(model_dir, device="cpu")
    model.requires_grad_(False)
    pairs = cases.pairs(model)
    for mode in ("path", "activation"):
        one = cases.sweep(model, pairs, mode).tensors()
        two = saved[f"sweep_{mode}"]
        for k in ("head_logit", "head_logit_diff", "head_prob", "mlp_logit", "mlp_logit_diff", "mlp_prob"):
            assert torch.equal(one[k], two[k]), (mode, k)
        for k, v in one["baseline"].items():
            if isinstance(v, torch.Tensor):
                assert torch.equal(v, two["baseline"][k]), (mode, k)
    one, two = cases.knockout(model, pairs).to_json(), saved["knockout"]
    # The same runs in the same order; the probabilities may differ in the last bits between two processes (their
    # BLAS picks kernels from the thread settings it started with), the accuracies and head orders not at all.
    assert {k: v for k, v in one.items() if not k.endswith("_prob")} == {k: v for k, v in two.items() if not k.endswith("_prob")}
    for k in ("effect_prob", "random_prob"):
        torch.testing.assert_close(torch.tensor(one[k]), torch.tensor(two[k]), rtol=1e-5, atol=0)


def test_identify_job_on_two_ranks_equals_one_process(two_ranks, tmp_path):
    from circuits.cli import build_parser
    from circuits.config import from_arguments

    model_dir, out, _ = two_ranks
    args = build_parser().parse_args(cases.identify_argv(model_dir, tmp_path / "one"))
    run_identify(from_arguments(IdentifyConfig, args), tmp_path / "one", progress=False)
    one, two = load_identify(tmp_path / "one"), load_identify(out / "identify")
    assert [p.reference_token_ids for p in one.pairs] == [p.reference_token_ids for p in two.pairs]
    # Equal to the last bits a separate process may change (its BLAS set up under other thread settings), NaN (the
    # probability of components that are not key) in the same places; the ranking and the key heads exactly.
    for name in ("head_logit", "mlp_logit", "head_prob", "mlp_prob"):
        torch.testing.assert_close(getattr(one.sweep, name), getattr(two.sweep, name), atol=1e-6, rtol=1e-5, equal_nan=True)
    assert not one.sweep.mlp_prob.isnan().all()
    assert one.scores().top(None, "heads") == two.scores().top(None, "heads")
    assert [h for h, _ in one.key_heads()] == [h for h, _ in two.key_heads()]
