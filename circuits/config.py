"""Job configs: frozen dataclasses that validate themselves, save beside their results, and become CLI flags.

Every job and experiment config derives from :class:`Config`. One function, :func:`add_arguments`, turns
a config's fields into ``argparse`` flags (``n_pairs`` -> ``--n-pairs``, or the field's own ``flag``), and
:func:`from_arguments` builds the config back, so the command line of ``circuits identify`` and of every
script in ``experiments/`` is made the same way. Field metadata (see :func:`option`) holds help texts,
flag names and choices.
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from circuits.io import to_jsonable

C = TypeVar("C", bound="Config")


def option(default: Any = dataclasses.MISSING, *, help: str = "", flag: str | None = None,
           choices: Iterable[Any] | None = None, cli: bool = True, parse: Callable[[str], Any] | None = None,
           **kwargs: Any) -> Any:
    """A config field with CLI metadata: its ``help``, its ``flag`` (default ``--field-name``), ``choices``,
    ``parse`` (text -> value, for fields such as head lists), or ``cli=False`` for fields the command line
    does not set."""
    meta = {"help": help, "flag": flag, "choices": tuple(choices) if choices is not None else None, "cli": cli,
            "parse": parse}
    if default is not dataclasses.MISSING and isinstance(default, (list, dict, set)):
        return dataclasses.field(default_factory=lambda: type(default)(default), metadata=meta, **kwargs)
    return dataclasses.field(default=default, metadata=meta, **kwargs)


class Config:
    """Mixin for frozen dataclass configs."""

    def to_json(self) -> dict[str, Any]:
        return to_jsonable(self)

    @classmethod
    def from_json(cls: type[C], data: dict[str, Any]) -> C:
        """From saved JSON; keys this version does not know are ignored, lists become tuples where the field
        is a tuple."""
        out = {}
        for f in dataclasses.fields(cls):  # type: ignore[arg-type]
            if f.name in data:
                v = data[f.name]
                if isinstance(v, list) and isinstance(f.default, tuple):
                    v = tuple(tuple(x) if isinstance(x, list) else x for x in v)
                out[f.name] = v
        return cls(**out)

    def replace(self: C, **changes: Any) -> C:
        return dataclasses.replace(self, **changes)  # type: ignore[type-var]


def same_config(saved: dict[str, Any], config: Config) -> bool:
    """Whether a saved config equals ``config``, a key missing from the saved one counting as the default
    (so adding a field to a config does not invalidate finished results)."""
    current = config.to_json()
    defaults = {f.name: to_jsonable(f.default) for f in dataclasses.fields(config)  # type: ignore[arg-type]
                if f.default is not dataclasses.MISSING}
    for key, value in current.items():
        if saved.get(key, defaults.get(key, object())) != value:
            return False
    return True


def _kind(f: dataclasses.Field) -> type:
    t = str(f.type)
    if isinstance(f.default, bool) or t.startswith("bool"):
        return bool
    for name, kind in (("int", int), ("float", float)):
        if t.split("|")[0].strip() == name or (f.default is not None and type(f.default) is kind):
            return kind
    return str


def add_arguments(parser: argparse.ArgumentParser | Any, cls: type[Config], *, skip: Iterable[str] = (),
                  defaults: dict[str, Any] | None = None, required: Iterable[str] = ()) -> None:
    """One flag per field of ``cls`` (fields with ``cli=False`` or in ``skip`` left out). ``defaults``
    overrides the shown defaults; tuple fields are written comma-separated; a bool field ``x`` is ``--x`` /
    ``--no-x``."""
    skip, required, defaults = set(skip), set(required), defaults or {}
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        meta = f.metadata
        if f.name in skip or not meta.get("cli", True):
            continue
        flag = meta.get("flag") or "--" + f.name.replace("_", "-")
        default = defaults.get(f.name, f.default if f.default is not dataclasses.MISSING else None)
        help_text = meta.get("help") or None
        kw: dict[str, Any] = {"dest": f.name, "help": help_text}
        if f.name in required:
            kw["required"] = True
        else:
            kw["default"] = argparse.SUPPRESS  # unset flags keep the config's own default
        if meta.get("parse") is not None or isinstance(f.default, tuple) or str(f.type).startswith("tuple"):
            kw["type"] = str
            kw["metavar"] = kw.get("metavar") or "A,B,..."
            shown = ",".join(map(str, default)) if isinstance(default, tuple) else default
        elif _kind(f) is bool:
            kw["action"] = argparse.BooleanOptionalAction
            shown = default
        else:
            kw["type"] = _kind(f)
            shown = default
            if meta.get("choices"):
                kw["choices"] = meta["choices"]
        if help_text is not None and shown not in (None, "", ()):
            kw["help"] = f"{help_text} (default: {shown})"
        elif shown not in (None, "", ()):
            kw["help"] = f"default: {shown}"
        parser.add_argument(flag, **kw)


def from_arguments(cls: type[C], args: argparse.Namespace, factory: Callable[..., C] | None = None, **fixed: Any) -> C:
    """The config from parsed flags (unset flags: the field's default) and ``fixed`` values; ``factory`` (default
    ``cls``) builds it from the values given, e.g. a classmethod with other defaults."""
    values: dict[str, Any] = {}
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        if f.name in fixed or not hasattr(args, f.name):
            continue
        v = getattr(args, f.name)
        if isinstance(v, str) and f.metadata.get("parse") is not None:
            v = f.metadata["parse"](v)
            if isinstance(f.default, tuple):
                v = tuple(v)
        elif isinstance(v, str) and (isinstance(f.default, tuple) or str(f.type).startswith("tuple")):
            kind = type(f.default[0]) if isinstance(f.default, tuple) and f.default else str
            try:
                v = tuple(kind(x.strip()) for x in v.split(",") if x.strip())
            except ValueError:
                raise ValueError(f"--{f.name.replace('_', '-')} {v!r}: accepted: comma-separated "
                                 f"{kind.__name__} values, e.g. {','.join(map(str, f.default or ()))}") from None
        values[f.name] = v
    return (factory or cls)(**values, **fixed)
