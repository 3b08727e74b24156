"""The one-line refusal of a TransformerLens version no backend supports (circuits.versions), on both lines: the
installed version picks the backend line, and importing circuits' model layer on 4.0-4.2, 5, 3.8 or without
TransformerLens says what is installed, what is supported and how to install, before TransformerLens is imported."""

from __future__ import annotations

import subprocess
import sys
from importlib.metadata import PackageNotFoundError

import pytest

from circuits import versions

SUPPORTED = {"3.9.0": 3, "3.9.1": 3, "3.9.12": 3, "4.3.0": 4, "4.3.1": 4, "4.4.0": 4, "4.10.2": 4, "4.3.0rc1": 4}
REFUSED = ("3.8.2", "3.10.0", "4.0.0", "4.1.3", "4.2.0", "5.0.0", "2.16.1", "4")


def test_installed_line_is_a_supported_one():
    import transformer_lens  # noqa: F401  (what this venv runs: .venv has 3.9, .venv-tl4 has 4.3)

    line = versions.backend_line()
    assert line in (3, 4)
    assert line == int(versions.installed_version().split(".")[0])


@pytest.mark.parametrize("text,line", sorted(SUPPORTED.items()))
def test_supported_versions(text, line):
    assert versions.backend_line(text) == line


@pytest.mark.parametrize("text", REFUSED)
def test_unsupported_versions_are_one_line(text, monkeypatch):
    monkeypatch.setattr(versions, "version", lambda name: text)
    with pytest.raises(versions.UnsupportedTransformerLens) as err:
        versions.check_transformer_lens()
    message = str(err.value)
    assert "\n" not in message and isinstance(err.value, ImportError)
    assert f"transformer_lens {text} is installed" in message
    assert "3.9.x" in message and ">=4.3,<5" in message  # what is supported
    assert "pip install 'transformer_lens==4.3.*' 'transformers>=5.9,<5.24'" in message  # how to install
    assert "make install TL=4" in message


def test_missing_transformer_lens(monkeypatch):
    def missing(name):
        raise PackageNotFoundError(name)

    monkeypatch.setattr(versions, "version", missing)
    with pytest.raises(versions.UnsupportedTransformerLens, match="^TransformerLens is not installed; circuits supports"):
        versions.check_transformer_lens()


FAKE = """
import importlib.metadata as m, sys
real = m.version
def fake(name):
    if name == "transformer_lens":
        if {version!r} is None:
            raise m.PackageNotFoundError(name)
        return {version!r}
    return real(name)
m.version = fake
try:
    import circuits.models
except ImportError as err:
    print(type(err).__name__ + ": " + str(err))
    print("transformer_lens imported:", "transformer_lens" in sys.modules)
"""


@pytest.mark.parametrize("text", ["4.1.0", "5.0.1", None])
def test_importing_the_model_layer_refuses_it(text):
    """Importing circuits.models (what load_model and every job import) stops at the check, before TransformerLens
    is imported (on 4.x it would fail with TransformerLens's own ImportError about HookedTransformer)."""
    out = subprocess.run([sys.executable, "-c", FAKE.format(version=text)], capture_output=True, text=True, timeout=120)
    lines = out.stdout.strip().splitlines()
    assert out.returncode == 0, out.stderr
    assert lines[0].startswith("UnsupportedTransformerLens: ")
    assert ("TransformerLens is not installed" if text is None else f"transformer_lens {text} is installed") in lines[0]
    assert lines[1] == "transformer_lens imported: False"
