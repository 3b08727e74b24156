"""Shared set-up for both tiers: import paths, one torch thread count, and the session-wide fixtures.

``tests/unit`` runs tiny random models (seconds); ``tests/integration`` runs SmolLM2, the browser and the
notebook. ``make test`` runs both; ``make test-fast`` the unit tier.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path

# Everything a test run writes to a temporary folder (pytest's temp roots, the tiny model folders, the experiment
# scripts' shared run, evaluate's and torchrun's folders, torch's compile caches) goes under one folder per run,
# made here before anything asks for a temp folder and removed at the end; a failed run keeps it and names it.
# pytest-xdist's workers and the subprocesses of the tests inherit it through TMPDIR.
if "CIRCUITS_TEST_ROOT" not in os.environ:
    _root = tempfile.mkdtemp(prefix="circuits-tests-")
    os.environ.update(CIRCUITS_TEST_ROOT=_root, CIRCUITS_TEST_ROOT_OWNER=str(os.getpid()))
_ROOT = os.environ["CIRCUITS_TEST_ROOT"]
os.environ["TMPDIR"] = _ROOT
os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", os.path.join(_ROOT, "torchinductor"))
os.environ.setdefault("TRITON_CACHE_DIR", os.path.join(_ROOT, "triton"))
tempfile.tempdir = None  # read TMPDIR again

# Idle OpenMP threads sleep rather than spin (set before torch loads): on a shared CPU two spinning threads ran the
# forward passes 2-7x slower than one (docs/speed.md).
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

# The tiny random models answer nothing, so every job would refuse their results as untrusted (identify.validity):
# the tests go on as with --force; the tests of the refusal itself unset it (monkeypatch.delenv).
os.environ.setdefault("CIRCUITS_FORCE", "1")

import pytest  # noqa: E402
import torch  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
for path in (ROOT / "tests", ROOT / "experiments", ROOT / "benchmarks"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

# One place sets the thread count: the cores this process may use, shared among pytest-xdist's workers when
# `make test` runs several (CIRCUITS_TEST_THREADS overrides).
from circuits.threads import available_cores  # noqa: E402

_workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
torch.set_num_threads(int(os.environ.get("CIRCUITS_TEST_THREADS", max(1, min(2, available_cores()) // _workers))))
# The command line and figure scripts (run in-process or as subprocesses) keep that count (circuits.threads).
os.environ.setdefault("CIRCUITS_THREADS", str(torch.get_num_threads()))


def pytest_unconfigure(config):
    """The run's temp folder goes when the process that made it ends: kept, and named, when a test failed."""
    if os.environ.get("CIRCUITS_TEST_ROOT_OWNER") != str(os.getpid()) or hasattr(config, "workerinput"):
        return
    session = getattr(config, "_circuits_session", None)
    failed = session is not None and (session.testsfailed or session.shouldfail)
    if failed:
        print(f"\ncircuits tests: kept the run's temporary folder for the failure: {_ROOT}", file=sys.stderr)
    else:
        shutil.rmtree(_ROOT, ignore_errors=True)


def pytest_sessionstart(session):
    session.config._circuits_session = session


@pytest.fixture(scope="session")
def tokenizer():
    from helpers import smollm2_tokenizer

    return smollm2_tokenizer()


@pytest.fixture(scope="session")
def tiny_llama():
    """A read-only tiny Llama-shaped model (tests that change weights build their own with helpers.tiny_model)."""
    from helpers import tiny_model

    model = tiny_model("llama")
    model.requires_grad_(False)
    return model


@pytest.fixture(scope="session")
def tiny_mistral():
    from helpers import tiny_model

    model = tiny_model("mistral")
    model.requires_grad_(False)
    return model


@pytest.fixture(scope="session")
def smollm2():
    """The embedded model, loaded once per session, read-only."""
    from helpers import frozen_model

    return frozen_model("smollm2")


@pytest.fixture(scope="module")
def family_models():
    """``family_models(arch)``: a read-only tiny model of each family in ``helpers.FAMILIES``, built once per module."""
    from helpers import tiny_model

    models = {}

    def get(arch):
        if arch not in models:
            models[arch] = tiny_model(arch).requires_grad_(False)
        return models[arch]

    return get
