"""Jobs killed with SIGKILL at seeded points (during writes, and at random moments), then run again: the final
results equal an uninterrupted run's, and no temporary file or lock survives."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import torch

from kill_steps import Zygote



@pytest.fixture(scope="module")
def zygote(tmp_path_factory):
    """Every run of this file is a child forked from one interpreter that imported the toolkit and ran no torch op
    (tests/kill_steps.py): a run costs its work, not a fresh import of torch each (issue 44); the child runs
    ``circuits.cli.main`` as ``python -m circuits`` does, and is SIGKILLed at a write step (``circuits.io._write_step``,
    called inside every atomic write and folder swap, before the rename that publishes it) or at a moment."""
    z = Zygote(tmp_path_factory.mktemp("kill-logs"))
    yield z
    z.close()


def _run(zygote: Zygote, args: list[str], kill_at: int | None = None, kill_after: float | None = None) -> dict:
    """``circuits args`` in a child of the zygote; ``kill_at`` kills it at that write step, ``kill_after`` that many
    seconds after it started (if it still runs). Its reply: the exit code (-9 when killed), its write steps, its
    seconds and the end of its output. A child that runs past the zygote's timeout fails the test as hung."""
    reply = zygote.run(args, kill_at=kill_at, kill_after=kill_after)
    RUNS.append(f"kill_at={kill_at} kill_after={kill_after} -> {reply['code']}: {reply['tail'][-1500:]}")
    return reply


RUNS: list[str] = []  # each run's exit code and the end of its output, for the assertion messages


def _leftovers(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if ".lock" in p.name or "-tmp-" in p.name or "-old-" in p.name]


def _same_results(a: Path, b: Path) -> None:
    tasks = sorted(p.name for p in a.iterdir() if p.name != "_assets")  # _assets: the pages' shared plotly.js
    assert tasks == sorted(p.name for p in b.iterdir() if p.name != "_assets") == [
        "addition", "all", "division", "multiplication", "subtraction"]
    for t in tasks:
        if (a / t / "pooled.json").is_file():  # all/ reads its pairs and values from the operations' files
            from circuits.identify import IdentifyResult

            x, y = IdentifyResult.load(a / t), IdentifyResult.load(b / t)
            assert x.pairs == y.pairs, t
            for k in ("head_logit", "mlp_logit", "head_logit_diff"):
                assert torch.equal(x.sweep.tensors()[k], y.sweep.tensors()[k]), (t, k)
            continue
        assert (a / t / "pairs.jsonl").read_text() == (b / t / "pairs.jsonl").read_text(), t
        x, y = torch.load(a / t / "sweep.pt", weights_only=True), torch.load(b / t / "sweep.pt", weights_only=True)
        for k in ("head_logit", "mlp_logit", "head_logit_diff"):
            assert torch.equal(x[k], y[k]), (t, k)


def test_identify_all_survives_kills(zygote, tmp_path):
    from helpers import tiny_dir

    args = ["identify", "--task", "all", "--model", str(tiny_dir("llama")), "--pairs", "3", "--few-shot", "on",
            "--no-filter-correct", "--key-rule", "top2"]
    straight = _run(zygote, [*args, "--out", str(tmp_path / "straight")])
    assert straight["code"] == 0, RUNS[-1]
    rng = random.Random(0)
    out = tmp_path / "killed"
    # write steps (inside atomic writes and folder swaps), counted from each run's start; a resumed run has fewer left
    codes = [_run(zygote, [*args, "--out", str(out)], kill_at=rng.randint(1, 14))["code"] for _ in range(2)]
    assert codes[0] == -9 and set(codes) <= {0, -9}, RUNS[-2:]  # SIGKILL, mid-write
    # and at a random moment of a run (a share of the straight run's seconds: the kill lands in the work, not in an
    # import; where the resumed run ends first, it simply ends)
    _run(zygote, [*args, "--out", str(out)], kill_after=rng.uniform(0.2, 0.9) * straight["wall"])
    assert _run(zygote, [*args, "--out", str(out)])["code"] == 0, RUNS[-1]
    _same_results(tmp_path / "straight", out)
    assert _leftovers(tmp_path) == []


def test_finetune_survives_kills(zygote, tmp_path):
    from helpers import tiny_dir

    args = ["finetune", "--model", str(tiny_dir("llama")), "--heads", "1.0,2.3", "--data", "arithmetic",
            "--n-arithmetic", "24", "--batch-size", "4", "--micro-batch-size", "2", "--epochs", "1", "--lr", "1e-3",
            "--checkpoint-every", "1", "--no-progress", "--device", "cpu"]
    assert _run(zygote, [*args, "--out", str(tmp_path / "straight")])["code"] == 0, RUNS[-1]
    rng = random.Random(1)
    out = tmp_path / "killed"
    codes = [_run(zygote, [*args, "--out", str(out)], kill_at=rng.randint(2, 8))["code"] for _ in range(2)]
    assert codes[0] == -9 and set(codes) <= {0, -9}, RUNS[-2:]
    assert _run(zygote, [*args, "--out", str(out)])["code"] == 0, RUNS[-1]
    a, b = torch.load(tmp_path / "straight" / "delta.pt", weights_only=True), torch.load(out / "delta.pt", weights_only=True)
    assert a["tensors"].keys() == b["tensors"].keys()
    assert all(torch.equal(a["tensors"][k], b["tensors"][k]) for k in a["tensors"])
    import json

    assert json.loads((out / "result.json").read_text())["losses"] == \
        json.loads((tmp_path / "straight" / "result.json").read_text())["losses"]
    assert _leftovers(tmp_path) == []


def test_a_kill_after_seconds_is_a_sigkill_not_a_hang(zygote, tmp_path):
    """The harness's ``kill_after``: the child is SIGKILLed and the reply says killed, not hung (a tiny identify's
    model load alone takes well over the 50 ms given; the zygote's own timeout test makes the same assumption)."""
    from helpers import tiny_dir

    args = ["identify", "--model", str(tiny_dir("llama")), "--pairs", "2", "--no-filter-correct", "--no-progress"]
    reply = _run(zygote, [*args, "--out", str(tmp_path / "x")], kill_after=0.05)
    assert reply["code"] == -9 and not reply["hung"], RUNS[-1]
    assert _run(zygote, [*args, "--out", str(tmp_path / "x")])["code"] == 0, RUNS[-1]  # and it resumes
    assert _leftovers(tmp_path) == []
