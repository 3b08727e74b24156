"""``circuits neurons``: every neuron of some MLPs patched at END, exactly (Nikankin et al. 2025's question: how few
neurons carry an MLP's effect), and the knockout of only those neurons against the whole MLPs.

Writes, atomically, into ``--out``: ``summary.json`` (per MLP the share of neurons that carries 50/80/90% of its
neurons' summed effect, the whole MLP's effect, and knockout accuracies), ``neurons.pt`` (per-neuron per-pair
patched values), ``pairs.jsonl``, ``figure.html``, ``config.json`` and ``circuits.json``.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from circuits.beyond.neurons.config import NeuronConfig
    from circuits.beyond.neurons.result import NeuronResult


def printout(args: argparse.Namespace, config: NeuronConfig, r: NeuronResult, seconds: float) -> None:
    for layer, s in r.shares().items():
        print(f"  MLP{layer}: {100 * s['share_for_80pct']:.1f}% of neurons carry 80% of the summed neuron effect; "
              f"top 1% carry {100 * s['top1pct_of_total']:.0f}%")
    k = r.knockout
    if k:
        print(f"  accuracy: none {k['none_accuracy']:.2f}, whole MLPs {k['whole_accuracy']:.2f}, top "
              + ", ".join(f"{100 * s:g}% {a:.2f}" for s, a in zip(k['shares'], k['top_accuracy'])))
    print(f"-> {args.out}/figure.html")
