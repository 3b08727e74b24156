"""One version: ``circuits.__version__`` is the installed package's (pyproject.toml's), not a second literal."""

from __future__ import annotations

import json
import re
from importlib.metadata import distributions, version
from pathlib import Path

import pytest

import circuits

ROOT = Path(__file__).resolve().parents[2]


def test_version_is_the_installed_metadata():
    assert circuits.__version__ == version("circuits")
    assert not re.search(r"__version__\s*=\s*['\"]\d+\.\d", (ROOT / "circuits" / "__init__.py").read_text())


def test_installed_version_is_pyproject_s():
    wanted = re.search(r'^version\s*=\s*"([^"]+)"', (ROOT / "pyproject.toml").read_text(), re.M).group(1)
    # the installed dist-info (an editable build also leaves circuits.egg-info in the checkout, which is on sys.path
    # first when the tests run from its root, and records no install URL)
    urls = [json.loads(d.read_text("direct_url.json") or "{}").get("url", "") for d in distributions(name="circuits")]
    url = next((u for u in urls if u), "")
    if url != ROOT.as_uri():  # metadata of another checkout's editable install (a worktree sharing its venv)
        pytest.skip(f"circuits is installed from {url or 'a wheel'}, not this checkout; reinstall to compare")
    assert version("circuits") == wanted  # the metadata is refreshed by `make` (pyproject.toml is its stamp's input)
