"""The vocabulary (heads, components, ablations) and configs: parsing, JSON, command-line flags."""

from __future__ import annotations

import argparse
from dataclasses import dataclass

import pytest

from circuits.config import Config, add_arguments, from_arguments, option, same_config
from circuits.types import Ablation, Component, Head, parse_heads, parse_layers


def test_head_is_a_tuple_that_prints_and_parses():
    h = Head(21, 2)
    assert h == (21, 2) and str(h) == "21.2" and tuple(h) == (21, 2)
    layer, head = h
    assert (layer, head) == (21, 2)
    for text in ("21.2", "L21H2", " 21 . 2 ", [21, 2, -0.1], (21, 2)):
        assert Head.parse(text) == h
    for bad in ("21-2", "21", "a.b", [1], None):
        with pytest.raises(ValueError, match="LAYER.HEAD"):
            Head.parse(bad)
    with pytest.raises(ValueError, match="outside this model"):
        Head(5, 0).check(n_layers=3, n_heads=4)


def test_components_parse_and_order():
    assert Component.parse("20.8") == Component("head", 20, 8) and str(Component.parse("MLP19")) == "MLP19"
    assert Component.parse("mlp 3") == Component.mlp(3)
    assert Component.of(Head(1, 2)).as_head == Head(1, 2)
    assert [str(c) for c in sorted([Component.mlp(1), Component("head", 1, 3), Component("head", 0, 1)],
                                   key=Component.sort_key)] == ["0.1", "1.3", "MLP1"]
    with pytest.raises(ValueError, match="needs a head index"):
        Component("head", 1)
    with pytest.raises(ValueError, match="MLP<layer>"):
        Component.parse("MLPx")


def test_lists():
    assert parse_heads("21.2, 20.6") == [Head(21, 2), Head(20, 6)]
    assert parse_layers("19,20") == [19, 20]
    with pytest.raises(ValueError, match="No heads given"):
        parse_heads(" , ")
    with pytest.raises(ValueError, match="layer indices"):
        parse_layers("19,x")
    assert Ablation.parse("zero") is Ablation.ZERO
    with pytest.raises(ValueError, match="accepted: mean, zero"):
        Ablation.parse("resample-ish")


@dataclass(frozen=True)
class Demo(Config):
    name: str = option("x", help="a name")
    n: int = option(3, flag="--count")
    rate: float | None = option(None)
    flag: bool = option(False, help="turn it on")
    keep: bool = option(True)
    ks: tuple[int, ...] = option((0, 1))
    heads: tuple[Head, ...] = option((), parse=parse_heads)
    hidden: str = option("h", cli=False)
    mode: str = option("path", choices=("path", "activation"))


def _parse(argv):
    parser = argparse.ArgumentParser()
    add_arguments(parser, Demo)
    return from_arguments(Demo, parser.parse_args(argv))


def test_flags_from_a_config():
    assert _parse([]) == Demo()
    got = _parse(["--name", "y", "--count", "5", "--rate", "0.5", "--flag", "--no-keep", "--ks", "2,4", "--heads", "1.2,0.3",
                  "--mode", "activation"])
    assert got == Demo(name="y", n=5, rate=0.5, flag=True, keep=False, ks=(2, 4), heads=(Head(1, 2), Head(0, 3)),
                       mode="activation")
    with pytest.raises(SystemExit):
        _parse(["--hidden", "z"])
    with pytest.raises(SystemExit):
        _parse(["--mode", "causal"])
    with pytest.raises(ValueError, match=r"--ks '2,x': accepted: comma-separated int values, e\.g\. 0,1"):
        _parse(["--ks", "2,x"])


def test_config_json_roundtrip_and_same_config():
    c = Demo(ks=(5,), heads=(Head(1, 2),))
    j = c.to_json()
    assert j["ks"] == [5] and j["heads"] == [[1, 2]]
    assert Demo.from_json({**j, "unknown": 1}) == c
    assert same_config(j, c)
    assert same_config({k: v for k, v in j.items() if k != "hidden"}, c)  # a field added later: its default
    assert not same_config({**j, "n": 4}, c)


@dataclass(frozen=True)
class Outer(Config):
    demo: Demo = option(Demo(name="inner"), skip=("hidden", "mode"), help="a nested config")
    seeds: tuple[int, ...] = option((0, 1))
    label: str = option("o", help="the outer label")


def _parse_outer(argv):
    parser = argparse.ArgumentParser()
    add_arguments(parser, Outer)
    return parser, from_arguments(Outer, parser.parse_args(argv))


def test_a_nested_config_is_flattened_into_flags_and_rebuilt():
    parser, got = _parse_outer([])
    assert got == Outer() and got.demo.name == "inner"  # the outer default's nested values, not Demo's own
    flags = {a.option_strings[0] for a in parser._actions if a.option_strings}
    assert {"--name", "--count", "--ks", "--seeds", "--label"} <= flags and not flags & {"--hidden", "--mode", "--demo"}
    _, got = _parse_outer(["--count", "7", "--heads", "1.2", "--seeds", "3", "--no-keep"])
    assert got == Outer(demo=Demo(name="inner", n=7, heads=(Head(1, 2),), keep=False), seeds=(3,))
    with pytest.raises(SystemExit):
        _parse_outer(["--mode", "activation"])  # skipped: the outer config sets it


def test_a_nested_config_serialises_as_an_object_and_loads_typed():
    c = Outer(demo=Demo(name="n", ks=(4,), heads=(Head(2, 1),)), seeds=(5, 6))
    j = c.to_json()
    assert j["demo"] == {**Demo(name="n", ks=(4,), heads=(Head(2, 1),)).to_json()} and j["seeds"] == [5, 6]
    back = Outer.from_json(j)
    assert back == c and isinstance(back.demo, Demo) and back.demo.heads == (Head(2, 1),)
    # keys missing from the saved object keep the outer default's values; an older flat file is read too
    assert Outer.from_json({"demo": {"n": 9}}).demo == Demo(name="inner", n=9)
    assert Outer.from_json({"name": "flat", "n": 2, "label": "x"}) == Outer(demo=Demo(name="flat", n=2), label="x")
    assert same_config(j, c) and same_config({k: v for k, v in j.items() if k != "label"}, c)
    assert not same_config({**j, "demo": {**j["demo"], "n": 8}}, c)
    assert not same_config({**j, "demo": {**j["demo"], "mode": "causal-but-any-string"}}, c)


def test_a_flag_declared_twice_is_refused_and_redefault_keeps_the_declaration():
    from circuits.config import redefault

    @dataclass(frozen=True)
    class Twice(Config):
        demo: Demo = option(Demo())
        name: str = option("copy")

    with pytest.raises(ValueError, match="--name .* declared twice"):
        add_arguments(argparse.ArgumentParser(), Twice)

    @dataclass(frozen=True)
    class Sub(Demo):
        n: int = redefault(Demo, "n", 11)

    parser = argparse.ArgumentParser()
    add_arguments(parser, Sub)
    assert from_arguments(Sub, parser.parse_args([])).n == 11 and from_arguments(Sub, parser.parse_args(["--count", "2"])).n == 2
    with pytest.raises(ValueError, match="no field 'nope'"):
        redefault(Demo, "nope", 1)
