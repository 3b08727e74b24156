"""``circuits numbers``: how the key heads and MLPs compute the answer's number (issue 32). Their direct effect at END
on every single-token number's logit, decomposed into Fourier components over the number line (Zhou et al. 2024:
energy share by period, the dominant periods); and, on addition, the model's accuracy on two-digit sums and, where
it handles them, which neurons of the key MLPs move the answer's units digit and which its tens digit, by patching
one operand digit at a time (Baeumel et al. 2025).

Writes, atomically, into ``--out``: ``summary.json`` (shares by period per component, dominant periods, heads vs MLPs,
two-digit accuracy, each neuron's label and score), ``numbers.pt`` (direct effects per pair, energies, digit effects
per problem), ``figure.html`` (number line and spectrum), ``digits.html`` (the digit map, where neurons were
labelled), ``config.json`` and ``circuits.json``.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from circuits.explain.numbers.config import NumbersConfig
    from circuits.explain.numbers.result import NumbersResult


def printout(args: argparse.Namespace, config: NumbersConfig, r: NumbersResult, seconds: float) -> None:
    s = r.summary()
    for kind, shares in s["by_kind"].items():
        best = max(shares, key=lambda p: shares[p])
        print(f"  {'heads' if kind == 'head' else 'MLPs'}: the largest mean share of energy is at period {best} "
              f"({shares[best]:.0%})")
    if "two_digit_accuracy" in s:
        print(f"  two-digit sums: {s['two_digit_accuracy']:.0%} of {s['n_problems']} right (greedy)")
    if s.get("label_counts"):
        print("  neurons: " + ", ".join(f"{n} {lab}" for lab, n in s["label_counts"].items()))
    if r.note:
        print(f"  {r.note}")
    print(f"-> {args.out}/figure.html")
