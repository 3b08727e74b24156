"""Packages whose names are imported on first use: ``import circuits`` and the configs stay light (no torch, no
TransformerLens) until a name that needs them is asked for."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from typing import Any


def lazy_exports(package: str, exports: dict[str, str], aliases: dict[str, str] | None = None
                 ) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``__getattr__`` and ``__dir__`` for ``package``: each name of ``exports`` (name -> module) is imported from its
    module when first asked for (``aliases``: the name it has there, where that differs) and kept on the package.

    In a package's ``__init__``: ``__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)``."""
    aliases = aliases or {}

    def __getattr__(name: str) -> Any:
        if name in exports:
            value = getattr(importlib.import_module(exports[name]), aliases.get(name, name))
            setattr(sys.modules[package], name, value)
            return value
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    def __dir__() -> list[str]:
        return sorted(set(vars(sys.modules[package])) | set(exports))

    return __getattr__, __dir__
