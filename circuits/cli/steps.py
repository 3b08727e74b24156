"""What the commands of the paper's step 1b and step 2 (``circuits knockout``, ``transfer``, ``attention``,
``attention-views``, ``lens``) and ``circuits edges`` say when they finish: the result's headline numbers and where
its figure is. Each is a job table entry's ``printout`` (:mod:`circuits.jobs`), called with the parsed flags, the
config, the result and the command's seconds."""

from __future__ import annotations

import argparse
from typing import Any


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.0f}%"


def _heads(heads: Any) -> str:
    return ", ".join(f"{h[0]}.{h[1]}" for h in heads)


def knockout(args: argparse.Namespace, config: Any, r: Any, seconds: float) -> None:
    c = r.curve
    i = c.ks.index(max(c.ks))
    rnd = sum(row[i] for row in c.random_accuracy) / max(1, len(c.random_accuracy))
    print(f"[{r.task}] {r.n_pairs} pairs in {seconds:.0f} s: accuracy {_pct(c.effect_accuracy[0])} with no head out; "
          f"with {c.ks[i]} heads out {_pct(c.effect_accuracy[i])} for the top heads ({_heads(c.ranking[:3])}, ...), "
          f"{_pct(rnd)} for random ones{_gap(c)} -> {args.out}/figure.html")


def _gap(c: Any) -> str:
    """The key-vs-random accuracy gap at the largest k with its bootstrap interval over pairs, and whether it holds 0."""
    g = c.gap() if c.n_pairs else None
    if g is None:
        return ""
    where = "above 0" if g["low"] > 0 else "holds 0: not told apart from random heads on these pairs"
    return (f"; gap {g['gap'] * 100:+.1f} points ({g['level']:.0%} bootstrap interval over pairs "
            f"{g['low'] * 100:+.1f} to {g['high'] * 100:+.1f}, {where})")


def transfer(args: argparse.Namespace, config: Any, r: Any, seconds: float) -> None:
    print(f"{len(r.key_heads)} key heads out ({_heads(r.key_heads)}), {seconds:.0f} s:")
    for name, v in r.results.items():
        print(f"  {name:>16}: {_pct(v['accuracy_before'])} -> {_pct(v['accuracy_after'])} "
              f"(random heads {_pct(v.get('accuracy_random_heads'))}, n={v.get('n', '?')})")
    print(f"-> {args.out}/figure.html")


def attention(args: argparse.Namespace, config: Any, r: Any, seconds: float) -> None:
    for op, d in r.by_operation.items():
        print(f"  {op}: " + ", ".join(f"{h} {role}" for h, role in d.get("dominant", {}).items()))
    print(f"the most-attended role of each key head, {seconds:.0f} s -> {args.out}/figure.html")


def views(args: argparse.Namespace, config: Any, r: Any, seconds: float) -> None:
    print(f"heads {_heads(r.heads)} on {len(r.prompts)} prompts, {seconds:.0f} s -> {args.out}/figure.html")


def lens(args: argparse.Namespace, config: Any, r: Any, seconds: float) -> None:
    start = f"layer {r.writing_start}" if r.writing_start is not None else "no layer"
    print(f"[{config.task}] {r.n_pairs} pairs, {seconds:.0f} s: MLP inputs point at A most at layer {r.peak('in_A')}, "
          f"at B at layer {r.peak('in_B')}; the MLPs write the answer from {start} -> {args.out}/figure.html")


def edges(args: argparse.Namespace, config: Any, r: Any, seconds: float) -> None:
    print(f"[{config.task}] edges into {', '.join(r.receiver_effects)} on {len(r.pairs)} pairs, {seconds:.0f} s "
          f"-> {args.out}/circuit.html")
