"""Job configs: frozen dataclasses that validate themselves, save beside their results, and become CLI flags.

Every job and experiment config derives from :class:`Config`. One function, :func:`add_arguments`, turns
a config's fields into ``argparse`` flags (``n_pairs`` -> ``--n-pairs``, or the field's own ``flag``), and
:func:`from_arguments` builds the config back, so the command line of ``circuits identify`` and of every
script in ``experiments/`` is made the same way. Field metadata (see :func:`option`) holds help texts,
flag names and choices.

Configs compose: a field whose default is itself a :class:`Config` (``identify: IdentifyConfig =
option(IdentifyConfig())``) is *nested*. Its fields become flags of the outer command under their own flag names
(no prefix: one flag name per field everywhere; a name given twice is an error when the parser is built), less the
ones named in the field's ``skip``. In JSON a nested config is a JSON object under its field name::

    {"identify": {"model": "smollm2", "task": "addition", "n_pairs": 64, ...}, "seeds": [0, 1, 2], ...}

and :meth:`Config.from_json` rebuilds it as the typed config (keys missing there keep the outer default's values;
an older flat file, with the nested fields at the top level, is read too).

This module imports neither torch nor transformer_lens: the command line builds every parser from configs without
loading them.
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
           skip: Iterable[str] = (), **kwargs: Any) -> Any:
    """A config field with CLI metadata: its ``help``, its ``flag`` (default ``--field-name``), ``choices``,
    ``parse`` (text -> value, for fields such as head lists), or ``cli=False`` for fields the command line
    does not set. For a nested config (``default`` a :class:`Config`), ``skip`` names its fields that get no flag
    (the outer config sets them itself)."""
    meta = {"help": help, "flag": flag, "choices": tuple(choices) if choices is not None else None, "cli": cli,
            "parse": parse, "skip": tuple(skip)}
    if default is not dataclasses.MISSING and isinstance(default, (list, dict, set)):
        return dataclasses.field(default_factory=lambda: type(default)(default), metadata=meta, **kwargs)
    return dataclasses.field(default=default, metadata=meta, **kwargs)


def redefault(cls: type[Config], name: str, default: Any) -> Any:
    """Field ``name`` of ``cls`` with another default, for a subclass: its flag, help text and choices stay the ones
    ``cls`` declares (``n_pairs: int = redefault(IdentifyConfig, "n_pairs", 24)``)."""
    f = next((f for f in dataclasses.fields(cls) if f.name == name), None)  # type: ignore[arg-type]
    if f is None:
        raise ValueError(f"{cls.__name__} has no field {name!r}")
    return dataclasses.field(default=default, metadata=f.metadata)


def nested_fields(cls: type[Config] | Config) -> dict[str, Config]:
    """The nested configs of ``cls``: field name -> its default instance."""
    return {f.name: f.default for f in dataclasses.fields(cls)  # type: ignore[arg-type]
            if isinstance(f.default, Config)}


class Config:
    """Mixin for frozen dataclass configs."""

    def to_json(self) -> dict[str, Any]:
        """Plain JSON values; a nested config is a JSON object under its field name."""
        return to_jsonable(self)

    @classmethod
    def from_json(cls: type[C], data: dict[str, Any]) -> C:
        """From saved JSON; keys this version does not know are ignored, lists become tuples where the field
        is a tuple, nested configs are rebuilt typed (from their own object, or from the top-level keys of an
        older flat file)."""
        out = {}
        nested = nested_fields(cls)
        for f in dataclasses.fields(cls):  # type: ignore[arg-type]
            if f.name in nested:
                inner = data.get(f.name)
                if not isinstance(inner, dict):  # an older flat file: the nested fields at the top level
                    inner = data
                default = nested[f.name]
                out[f.name] = type(default).from_json({**default.to_json(), **inner})
            elif f.name in data:
                v = data[f.name]
                if isinstance(v, list) and (isinstance(f.default, tuple) or str(f.type).startswith("tuple")):
                    v = tuple(tuple(x) if isinstance(x, list) else x for x in v)
                out[f.name] = v
        return cls(**out)

    def replace(self: C, **changes: Any) -> C:
        return dataclasses.replace(self, **changes)  # type: ignore[type-var]


def same_config(saved: dict[str, Any], config: Config) -> bool:
    """Whether a saved config equals ``config``, a key missing from the saved one counting as the default
    (so adding a field to a config does not invalidate finished results); nested configs compare field by field."""
    try:
        return type(config).from_json(saved).to_json() == config.to_json()
    except (TypeError, ValueError):
        return False


def _kind(f: dataclasses.Field) -> type:
    t = str(f.type)
    if isinstance(f.default, bool) or t.startswith("bool"):
        return bool
    for name, kind in (("int", int), ("float", float)):
        if t.split("|")[0].strip() == name or (f.default is not None and type(f.default) is kind):
            return kind
    return str


def _flag(f: dataclasses.Field) -> str:
    return f.metadata.get("flag") or "--" + f.name.replace("_", "-")


def _cli_fields(cls: type[Config], skip: Iterable[str] = (), defaults: Config | None = None,
                ) -> Iterable[tuple[dataclasses.Field, Any]]:
    """Every field that gets a flag, nested configs flattened, with the default it shows."""
    skip = set(skip)
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        meta = f.metadata
        if f.name in skip or not meta.get("cli", True):
            continue
        default = getattr(defaults, f.name) if defaults is not None else f.default
        if isinstance(f.default, Config):
            yield from _cli_fields(type(f.default), meta.get("skip", ()), default)
        else:
            yield f, (None if default is dataclasses.MISSING else default)


def add_arguments(parser: argparse.ArgumentParser | Any, cls: type[Config], *, skip: Iterable[str] = (),
                  defaults: dict[str, Any] | None = None, required: Iterable[str] = ()) -> None:
    """One flag per field of ``cls`` (fields with ``cli=False`` or in ``skip`` left out; nested configs' fields
    flattened in). ``defaults`` overrides the shown defaults; tuple fields are written comma-separated; a bool field
    ``x`` is ``--x`` / ``--no-x``."""
    required, defaults = set(required), defaults or {}
    seen: dict[str, str] = {}
    for f, default in _cli_fields(cls, skip):
        meta = f.metadata
        flag = _flag(f)
        if flag in seen or f.name in seen.values():
            raise ValueError(f"{cls.__name__}: flag {flag} (field {f.name}) is declared twice; nest the config "
                             "that declares it instead of copying the field")
        seen[flag] = f.name
        default = defaults.get(f.name, default)
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


def _value(f: dataclasses.Field, v: Any) -> Any:
    if isinstance(v, str) and f.metadata.get("parse") is not None:
        v = f.metadata["parse"](v)
        if isinstance(f.default, tuple):
            v = tuple(v)
    elif isinstance(v, str) and (isinstance(f.default, tuple) or str(f.type).startswith("tuple")):
        kind = type(f.default[0]) if isinstance(f.default, tuple) and f.default else str
        try:
            v = tuple(kind(x.strip()) for x in v.split(",") if x.strip())
        except ValueError:
            raise ValueError(f"{_flag(f)} {v!r}: accepted: comma-separated "
                             f"{kind.__name__} values, e.g. {','.join(map(str, f.default or ()))}") from None
    return v


def _values(cls: type[Config], args: argparse.Namespace, fixed: dict[str, Any], skip: Iterable[str] = ()) -> dict[str, Any]:
    values: dict[str, Any] = {}
    skip = set(skip)
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        if f.name in fixed or f.name in skip or not f.metadata.get("cli", True):
            continue
        if isinstance(f.default, Config):
            inner = _values(type(f.default), args, {}, f.metadata.get("skip", ()))
            if inner:
                values[f.name] = f.default.replace(**inner)
        elif hasattr(args, f.name):
            values[f.name] = _value(f, getattr(args, f.name))
    return values


def from_arguments(cls: type[C], args: argparse.Namespace, factory: Callable[..., C] | None = None, **fixed: Any) -> C:
    """The config from parsed flags (unset flags: the field's default; a nested config: its default with the flags
    given) and ``fixed`` values; ``factory`` (default ``cls``) builds it from the values given, e.g. a classmethod
    with other defaults."""
    return (factory or cls)(**_values(cls, args, fixed), **fixed)
