"""Fine-tuning a TransformerBridge on two processes (torchrun, gloo, CPU) against one: Precise SFT (data-parallel:
the HF rows' gradients all-reduced) and full SFT (FSDP2 over the Bridge's blocks) give the same per-step losses and
delta.pt within 1e-5 in fp32 after an interruption and a resume; sharded bf16 compute with activation checkpointing
trains. TransformerLens 4 only: 3.9's own Bridge computes its processed gated MLP with tensors kept beside the
parameters (:meth:`~circuits.models.backend.Backend.link_processed_weights` points them at the parameters, which FSDP then
replaces by its shards), so sharding that Bridge is not supported; 3.9 shards its HookedTransformer
(tests/integration/test_distributed_ranks.py)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import dist_cases as cases
from test_sft_backends import bridge

from circuits.models.backend import installed

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
TIMEOUT_S = 420
ARCH = "llama"

pytestmark = pytest.mark.skipif(installed().name != "bridge", reason="sharding a TransformerBridge needs TransformerLens 4 "
                                "(.venv-tl4); TransformerLens 3.9 shards its HookedTransformer")


@pytest.fixture(autouse=True)
def one_thread():
    """The one-process reference runs on one thread, as each rank does (the last bits of a matmul follow its thread
    split, and Adam turns last bits of near-zero gradients into steps)."""
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
    from helpers import tiny_dir

    out = tmp_path_factory.mktemp("bridge_two_ranks")
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": path}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-addr", "127.0.0.1",
           "--master-port", str(_free_port()), str(HERE / "sft_dist_worker.py"), str(tiny_dir(ARCH)), str(out)]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=TIMEOUT_S)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
    return out, torch.load(out / "saved.pt", weights_only=False)


@pytest.mark.parametrize("name", ["precise", "full"])
def test_bridge_finetune_on_two_ranks_equals_one_process(two_ranks, tmp_path, name):
    out, saved = two_ranks
    model = bridge(ARCH)
    one = cases.finetune(model, cases.examples(model), cases.sft_config(name), tmp_path / name)
    one_delta = torch.load(tmp_path / name / "delta.pt", weights_only=True)
    two_delta = torch.load(out / name / "delta.pt", weights_only=True)
    assert saved[f"{name}_resumed_from"] == 2  # interrupted before step 3 and resumed
    assert len(one.losses) == len(saved[f"{name}_losses"]) == (6 if name == "precise" else 3)
    torch.testing.assert_close(torch.tensor(saved[f"{name}_losses"]), torch.tensor(one.losses), rtol=0, atol=1e-5)
    assert one_delta["tensors"].keys() == two_delta["tensors"].keys()
    untuned = bridge(ARCH)  # a name for the model: its backend holds it weakly
    base = untuned.backend.tunable_tensors()
    moved = 0.0
    for t in one_delta["plan"]["tensors"]:
        k, v = t["name"], one_delta["tensors"][t["name"]]
        assert v.dtype == two_delta["tensors"][k].dtype == torch.float32
        assert v.shape == two_delta["tensors"][k].shape, k  # TransformerLens's layout from the sharded state dict too
        torch.testing.assert_close(two_delta["tensors"][k], v, rtol=0, atol=1e-5, msg=k)
        moved = max(moved, float((v - base[k].read(t["rows"])).abs().max()))
    assert moved > 1e-3  # the runs trained (lr 1e-3)
    assert '"world_size": 2' in (out / name / "result.json").read_text()
    if name == "full":
        assert (out / name / "checkpoint" / "meta.json").is_file()


def test_bridge_sharded_bf16_compute_trains(two_ranks):
    _, saved = two_ranks
    losses, fp32 = torch.tensor(saved["full_bf16_losses"]), torch.tensor(saved["full_losses"])
    assert torch.isfinite(losses).all()
    torch.testing.assert_close(losses, fp32, rtol=0.05, atol=0)
