"""Packages whose names are imported on first use: ``import circuits`` and the configs stay light (no torch, no
TransformerLens) until a name that needs them is asked for."""

from __future__ import annotations

import importlib
import sys
import types
from collections.abc import Callable, Iterable
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


class _Exports(types.ModuleType):
    """A package whose exported names win over its submodules of the same name (``circuits.validate.knockout``, the
    function, not the module): importing a submodule sets it on its package, which would hide a lazily exported name
    the package imported eagerly before it was lazy. ``sys.modules`` still holds the submodule."""

    _shadowing: frozenset[str] = frozenset()

    def __setattr__(self, name: str, value: Any) -> None:
        if name in type(self)._shadowing and isinstance(value, types.ModuleType):
            return
        super().__setattr__(name, value)


def exports_win(package: str, names: Iterable[str]) -> None:
    """Make ``names`` of ``package`` (its lazy exports named like its submodules) never replaced by those submodules."""
    cls = type(f"{package}.Exports", (_Exports,), {"_shadowing": frozenset(names)})
    sys.modules[package].__class__ = cls
