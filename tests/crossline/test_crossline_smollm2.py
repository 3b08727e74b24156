"""The cross-line check (issue 23): SmolLM2 on TransformerLens 4.3's TransformerBridge gives what it gives on 3.9's
HookedTransformer, in fp32 on the CPU, through the public API (``load_model``, ``build_pairs``, ``sweep``,
``finetune``).

The two lines cannot share a process (4.x has no HookedTransformer), so this test runs in the TL 4 tier
(``make test-tl4``, in .venv-tl4) and runs the 3.9 side in .venv (``$CIRCUITS_VENV3``, default ``.venv`` of this
checkout) by subprocess; each side is ``tests/crossline/side.py`` writing a .pt. Checked:

- the 64 addition pairs ``build_pairs`` keeps are the same on both lines;
- per-head and per-MLP effects (every readout of ``sweep`` in path mode, and the baseline) on the first 16 of those
  pairs (``side.N_SWEEP``) equal within 1e-4;
- the key heads (and MLPs) by the default rule are identical, in order;
- a 4-step fp32 Precise SFT of four heads at the paper's lr (2e-5, FinetuneConfig's default) gives the same plan
  and ``delta.pt`` (one format) with 99.9% of the tuned values within 1e-5, all within 1e-4, the updates equal to 1%
  of their norm, and values that moved by more than 4e-5 (so the comparison bites). Not every value is within the
  issue's 1e-5: see the test's docstring and docs/backends.md.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from circuits.versions import backend_line

ROOT = Path(__file__).resolve().parents[2]
SIDE = Path(__file__).with_name("side.py")
EFFECT_TOL, SFT_TOL = 1e-4, 1e-5


def _venv3_python() -> Path:
    venv = Path(os.environ.get("CIRCUITS_VENV3", ROOT / ".venv"))
    return (venv if venv.is_absolute() else ROOT / venv) / "bin" / "python"


def _run_side(python: Path | str, out: Path, *args: str) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME")}
    proc = subprocess.run([str(python), str(SIDE), str(out), *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=1800)
    sys.stderr.write(proc.stderr[-2000:])
    assert proc.returncode == 0, f"{python} {SIDE.name} failed:\n{proc.stderr[-4000:]}"


@pytest.fixture(scope="module")
def sides(tmp_path_factory):
    if backend_line() != 4:
        pytest.skip("the cross-line check runs in the TransformerLens 4 tier (make test-tl4, in .venv-tl4), "
                    "which runs the 3.9 side in .venv")
    python3 = _venv3_python()
    if not python3.exists():
        pytest.skip(f"no TransformerLens 3.9 virtualenv at {python3.parents[1]} (make install builds it; "
                    "CIRCUITS_VENV3 names another): the cross-line check needs both lines")
    tmp = tmp_path_factory.mktemp("crossline")
    _run_side(python3, tmp / "tl3.pt", "--write-pairs", str(tmp / "pairs.jsonl"))
    _run_side(sys.executable, tmp / "tl4.pt", "--pairs-from", str(tmp / "pairs.jsonl"))
    tl3, tl4 = (torch.load(tmp / f"{n}.pt", weights_only=False) for n in ("tl3", "tl4"))
    assert (tl3["line"], tl3["backend"]) == (3, "hooked"), (tl3["line"], tl3["model_type"])
    assert (tl4["line"], tl4["backend"]) == (4, "bridge"), (tl4["line"], tl4["model_type"])
    print(f"\ncross-line: TL {tl3['transformer_lens']} (transformers {tl3['transformers']}) vs TL "
          f"{tl4['transformer_lens']} (transformers {tl4['transformers']}); seconds 3.9 {tl3['seconds']}, "
          f"4.3 {tl4['seconds']}")
    return tl3, tl4


def test_same_pairs_kept(sides):
    tl3, tl4 = sides
    assert len(tl3["own_pairs"]) == 64
    assert tl4["pairs"] == tl3["own_pairs"]  # the Bridge side swept the 3.9 side's pairs
    for i, (ours, theirs) in enumerate(zip(tl4["own_pairs"], tl3["own_pairs"])):  # and its own build_pairs kept them
        assert ours == theirs, f"pair {i}: " + str({k: (ours[k], theirs.get(k)) for k in ours if ours[k] != theirs.get(k)})
    assert len(tl4["own_pairs"]) == len(tl3["own_pairs"])


def test_effects_equal(sides):
    tl3, tl4 = sides
    for mode, ours in tl4["sweeps"].items():
        theirs = tl3["sweeps"][mode]
        assert set(ours) == set(theirs), mode
        for name, value in theirs.items():
            assert ours[name].shape == value.shape, (mode, name)
            finite = value.isfinite()
            assert torch.equal(finite, ours[name].isfinite()), (mode, name)  # prob is NaN off the key components
            diff = (ours[name][finite] - value[finite]).abs().max().item() if finite.any() else 0.0
            print(f"{mode} {name}: max |Bridge - HookedTransformer| {diff:.2e}")
            assert diff <= EFFECT_TOL, (mode, name, diff)
        assert theirs["head_logit"].abs().max() > 0.1  # effects far from 0: the tolerance means something


def test_key_heads_identical(sides):
    tl3, tl4 = sides
    assert tl4["key_heads"] == tl3["key_heads"]
    assert tl4["key_mlps"] == tl3["key_mlps"]
    assert all(len(heads) > 0 for heads in tl3["key_heads"].values())


def test_precise_sft_tuned_values_equal(sides):
    """The issue asks for every tuned value within 1e-5; measured on SmolLM2 a few entries are 1.8e-5 to 2.9e-5 apart at
    lr 2e-5, 1e-4 and 1e-3 alike (AdamW's first steps are about lr * sign(gradient), so an entry whose gradient is
    near zero steps by lr in the direction fp32 rounding gives it, which differs between the lines' forward passes).
    Checked instead: the same plan and values before training, 99.9% of the tuned values within 1e-5, all within
    1e-4, and the updates (tuned minus before) equal to 1% of their norm, per tensor."""
    tl3, tl4 = sides
    assert tl4["plan"] == tl3["plan"]
    assert set(tl4["delta"]) == set(tl3["delta"]) and tl3["delta"]
    moved, close, total, worst = 0.0, 0, 0, 0.0
    for name, value in tl3["delta"].items():
        ours = tl4["delta"][name]
        assert ours.shape == value.shape, name
        torch.testing.assert_close(tl4["start"][name], tl3["start"][name], atol=SFT_TOL, rtol=0)
        diff = (ours - value).abs()
        update, our_update = value - tl3["start"][name], ours - tl4["start"][name]
        rel = ((our_update - update).norm() / update.norm()).item()
        moved, worst = max(moved, update.abs().max().item()), max(worst, diff.max().item())
        close, total = close + int((diff <= SFT_TOL).sum()), total + diff.numel()
        print(f"sft {name}: max |Bridge - HookedTransformer| {diff.max().item():.2e}, within 1e-5 "
              f"{(diff <= SFT_TOL).float().mean().item():.5%}, update relative difference {rel:.2e}")
        assert rel <= 1e-2, (name, rel)
    print(f"sft: {close} of {total} tuned values within 1e-5 ({close / total:.5%}), max {worst:.2e}")
    assert close / total >= 0.999 and worst <= 1e-4, (close / total, worst)
    assert moved > 4e-5  # 4 steps at lr 2e-5 moved the tuned values: equal after training means something
