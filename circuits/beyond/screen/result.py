"""The saved screen: every node's estimate, the re-measured top ones, and the audit table."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
import torch
from torch import Tensor
from circuits.data.pairs import PromptPair, read_pairs
from circuits.identify.validity import CheckedPairs, validity_from_summary, validity_json
from circuits.patching.core.ranking import order
from circuits.patching.core.readouts import spearman
from circuits.io import Shapes, load_torch, read_json
from circuits.results import Result, write_parts
from circuits.beyond.screen.config import ScreenConfig


NS = (10, 20, 50)


def audit_table(screen: tuple[Tensor, Tensor], exact: tuple[Tensor, Tensor], sign: int,
                path: tuple[tuple[Tensor, Tensor], tuple[Tensor, Tensor]] | None = None, ns: Sequence[int] = NS,
                n_misses: int = 5) -> dict[str, Any]:
    """Screen against exact END effects over every head and MLP: Spearman, exact top-10 / top-5% missed by the
    screen's top-N, and the largest misses (``path``: screen and exact effects in path mode, to split each miss's
    error into the part through MLPs and the part through later attention)."""
    L, H = screen[0].shape
    names = [f"{l}.{h}" for l in range(L) for h in range(H)] + [f"MLP{l}" for l in range(L)]
    s = torch.cat([screen[0].reshape(-1), screen[1].reshape(-1)])
    e = torch.cat([exact[0].reshape(-1), exact[1].reshape(-1)])
    order_s = order(s, sign, keep_nan=True).tolist()
    order_e = order(e, sign, keep_nan=True).tolist()
    n5 = max(1, math.ceil(0.05 * len(e)))
    out: dict[str, Any] = {"spearman_end": spearman(s, e), "spearman_end_heads": spearman(screen[0], exact[0]),
                           "spearman_end_mlps": spearman(screen[1], exact[1]), "n_components": len(e),
                           "top5pct_size": n5}
    for n in ns:
        top = set(order_s[:n])
        out[f"exact_top10_missed_at_{n}"] = len(set(order_e[:10]) - top)
        out[f"exact_top5pct_missed_at_{n}"] = len(set(order_e[:n5]) - top)
    rank_s = {i: r for r, i in enumerate(order_s)}
    misses = [i for i in order_e[:10] if rank_s[i] >= 20] or sorted(order_e[:10], key=lambda i: -abs(float(s[i] - e[i])))
    rows = []
    for i in misses[:n_misses]:
        row = {"component": names[i], "exact": float(e[i]), "screen": float(s[i]), "exact_rank": order_e.index(i) + 1,
               "screen_rank": rank_s[i] + 1}
        if path is not None:
            ps = torch.cat([path[0][0].reshape(-1), path[0][1].reshape(-1)])
            pe = torch.cat([path[1][0].reshape(-1), path[1][1].reshape(-1)])
            err_mlp = float(ps[i] - pe[i])
            err_attn = float(s[i] - e[i]) - err_mlp
            row.update({"error": float(s[i] - e[i]), "error_with_heads_frozen": err_mlp, "error_through_attention": err_attn,
                        "why": ("later attention: the linear estimate crosses later softmaxes (saturation)"
                                if abs(err_attn) > abs(err_mlp) else "MLPs and norms after it: nonlinear")})
        if float(s[i]) * float(e[i]) < 0:
            row["note"] = "the screen has the opposite sign"
        rows.append(row)
    out["largest_misses"] = rows
    return out


@dataclass(eq=False, repr=False)
class ScreenResult(CheckedPairs, Result[ScreenConfig]):
    """A screen, the exact values of its top-N, and (with ``audit``) the END audit table."""

    kind = "screen"

    pairs: list[PromptPair]
    metric: str
    mode: str
    head_effects: Tensor  # [layer, head, offset], the screen's estimate of the metric
    mlp_effects: Tensor  # [layer, offset]
    head_q: Tensor | None = None  # [layer, head, offset], QK-fixed query nodes
    head_k: Tensor | None = None
    neuron_effects: Tensor | None = None  # [layer, d_mlp, offset] (offsets where the prompts differ)
    graddrop: dict[str, Tensor] = field(default_factory=dict)
    verified: list[dict[str, Any]] = field(default_factory=list)
    audit: dict[str, Any] | None = None
    exact_end: dict[str, Tensor] = field(default_factory=dict)  # "heads", "mlps" (and "path_*") at END, exact
    seconds: dict[str, float] = field(default_factory=dict)

    def summary(self) -> dict[str, Any]:
        out: dict[str, Any] = {"model": getattr(self.config, "model", ""), "task": getattr(self.config, "task", ""),
                               "metric": self.metric, "mode": self.mode, "n_pairs": len(self.pairs),
                               "seconds": self.seconds, "verified": self.verified, **validity_json(self._validity)}
        if self.audit is not None:
            out.update(self.audit)
        return out

    def figure(self):
        from circuits.viz.analysis_figures import screen_figure

        return screen_figure(self)

    def _write(self, folder: Path) -> None:
        from circuits.viz.figures import write_figure

        write_parts(folder, self.summary_json(), self.pairs, {"screen.pt": {
            "head_effects": self.head_effects, "mlp_effects": self.mlp_effects, "head_q": self.head_q,
            "head_k": self.head_k, "neuron_effects": self.neuron_effects, "graddrop": self.graddrop,
            "exact_end": self.exact_end}})
        write_figure(self.figure(), folder / "screen.html", validity=self.validity())

    @classmethod
    def _read(cls, folder: Path, config: ScreenConfig) -> ScreenResult:
        s = read_json(folder / "summary.json")
        t = load_torch(folder / "screen.pt", "screen")
        _check_screen(t, folder / "screen.pt")
        pairs = read_pairs(folder / "pairs.jsonl")
        audit = {k: v for k, v in s.items() if k.startswith(("spearman", "exact_top", "largest", "n_components", "top5pct",
                                                               "graddrop_"))}  # GradDrop's audit was lost on load
        return cls(config, pairs, s["metric"], s["mode"], t["head_effects"], t["mlp_effects"], t["head_q"], t["head_k"],
                   t["neuron_effects"], t["graddrop"], s.get("verified", []), audit or None, t["exact_end"],
                   s.get("seconds", {}), _validity=validity_from_summary(s, folder / "summary.json"))


def _check_screen(t: Any, path: Path) -> None:
    """A ``screen.pt`` fits itself: ``head_effects`` (and ``head_q``, ``head_k``, GradDrop's ``head``) ``[layer, head,
    offset]``, ``mlp_effects`` (GradDrop's ``mlp``) ``[layer, offset]``, GradDrop's ``input`` ``[offset]``, ``neuron_effects`` ``[layer, neuron, offset
    where the prompts differ]``, the exact END values ``heads [layer, head]`` and ``mlps [layer]``; else one line
    naming the file and the tensor."""
    shapes = Shapes(path)
    if not isinstance(t, dict) or not all(isinstance(t.get(k, {}), dict) for k in ("graddrop", "exact_end")):
        raise shapes.fail("it is not a screen's tensors (graddrop and exact_end are dictionaries of tensors)")
    head, mlp, neuron = ("layer", "head", "offset"), ("layer", "offset"), ("layer", "neuron", "differing offset")
    shapes.tensor("head_effects", t.get("head_effects"), head, no_inf=True)
    shapes.tensor("mlp_effects", t.get("mlp_effects"), mlp, no_inf=True)
    for k in ("head_q", "head_k"):
        if t.get(k) is not None:
            shapes.tensor(k, t[k], head, no_inf=True)
    if t.get("neuron_effects") is not None:
        shapes.tensor("neuron_effects", t["neuron_effects"], neuron, no_inf=True)
    graddrop = {"head": head, "mlp": mlp, "neuron": neuron, "input": ("offset",)}  # input: MIB's input node
    for k, v in t.get("graddrop", {}).items():
        if k not in graddrop:
            raise shapes.fail(f"graddrop names {k!r}, not head, mlp, neuron or input")
        shapes.tensor(f"graddrop.{k}", v, graddrop[k], no_inf=True)
    for k, v in t.get("exact_end", {}).items():
        shapes.tensor(f"exact_end.{k}", v, ("layer", "head") if k.endswith("heads") else ("layer",), no_inf=True)
