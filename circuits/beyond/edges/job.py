"""Edges as a saved result and a circuit graph: senders -> key heads -> MLPs -> logits.

:class:`EdgeResult` holds an :class:`~circuits.patching.edges.EdgeSweep` (every sender into every receiver) with
each receiver's own effect on the logits (path patching to the logits, the identify sweep), and draws the circuit:
the strongest senders of each receiver, each receiver's edge to the logits. ``circuits identify --receivers`` keeps
its edges inside the identify result (``edges.pt``, ``circuit.html``); experiments save an ``EdgeResult``."""

from __future__ import annotations

import re
from typing import Any

import torch

from circuits.patching.ranking import order
from circuits.types import Component, Receiver


_TOP = re.compile(r"^\s*top\s*(\d+)\s*$", re.IGNORECASE)


def resolve_receivers(text: str, result: Any) -> list[Receiver]:
    """``"20.8,MLP19"`` as given, or ``"top5"``: the five most important components (heads and MLPs) of an identify
    result by its key rule's metric (heads of layer 0 left out: nothing comes before them)."""
    m = _TOP.match(text)
    if not m:
        return Receiver.parse_many(text)
    k = int(m.group(1))
    if k < 1:
        raise ValueError("--receivers topK needs K >= 1")
    metric = result.metric()
    heads, mlps = result.effects(metric)
    cands = [(Component("head", l, h), float(heads[l, h])) for l in range(1, heads.shape[0]) for h in range(heads.shape[1])]
    cands += [(Component.mlp(l), float(mlps[l])) for l in range(mlps.shape[0])]
    ranked = order(torch.tensor([e for _, e in cands]), metric.sign)[:k].tolist()
    return Receiver.parse_many([str(cands[i][0]) for i in ranked])
