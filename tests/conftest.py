"""Shared, session-scoped, read-only fixtures: the SmolLM2 tokenizer, tiny models, SmolLM2 itself."""

from __future__ import annotations

import os

import pytest
import torch

from circuits.models import load_model

# Two cores: keep one torch thread per test process unless told otherwise (threads fight under load).
torch.set_num_threads(int(os.environ.get("CIRCUITS_TEST_THREADS", "2")))


@pytest.fixture(scope="session")
def smollm2():
    model = load_model("smollm2")
    for p in model.parameters():
        p.requires_grad_(False)
    return model


@pytest.fixture(scope="session")
def tokenizer(smollm2):
    return smollm2.tokenizer


@pytest.fixture(scope="session")
def tiny_dirs(tmp_path_factory, tokenizer):
    from helpers import save_tiny

    root = tmp_path_factory.mktemp("tiny")
    return {arch: save_tiny(root, tokenizer, arch) for arch in ("llama", "mistral")}


@pytest.fixture(scope="session")
def tiny_llama(tiny_dirs):
    return load_model(tiny_dirs["llama"])


@pytest.fixture(scope="session")
def tiny_mistral(tiny_dirs):
    return load_model(tiny_dirs["mistral"])
