"""Job configs: frozen dataclasses that validate themselves, save beside their results, and become CLI flags.

Every job and experiment config derives from :class:`Config`. One function, :func:`add_arguments`, turns
a config's fields into ``argparse`` flags (``n_pairs`` -> ``--n-pairs``, or the field's own ``flag``), and
:func:`from_arguments` builds the config back, so the command line of ``circuits identify`` and of every
script in ``experiments/`` is made the same way. Field metadata (see :func:`option`) holds help texts,
flag names, choices and the field's range: ``count(64)`` is a whole number from 1 to :data:`MAX_COUNT`, ``option(x,
minimum=..., maximum=...)`` bounds any number (each element of a list, which may also be ``nonempty`` and ``unique``),
and every config checks its fields' ranges when it is built (:func:`check_ranges`), so a new job's flags are checked by
being declared. The command line builds the config from the flags before it imports torch: a value out of range is
one line at once (``circuits identify: error: --pairs -1: must be at least 1``).

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
import math
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from circuits.io import to_jsonable

C = TypeVar("C", bound="Config")


# The largest count any field accepts unless it declares its own maximum: a million pairs, prompts, resamples or
# steps is past what a job here can hold or finish in a session, and a larger number is a typo (or an overflow).
MAX_COUNT = 1_000_000


def option(default: Any = dataclasses.MISSING, *, help: str = "", flag: str | None = None,
           choices: Iterable[Any] | None = None, cli: bool = True, parse: Callable[[str], Any] | None = None,
           skip: Iterable[str] = (), minimum: float | None = None, maximum: float | None = None, above: float | None = None,
           nonempty: bool = False, unique: bool = False, per_model: str | None = None, is_count: bool = False,
           **kwargs: Any) -> Any:
    """A config field with CLI metadata: its ``help``, its ``flag`` (default ``--field-name``), ``choices``,
    ``parse`` (text -> value, for fields such as head lists), or ``cli=False`` for fields the command line
    does not set. For a nested config (``default`` a :class:`Config`), ``skip`` names its fields that get no flag
    (the outer config sets them itself).

    The field's range is part of its declaration, checked whenever the config is built (from flags, JSON or Python,
    before any model loads; :func:`check_ranges`): ``minimum`` / ``maximum`` bound a number (``above``: a bound it
    must exceed, e.g. 0 for a budget), or each element of a
    tuple (an integer field with a ``minimum`` and no ``maximum`` is a count, at most :data:`MAX_COUNT`; ``None`` is
    left to the field's own meaning), ``nonempty`` refuses an empty tuple, ``unique`` a tuple naming a value twice.
    ``per_model`` bounds what only the model's size tells (``"heads"``: at most its number of attention heads;
    ``"mlps"``: at most its number of MLPs; ``"layer"``: a layer index below its number of layers), checked by :func:`check_model_ranges` once the model is
    loaded and before any work."""
    if minimum is not None and maximum is None and _is_int_default(default):
        maximum = MAX_COUNT
    meta = {"help": help, "flag": flag, "choices": tuple(choices) if choices is not None else None, "cli": cli,
            "parse": parse, "skip": tuple(skip), "minimum": minimum, "maximum": maximum, "above": above, "nonempty": nonempty,
            "unique": unique, "per_model": per_model, "count": is_count}
    if default is not dataclasses.MISSING and isinstance(default, (list, dict, set)):
        return dataclasses.field(default_factory=lambda: type(default)(default), metadata=meta, **kwargs)
    return dataclasses.field(default=default, metadata=meta, **kwargs)


def _is_int_default(default: Any) -> bool:
    values = default if isinstance(default, tuple) else (default,)
    return all(isinstance(v, int) and not isinstance(v, bool) for v in values if v is not None)


def count(default: Any = dataclasses.MISSING, *, minimum: int = 1, **kwargs: Any) -> Any:
    """A count (pairs, prompts, heads, resamples, ...): an integer of at least ``minimum`` (1; 0 where the help says
    what 0 means) and at most :data:`MAX_COUNT` unless ``maximum`` says otherwise. For a tuple, each element."""
    return option(default, minimum=minimum, is_count=True, **kwargs)


def _num(x: Any) -> str:
    return str(int(x)) if isinstance(x, (int, float)) and math.isfinite(x) and x == int(x) else f"{x:g}"


def _shown(v: Any) -> str:
    return ",".join(map(str, v)) if isinstance(v, (tuple, list)) else str(v)


def check_ranges(config: Any) -> None:
    """Every field of ``config`` inside the range its :func:`option` declares, else a ValueError of one line naming
    the field's flag and its value (``--pairs -1: must be at least 1``)."""
    for f in dataclasses.fields(config):
        check_field(f, getattr(config, f.name))


def check_model_ranges(config: Any, n_layers: int, n_heads: int) -> None:
    """The fields of ``config`` that declare ``per_model`` bounds inside those of a model of ``n_layers`` layers of
    ``n_heads`` heads, else a ValueError of one line (``--ks 0,1000: each value must be at most 270 (the model's
    heads), got 1000``): called when the model is loaded, before the work."""
    bounds = {"heads": (n_layers * n_heads, "the model's heads"), "mlps": (n_layers, "the model's MLPs"),
              "layer": (n_layers - 1, "the model's last layer")}
    for f in dataclasses.fields(config):
        kind = f.metadata.get("per_model")
        v = getattr(config, f.name)
        if kind is None or v is None:
            continue
        hi, what = bounds[kind]
        for x in (v if isinstance(v, (tuple, list)) else (v,)):
            if x > hi:
                name = _flag(f) if f.metadata.get("cli", True) else f.name
                each = "each value " if isinstance(v, (tuple, list)) else ""
                raise ValueError(f"{name} {_shown(v)}: {each}must be at most {hi} ({what}), got {x}")


def check_arguments(cls: type[Config], args: argparse.Namespace) -> None:
    """The flags given in ``args`` checked against the ranges their fields declare, without building the config (for
    a command that builds it from more than its flags, e.g. finetune's heads from ``--heads-from``)."""
    for f, _ in _cli_fields(cls):
        if hasattr(args, f.name):
            check_field(f, _value(f, getattr(args, f.name)))


def check_field(f: dataclasses.Field, v: Any) -> None:
    """``v`` inside the range field ``f`` declares (see :func:`option`), else a ValueError of one line."""
    meta = f.metadata
    lo, hi, choices, gt = meta.get("minimum"), meta.get("maximum"), meta.get("choices"), meta.get("above")
    many = isinstance(v, (tuple, list))
    if v is None or (lo is None and hi is None and gt is None and not meta.get("nonempty") and not meta.get("unique")
                     and not (many and choices)):
        return
    name = _flag(f) if meta.get("cli", True) else f.name
    if many and meta.get("nonempty") and not v:
        raise ValueError(f"{name} is empty: give at least one value")
    if many and choices:  # a list's choices (argparse checks a single value's)
        unknown = [x for x in v if x not in choices]
        if unknown:
            raise ValueError(f"{name} {_shown(v)}: unknown {unknown[0]!r}; accepted: {_shown(choices)}")
    for x in (v if many else (v,)):
        if isinstance(x, bool) or not isinstance(x, (int, float)):
            if lo is not None or hi is not None or gt is not None:
                raise ValueError(f"{name} {_shown(v)}: {x!r} is not a number")
            continue
        what = f"{name} {_shown(v)}: " + ("each value " if many else "")
        if x != x:  # NaN
            raise ValueError(f"{what}must be a number, got nan")
        if lo is not None and x < lo:
            raise ValueError(f"{what}must be at least {_num(lo)}" + (f", got {_num(x)}" if many else ""))
        if gt is not None and not x > gt:
            raise ValueError(f"{what}must be more than {_num(gt)}" + (f", got {_num(x)}" if many else ""))
        if hi is not None and x > hi:
            raise ValueError(f"{what}must be at most {_num(hi)}" + (f", got {_num(x)}" if many else ""))
    if many and meta.get("unique") and len(set(v)) != len(v):
        twice = sorted({x for x in v if list(v).count(x) > 1}, key=str)
        raise ValueError(f"{name} {_shown(v)}: names {_shown(twice)} more than once")


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
    """Mixin for frozen dataclass configs. Building one checks every field's declared range (:func:`check_ranges`)
    before the class's own ``__post_init__`` runs, whether or not that calls ``super()``."""

    def __post_init__(self) -> None:
        check_ranges(self)

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        own = cls.__dict__.get("__post_init__")
        if own is not None and not getattr(own, "_checks_ranges", False):
            def __post_init__(self: Any) -> None:
                check_ranges(self)
                own(self)

            __post_init__._checks_ranges = True  # type: ignore[attr-defined]
            __post_init__.__doc__ = own.__doc__
            cls.__post_init__ = __post_init__  # type: ignore[attr-defined]

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
                    if _element_kind(f) is int:  # a list flag with no default saved its text ("0","1") before issue 41
                        v = tuple(int(x) if isinstance(x, str) and x.strip().lstrip("-").isdigit() else x for x in v)
                want = _SCALARS.get(str(f.type).strip())
                if want is not None and not isinstance(v, want):
                    raise ValueError(f"field {f.name!r} is {str(v)[:40]} ({type(v).__name__}), not {f.type}")
                out[f.name] = v
        return cls(**out)

    def replace(self: C, **changes: Any) -> C:
        return dataclasses.replace(self, **changes)  # type: ignore[type-var]


# A saved value of a field declared exactly as one of these must be of that type (``"model": 5`` is refused when the
# config is read, naming the field, not later where the model loads). Numbers are checked by their declared ranges.
_SCALARS: dict[str, Any] = {"str": str, "bool": bool}


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
        if _range_text(f):
            kw["help"] = f"{kw['help']}; {_range_text(f)}" if kw.get("help") else _range_text(f)
        parser.add_argument(flag, **kw)


def _range_text(f: dataclasses.Field) -> str:
    """The declared range as the help shows it (``1..1000000``, ``each 0..1000000``), or ``""``."""
    meta = f.metadata
    lo, hi, gt = meta.get("minimum"), meta.get("maximum"), meta.get("above")
    if lo is None and hi is None and gt is None:
        return ""
    low = f"> {_num(gt)}" if gt is not None else (f">= {_num(lo)}" if lo is not None else "")
    high = f"<= {_num(hi)}" if hi is not None else ""
    if meta.get("per_model"):
        high = f"<= the model's {dict(heads='heads', mlps='MLPs', layer='last layer')[meta['per_model']]}"
    each = "each " if isinstance(f.default, tuple) or str(f.type).startswith("tuple") else ""
    return f"{each}{', '.join(x for x in (low, high) if x)}"


def _element_kind(f: dataclasses.Field) -> type:
    """The element type a ``tuple[int, ...]`` (or float) field's annotation names; str otherwise."""
    t = str(f.type).replace(" ", "")
    return {"tuple[int,...]": int, "tuple[float,...]": float}.get(t, str)


def _value(f: dataclasses.Field, v: Any) -> Any:
    if isinstance(v, str) and f.metadata.get("parse") is not None:
        v = f.metadata["parse"](v)
        if isinstance(f.default, tuple):
            v = tuple(v)
    elif isinstance(v, str) and (isinstance(f.default, tuple) or str(f.type).startswith("tuple")):
        kind = type(f.default[0]) if isinstance(f.default, tuple) and f.default else _element_kind(f)
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
