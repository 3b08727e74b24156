"""``circuits heuristics``: the top neurons of the key MLPs read over the whole operand grid (every a x b, the
template's 3-shot prefix), each classified into heuristics (an operand or the result in a range or a residue class,
a digit pattern, the answer's identity, or none; Nikankin et al., ICLR 2025), and the neurons of each rule knocked out
together: the drop of the answer's probability on the prompts the rule covers against the rest and against as many
random neurons of the same MLPs, with bootstrap intervals.

Writes, atomically, into ``--out``: ``summary.json`` (classes found, share of the top neurons' effect the classified
ones carry, the knockout's drops), ``classes.json`` (every neuron's best rule per kind with its score), ``heuristics.pt``
(effects and grid activations), ``grid.jsonl``, ``pairs.jsonl``, ``figure.html`` (grid heat maps beside their rules),
``knockout.html``, ``config.json`` and ``circuits.json``.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from circuits.beyond.heuristics.config import HeuristicsConfig
    from circuits.beyond.heuristics.result import HeuristicsResult


def printout(args: argparse.Namespace, config: HeuristicsConfig, r: HeuristicsResult, seconds: float) -> None:
    s = r.summary()
    print(f"  {s['n_classified']} of {s['n_neurons']} top neurons classified ({', '.join(f'{k} {v}' for k, v in s['class_counts'].items())}); "
          f"they carry {100 * s['share_carried']:.0f}% of the top neurons' effect")
    for name, k in s["knockout"].items():
        cov, unc = k["covered_drop"], k["uncovered_drop"]
        print(f"  knock out '{name}' ({k['n_neurons']} neurons): drop {cov['mean']:+.4f} covered "
              f"[{cov['low']:+.4f}, {cov['high']:+.4f}] vs {unc['mean']:+.4f} uncovered; random "
              f"{k['random_covered_drop']['mean']:+.4f} / {k['random_uncovered_drop']['mean']:+.4f}")
    print(f"-> {args.out}/figure.html")
