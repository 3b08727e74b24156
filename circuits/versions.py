"""Which TransformerLens line is installed, and the one-line refusal of a version no backend supports.

``circuits`` runs on two lines of TransformerLens (docs/backends.md): 3.9.x, whose ``HookedTransformer`` is the
default backend, and 4.3 or later below 5, whose ``TransformerBridge`` wraps the Hugging Face model. 4.0-4.2 differ
from 4.3 in the Bridge's attention, blocks and weight processing and were never tested; 5 does not exist yet.
:func:`check_transformer_lens` runs when :mod:`circuits.models` is imported, before anything of TransformerLens is,
so a wrong install is one line saying what is installed, what is supported and how to install it, not a traceback
from deep inside TransformerLens (4.x raises ``ImportError`` on ``HookedTransformer``).

This module imports nothing heavy (no torch, no TransformerLens): it reads the installed metadata only.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

SUPPORTED = "3.9.x (HookedTransformer) or >=4.3,<5 (TransformerBridge)"
INSTALL = ("pip install 'transformer_lens==3.9.*', or pip install 'transformer_lens==4.3.*' 'transformers>=5.9,<5.24' "
           "(in a checkout: make install, or make install TL=4)")


class UnsupportedTransformerLens(ImportError):
    """The installed TransformerLens is one no backend of ``circuits`` supports (or none is installed)."""


def installed_version() -> str | None:
    """The installed ``transformer_lens`` version string (from its metadata: 4.3 defines no ``__version__``), or
    None when it is not installed."""
    try:
        return version("transformer_lens")
    except PackageNotFoundError:
        return None


def _release(text: str) -> tuple[int, ...]:
    """The leading numeric release of a version string (``"4.3.0rc1"`` -> ``(4, 3, 0)``; ``"3.9"`` -> ``(3, 9)``)."""
    parts = []
    for piece in text.split("+")[0].split("."):
        digits = ""
        for ch in piece:
            if not ch.isdigit():
                break
            digits += ch
        if not digits:
            break
        parts.append(int(digits))
        if len(digits) < len(piece):  # "0rc1": the release ends here
            break
    return tuple(parts)


def backend_line(installed: str | None = None) -> int:
    """3 for TransformerLens 3.9.x (HookedTransformer), 4 for 4.3 and later below 5 (TransformerBridge).

    ``installed`` defaults to the installed version; any other version, or none, raises
    :class:`UnsupportedTransformerLens` with one line naming what is installed, what is supported and how to
    install."""
    text = installed_version() if installed is None else installed
    if text is None:
        raise UnsupportedTransformerLens(f"TransformerLens is not installed; circuits supports {SUPPORTED}: {INSTALL}")
    release = _release(text)
    if release[:2] == (3, 9):
        return 3
    if len(release) >= 2 and release[0] == 4 and release[1] >= 3:
        return 4
    raise UnsupportedTransformerLens(f"transformer_lens {text} is installed, but circuits supports {SUPPORTED}: {INSTALL}")


def check_transformer_lens() -> int:
    """:func:`backend_line` of the installed TransformerLens (what :mod:`circuits.models` runs on import)."""
    return backend_line()


# The name of the backend each line runs, as circuits.models.backend registers them (the registry writes it here when
# circuits.models is imported, so this module names no backend); provenance reads it.
LINE_BACKENDS: dict[int, str] = {}

# What made a result (written into every saved result's marker by circuits.results; the report's "made by" line reads
# it back). Computed once per process: the git call runs at the first save only.
_PROVENANCE: dict[str, object] | None = None


def _git_commit(folder: str) -> tuple[str | None, bool | None]:
    """The commit of the checkout ``folder`` lies in and whether tracked files differ from it (None, None outside a
    checkout or without git)."""
    import subprocess

    try:
        head = subprocess.run(["git", "-C", folder, "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10)
        if head.returncode != 0:
            return None, None
        dirty = subprocess.run(["git", "-C", folder, "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=20)
        return head.stdout.strip(), bool(dirty.stdout.strip()) if dirty.returncode == 0 else None
    except (OSError, subprocess.SubprocessError):
        return None, None


def _version_of(package: str) -> str | None:
    try:
        return version(package)
    except PackageNotFoundError:
        return None


def provenance() -> dict[str, object]:
    """What this process makes results with: the backend (``"hooked"``, TransformerLens 3.9's ``HookedTransformer``;
    ``"bridge"``, 4.3's ``TransformerBridge``), the versions of TransformerLens, transformers and torch, and the
    toolkit's version and git commit (``dirty`` when tracked files differ from it; None outside a checkout).

    Read from the installed metadata, git and the backend registry (:data:`LINE_BACKENDS`; ``None`` in a process
    that never imported :mod:`circuits.models`), never from a model."""
    global _PROVENANCE
    if _PROVENANCE is None:
        import os

        commit, dirty = _git_commit(os.path.dirname(os.path.abspath(__file__)))
        _PROVENANCE = {"transformer_lens": installed_version(), "transformers": _version_of("transformers"),
                       "torch": _version_of("torch"), "circuits": _version_of("circuits"), "commit": commit,
                       "dirty": dirty}
    tl = _PROVENANCE["transformer_lens"]
    try:
        backend = LINE_BACKENDS.get(backend_line(str(tl))) if tl else None
    except UnsupportedTransformerLens:
        backend = None
    return {"backend": backend, **_PROVENANCE}


def provenance_line(p: dict[str, object] | None) -> str:
    """One line of a result's provenance (``"hooked backend, TransformerLens 3.9.1, transformers 4.57.1, torch 2.9.0,
    circuits 0.2.0 @ c782dd1"``); ``"provenance not recorded"`` for a result saved before circuits wrote it."""
    if not p:
        return "provenance not recorded (saved by an older circuits)"
    parts = [f"{p.get('backend') or '?'} backend"]
    for key, name in (("transformer_lens", "TransformerLens"), ("transformers", "transformers"), ("torch", "torch")):
        if p.get(key):
            parts.append(f"{name} {p[key]}")
    tool = f"circuits {p.get('circuits') or '?'}"
    if p.get("commit"):
        tool += f" @ {str(p['commit'])[:7]}" + ("+dirty" if p.get("dirty") else "")
    return ", ".join(parts + [tool])
