"""The engine registry: every ranking engine by name, how to run it, what it supports and its plain reference loop.

An :class:`Engine` runs on a model and prompt pairs and returns :class:`~circuits.patching.scores.Scores`; its
``reference`` runs the plain one-forward-per-component (or full-prompt) loop of :mod:`circuits.patching.plain` /
:mod:`circuits.patching.reference` on a :class:`~circuits.data.pairs.PairBatch` and returns the same Scores, which
``tests/unit/test_engine_registry.py`` (and its twin in ``tests/backends/``) compares on the tiny model of every
family for every entry. :data:`ENGINES` is what the faithfulness job ranks with, what ``circuits identify --engine``
offers (the entries that support ``"end"`` with exact values) and where the report's colours come from. A new
engine is one module plus one entry here.

``python -c "from circuits.patching.registry import ENGINES; print(*ENGINES.values(), sep='\\n')"`` lists them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from circuits.types import DEFAULT_METRIC

if TYPE_CHECKING:  # the registry itself imports no torch: configs and the command line read its names
    from circuits.data.pairs import PairBatch, Pairs
    from circuits.models.backend import Model
    from circuits.patching.metrics import Metric
    from circuits.patching.scores import Scores

# Capabilities an engine may list in ``supports``.
CAPABILITIES = ("end", "all_positions", "neurons", "edges", "gqa")
POSITIONS = ("end", "all")


def at_end(scores: Scores) -> Scores:
    """Scores by offset reduced to END (offset 0): one value per component, no offset axis."""
    if not scores.offsets:
        return scores
    from dataclasses import replace

    return replace(scores, parts={k: v[..., 0] for k, v in scores.parts.items()}, offsets=False, per_pair={})


@dataclass(frozen=True)
class Engine:
    """One ranking engine.

    ``run(model, pairs, *, metric, positions, progress, memory_mb, **options) -> Scores``: the engine (``positions``
    ``"end"`` or ``"all"``, ``None`` for its first of ``positions``). ``reference(model, batch, *, metric, positions,
    **options) -> Scores``: its plain loop (slow; for tests). ``supports``: capabilities (:data:`CAPABILITIES`);
    ``refuses``: model features it refuses, as data (``{feature: when}``); ``exact``: whether its values are exact
    patching effects (not first-order estimates); ``color``: its colour in the report's figures; ``quick``: options
    that keep a test run small; ``doc``: one line."""

    name: str
    run_fn: Callable[..., Scores] = field(repr=False)
    reference_fn: Callable[..., Scores] = field(repr=False)
    positions: tuple[str, ...]
    supports: frozenset[str]
    color: str
    doc: str
    exact: bool = True
    refuses: dict[str, str] = field(default_factory=dict)
    quick: dict[str, Any] = field(default_factory=dict)
    sweep_mode: str | None = None  # the END sweep's mode, where the engine is it (``circuits identify --engine``)

    def _positions(self, positions: str | None) -> str:
        p = positions or self.positions[0]
        if p not in self.positions:
            raise ValueError(f"Engine {self.name!r} scores positions {', '.join(self.positions)}; not {p!r}")
        return p

    def run(self, model: Model, pairs: Pairs, *, metric: str | Metric = DEFAULT_METRIC, positions: str | None = None,
            progress: bool = False, memory_mb: float = 1024, **options: Any) -> Scores:
        """The engine's scores of every component (see the class docstring)."""
        return self.run_fn(model, pairs, metric=metric, positions=self._positions(positions), progress=progress,
                           memory_mb=memory_mb, **options)

    def reference(self, model: Model, batch: PairBatch, *, metric: str | Metric = DEFAULT_METRIC,
                  positions: str | None = None, **options: Any) -> Scores:
        """The same scores from the plain reference loop."""
        return self.reference_fn(model, batch, metric=metric, positions=self._positions(positions), **options)

    @property
    def reference_name(self) -> str:
        """The plain loop the reference calls (module and function)."""
        return getattr(self.reference_fn, "__doc__", "").split("\n")[0].strip()

    def describe(self) -> str:
        """One line: name, positions, capabilities, refusals, reference loop and meaning."""
        refuses = f"; refuses {', '.join(f'{k} ({v})' for k, v in self.refuses.items())}" if self.refuses else ""
        return (f"{self.name:<17} {'exact' if self.exact else 'estimate':<8} positions {'/'.join(self.positions):<8} "
                f"supports {','.join(sorted(self.supports))}{refuses}\n{'':<18}{self.doc}\n{'':<18}reference: "
                f"{self.reference_name}")

    def __str__(self) -> str:
        return self.describe()


# --- the engines -----------------------------------------------------------------------------------------------
def _exact(mode: str) -> tuple[Callable[..., Scores], Callable[..., Scores]]:
    def run(model, pairs, *, metric, positions, progress, memory_mb, **options) -> Scores:
        from circuits.patching.engine import sweep

        return sweep(model, pairs, mode, memory_mb=memory_mb, progress=progress, **options).scores(metric)  # type: ignore[arg-type]

    def reference(model, batch, *, metric, positions, **options) -> Scores:
        """circuits.patching.reference.sweep_plain: one run_with_hooks per component"""
        from circuits.patching.engine import SweepResult, all_components
        from circuits.patching.readouts import READOUTS, Readouts
        from circuits.patching.reference import sweep_plain

        cfg = model.cfg
        base, values = sweep_plain(model, batch, mode, all_components(model))  # type: ignore[arg-type]
        heads, mlps = Readouts.empty((cfg.n_layers, cfg.n_heads, len(batch))), Readouts.empty((cfg.n_layers, len(batch)))
        for c, v in values.items():
            row = dict(zip(READOUTS, v))
            if c.kind == "head":
                heads.put((c.layer, c.head), row)
            else:
                mlps.put((c.layer,), row)
        return SweepResult(mode, base.to("cpu"), heads, mlps).scores(metric)  # type: ignore[arg-type]

    return run, reference


def _positions_run(model, pairs, *, metric, positions, progress, memory_mb, offsets=None, **options) -> Scores:
    from circuits.patching.exact.positions import sweep_positions
    from circuits.patching.metrics import get_metric

    offsets = [0] if positions == "end" else offsets
    prob = get_metric(metric).name == "prob"  # the probability's log-sum-exp only where the metric reads it
    s = sweep_positions(model, pairs, offsets=offsets, memory_mb=memory_mb, progress=progress, prob=prob,
                        **options).scores(metric)
    return at_end(s) if positions == "end" else s


def _positions_reference(model, batch, *, metric, positions, offsets=None, **options) -> Scores:
    """circuits.patching.plain.patch_at_plain: one run_with_hooks per component and offset"""
    import torch

    from circuits.patching.engine import all_components
    from circuits.patching.plain import cf_answer_plain, patch_at_plain
    from circuits.patching.exact.positions import PositionSweep
    from circuits.patching.readouts import Readouts, first_difference
    from circuits.patching.reference import baseline_plain

    cfg = model.cfg
    P, K = len(batch), int(batch.end.max()) + 1
    ks = [0] if positions == "end" else (range(K) if offsets is None else offsets)
    heads, mlps = Readouts.empty((cfg.n_layers, cfg.n_heads, K, P)), Readouts.empty((cfg.n_layers, K, P))
    cf_answer = cf_answer_plain(model, batch)
    for k in ks:
        valid = torch.nonzero(batch.end >= k).flatten()
        sub = batch.select(valid)
        for c in all_components(model):
            row = patch_at_plain(model, sub, c, k, cf_answer[valid])
            view, idx = (heads, (c.layer, c.head)) if c.kind == "head" else (mlps, (c.layer,))
            for r, v in row.items():
                getattr(view, r)[idx + (k, valid.cpu())] = v.float().cpu()
    s = PositionSweep(baseline_plain(model, batch).to("cpu"), heads, mlps, Readouts.empty((0, K, P)), [],
                      batch.end.cpu(), first_difference(batch).cpu()).scores(metric)
    return at_end(s) if positions == "end" else s


def _attribution_run(grad_drop: bool) -> Callable[..., Scores]:
    def run(model, pairs, *, metric, positions, progress, memory_mb, neurons=False, qk_fix=False, **options) -> Scores:
        from circuits.patching.gradient.attribution import attribute

        att = attribute(model, pairs, metric, mode="activation", neurons=neurons, qk_fix=qk_fix, grad_drop=grad_drop,
                        progress=progress, **options)
        s = att.scores(graddrop=grad_drop)
        return at_end(s) if positions == "end" else s

    return run


def _attribution_reference(grad_drop: bool) -> Callable[..., Scores]:
    def reference(model, batch, *, metric, positions, neurons=False, qk_fix=False, **options) -> Scores:
        """circuits.patching.plain.attribute_plain: full prompts, one forward and one backward (per dropped layer)"""
        import torch

        from circuits.patching.metrics import get_metric
        from circuits.patching.gradient.attribution import Attribution, readout_of
        from circuits.patching.plain import attribute_plain
        from circuits.patching.readouts import first_difference
        from circuits.patching.reference import baseline_plain

        m = get_metric(metric)  # qk_fix changes only the query and key nodes, which Scores leave out
        cfg = model.cfg
        L, P, K = cfg.n_layers, len(batch), int(batch.end.max()) + 1
        ends = batch.end.cpu()
        first = first_difference(batch).cpu()
        Kn = int((ends - torch.minimum(first, ends)).max()) + 1  # offsets where any pair's prompts differ

        def by_offset(x: torch.Tensor) -> torch.Tensor:  # [layer, pair, pos, *rest] -> [layer, *rest, offset, pair]
            out = torch.full((L, *x.shape[3:], K, P), float("nan"))
            for i in range(P):
                e = int(ends[i])
                out[..., : e + 1, i] = x[:, i, : e + 1].flip(1).movedim(1, -1).float().cpu()
            return out

        sites = ("head", "mlp", "neuron") if neurons else ("head", "mlp")
        gd: dict[str, torch.Tensor] = {}
        if grad_drop:
            total = [attribute_plain(model, batch, m, readout_of(m), drop_layer=l) for l in range(L)]
            for site in sites:
                t = by_offset(sum(d[site].abs() for d in total) / (L - 1))  # type: ignore[arg-type]
                gd[site] = (t[..., :Kn, :] if site == "neuron" else t).nanmean(-1)
        plain = attribute_plain(model, batch, m, readout_of(m), "activation")
        neuron = by_offset(plain["neuron"])[..., :Kn, :] if neurons else None  # later offsets: both prompts agree
        att = Attribution(m, "activation", readout_of(m), baseline_plain(model, batch).to("cpu"),
                          by_offset(plain["head"]), by_offset(plain["mlp"]), neuron, None, None, ends, first, gd)
        s = att.scores(graddrop=grad_drop)
        return at_end(s) if positions == "end" else s

    return reference


def _eap_ig_run(model, pairs, *, metric, positions, progress, memory_mb, steps=None, level="node", **options) -> Scores:
    from circuits.patching.gradient.eap_ig import DEFAULT_STEPS, eap_ig

    return eap_ig(model, pairs, metric, steps=steps or DEFAULT_STEPS, level=level, positions=positions,
                  progress=progress, **options).scores()


def _eap_ig_reference(model, batch, *, metric, positions, steps=None, level="node", grid=None, **options) -> Scores:
    """circuits.patching.plain.eap_ig_plain: full prompts, one forward and backward per integration step"""
    from circuits.patching.metrics import get_metric
    from circuits.patching.gradient.attribution import readout_of
    from circuits.patching.gradient.eap_ig import DEFAULT_GRID, DEFAULT_STEPS, EAPIGScores, eap_receivers, eap_senders
    from circuits.patching.plain import eap_ig_plain
    from circuits.patching.reference import baseline_plain

    m = get_metric(metric)
    steps, grid = steps or DEFAULT_STEPS, grid or DEFAULT_GRID
    cfg = model.cfg
    p = eap_ig_plain(model, batch, m, readout_of(m), steps, level=level, positions=positions, grid=grid)
    p = {k: v.float().cpu() for k, v in p.items()}
    return EAPIGScores(m, readout_of(m), baseline_plain(model, batch).to("cpu"), steps, positions, p["input"],
                       p["head"], p["mlp"], p.get("edge"), eap_senders(cfg.n_layers, cfg.n_heads),
                       eap_receivers(cfg.n_layers, cfg.n_heads) if level == "edge" else [], grid=grid).scores()


_END = frozenset({"end", "gqa"})
_ALL = frozenset({"end", "all_positions", "gqa"})
_ATTRIBUTION = _ALL | {"neurons"}  # with neurons=True: every MLP neuron too

ENGINES: dict[str, Engine] = {e.name: e for e in (
    Engine("exact-path", *_exact("path"), ("end",), _END, "#d62728",
           "path patching at END (the paper's): each head or MLP from the counterfactual run, other heads frozen",
           sweep_mode="path"),
    Engine("exact-activation", *_exact("activation"), ("end",), _END, "#ff7f0e",
           "activation patching at END: each head or MLP from the counterfactual run, everything downstream recomputed",
           sweep_mode="activation"),
    Engine("positions", _positions_run, _positions_reference, ("all", "end"), _ALL, "#8c564b",
           "activation patching of each head and MLP at every offset from END (cc.sweep_positions)",
           quick={"offsets": [0, 1, 2]}),
    Engine("screen", _attribution_run(False), _attribution_reference(False), ("all", "end"), _ATTRIBUTION, "#1f77b4",
           "attribution patching (AtP, activation mode) of each head and MLP at every offset: a first-order estimate",
           exact=False, quick={"neurons": True}),
    Engine("graddrop", _attribution_run(True), _attribution_reference(True), ("all", "end"), _ATTRIBUTION, "#17becf",
           "AtP*'s GradDrop: mean |estimate| over the backward passes that drop one layer's gradient", exact=False,
           quick={"neurons": True}),
    Engine("eap-ig", _eap_ig_run, _eap_ig_reference, ("all", "end"), _ALL | {"edges"}, "#2ca02c",
           "EAP-IG (inputs variant, MIB's baseline): integrated-gradient estimates summed over positions",
           exact=False, refuses={"post_norm": "level='edge' only (Gemma 2/3 normalise the attention output)"},
           quick={"steps": 2}),
)}
ENGINE_NAMES: tuple[str, ...] = tuple(ENGINES)
COLORS: dict[str, str] = {name: e.color for name, e in ENGINES.items()}


def end_engines() -> list[str]:
    """The engines that give exact values at END for every head and MLP."""
    return [n for n, e in ENGINES.items() if e.exact and "end" in e.positions]


# ``circuits identify --engine``: the END engines that are the END sweep (an identify result keeps its readouts),
# with the sweep's mode.
END_SWEEP_ENGINES: dict[str, str] = {n: e.sweep_mode for n, e in ENGINES.items() if e.sweep_mode}


def describe(names: Sequence[str] | None = None) -> str:
    """Every engine (or ``names``), one block each, with its reference loop."""
    return "\n".join(ENGINES[n].describe() for n in (names or ENGINES))


__all__ = ["CAPABILITIES", "COLORS", "END_SWEEP_ENGINES", "ENGINES", "ENGINE_NAMES", "Engine", "at_end", "describe",
           "end_engines"]
