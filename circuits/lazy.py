"""Packages whose names are imported on first use: ``import circuits`` and the configs stay light (no torch, no
TransformerLens) until a name that needs them is asked for."""

from __future__ import annotations

import ast
import importlib
import os
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


def type_checking_exports(init_file: str | os.PathLike) -> tuple[dict[str, str], dict[str, str]]:
    """The names a package's ``if TYPE_CHECKING:`` block imports, as :func:`lazy_exports` takes them: name -> module,
    and name -> the name it has there (``from m import a as b``). That block is then the one list of a package's
    names: editors and type checkers read it, and the lazy table is made from it (no second copy to keep in step).

    Only ``from circuits... import name`` lines count (``import x`` alone names no export)."""
    with open(init_file, encoding="utf-8") as f:
        tree = ast.parse(f.read())
    exports: dict[str, str] = {}
    aliases: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING":
            for imp in node.body:
                if isinstance(imp, ast.ImportFrom) and imp.module:
                    for a in imp.names:
                        name = a.asname or a.name
                        if name in exports:
                            raise ValueError(f"{init_file}: {name!r} is imported twice under TYPE_CHECKING")
                        exports[name] = imp.module
                        if a.asname and a.asname != a.name:
                            aliases[name] = a.name
    return exports, aliases


def lazy_package(package: str, init_file: str | os.PathLike) -> tuple[Callable[[str], Any], Callable[[], list[str]],
                                                                      list[str]]:
    """``__getattr__``, ``__dir__`` and ``__all__`` of a package whose names are its ``if TYPE_CHECKING:`` imports
    (:func:`type_checking_exports`), each imported on first use (:func:`lazy_exports`).

    In a package's ``__init__``: ``__getattr__, __dir__, __all__ = lazy_package(__name__, __file__)``."""
    exports, aliases = type_checking_exports(init_file)
    return (*lazy_exports(package, exports, aliases), sorted(exports))


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
