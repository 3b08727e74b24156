"""The engine registry: every ranking engine by name, how to run it, what it supports and its plain reference loop.

An :class:`Engine` runs on a model and prompt pairs and returns :class:`~circuits.patching.core.scores.Scores`; its
``reference`` runs the plain one-forward-per-component (or full-prompt) loop of :mod:`circuits.patching.engines.plain` /
:mod:`circuits.patching.engines.end_sweep_plain` on a :class:`~circuits.data.pairs.PairBatch` and returns the same Scores, which
``tests/unit/test_engine_registry.py`` (and its twin in ``tests/backends/``) compares on the tiny model of every
family for every entry. :data:`ENGINES` is what the faithfulness job ranks with, what ``circuits identify --engine``
offers (the entries that support ``"end"`` with exact values) and where the report's colours come from.

The registry holds data, no adapter: each entry names its engine's scoring function and plain reference as
``"module:function"``, written in the engine's own module and imported when first run (so this module, and the
names and colours, import without torch). A new engine is one module that defines both functions and calls
:func:`register` (``tests/unit/test_architecture.py`` registers one from a temporary module); the built-in ones are
listed below so the command line knows their names before importing them.

``python -c "from circuits.patching.engines.registry import ENGINES; print(*ENGINES.values(), sep='\\n')"`` lists them.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from circuits.types import DEFAULT_METRIC

if TYPE_CHECKING:  # the registry itself imports no torch: configs and the command line read its names
    from circuits.data.pairs import PairBatch, Pairs
    from circuits.models.backend import Model
    from circuits.patching.core.metrics import Metric
    from circuits.patching.core.scores import Scores

# Capabilities an engine may list in ``supports``.
CAPABILITIES = ("end", "all_positions", "neurons", "edges", "gqa")
POSITIONS = ("end", "all")


@dataclass(frozen=True)
class Engine:
    """One ranking engine.

    ``run(model, pairs, *, metric, positions, progress, memory_mb, **options) -> Scores``: the engine (``positions``
    ``"end"`` or ``"all"``, ``None`` for its first of ``positions``). ``reference(model, batch, *, metric, positions,
    **options) -> Scores``: its plain loop (slow; for tests). ``supports``: capabilities (:data:`CAPABILITIES`);
    ``refuses``: model features it refuses, as data (``{feature: when}``); ``exact``: whether its values are exact
    patching effects (not first-order estimates); ``color``: its colour in the report's figures; ``quick``: options
    that keep a test run small; ``doc``: one line; ``parts``: the Scores parts it gives (an engine with ``heads`` can
    rank the faithfulness job's circuits); ``job_options``: the job config's fields that set its own options
    (``{option: field}``, EAP-IG's steps, grid and edges)."""

    name: str
    run_fn: str | Callable[..., Scores] = field(repr=False)  # a function, or "module:function" imported when run
    reference_fn: str | Callable[..., Scores] = field(repr=False)
    positions: tuple[str, ...]
    supports: frozenset[str]
    color: str
    doc: str
    exact: bool = True
    refuses: dict[str, str] = field(default_factory=dict)
    quick: dict[str, Any] = field(default_factory=dict)
    sweep_mode: str | None = None  # the END sweep's mode, where the engine is it (``circuits identify --engine``)
    parts: tuple[str, ...] = ("heads", "mlps")  # the Scores parts it gives (at least)
    job_options: dict[str, str] = field(default_factory=dict)  # its option <- the faithfulness config's field

    def resolve(self, which: str = "run") -> Callable[..., Scores]:
        """The run (or ``"reference"``) function, imported from its ``"module:function"`` the first time."""
        fn = self.run_fn if which == "run" else self.reference_fn
        if isinstance(fn, str):
            module, _, name = fn.partition(":")
            fn = getattr(importlib.import_module(module), name)
        return fn

    def _positions(self, positions: str | None) -> str:
        p = positions or self.positions[0]
        if p not in self.positions:
            raise ValueError(f"Engine {self.name!r} scores positions {', '.join(self.positions)}; not {p!r}")
        return p

    def run(self, model: Model, pairs: Pairs, *, metric: str | Metric = DEFAULT_METRIC, positions: str | None = None,
            progress: bool = False, memory_mb: float = 1024, **options: Any) -> Scores:
        """The engine's scores of every component (see the class docstring)."""
        return self.resolve()(model, pairs, metric=metric, positions=self._positions(positions), progress=progress,
                           memory_mb=memory_mb, **options)

    def reference(self, model: Model, batch: PairBatch, *, metric: str | Metric = DEFAULT_METRIC,
                  positions: str | None = None, **options: Any) -> Scores:
        """The same scores from the plain reference loop."""
        return self.resolve("reference")(model, batch, metric=metric, positions=self._positions(positions), **options)

    @property
    def reference_name(self) -> str:
        """The plain loop the reference calls (module and function)."""
        return (self.resolve("reference").__doc__ or "").split("\n")[0].strip()

    def describe(self) -> str:
        """One line: name, positions, capabilities, refusals, reference loop and meaning."""
        refuses = f"; refuses {', '.join(f'{k} ({v})' for k, v in self.refuses.items())}" if self.refuses else ""
        return (f"{self.name:<17} {'exact' if self.exact else 'estimate':<8} positions {'/'.join(self.positions):<8} "
                f"supports {','.join(sorted(self.supports))}{refuses}\n{'':<18}{self.doc}\n{'':<18}reference: "
                f"{self.reference_name}")

    def __str__(self) -> str:
        return self.describe()


# --- the engines: data only; each "module:function" is the engine's own scoring function (in its module) and its
# plain reference (beside the plain loops); tests/unit/test_engine_registry.py resolves every one --------------------
_END = frozenset({"end", "gqa"})
_ALL = frozenset({"end", "all_positions", "gqa"})
_ATTRIBUTION = _ALL | {"neurons"}  # with neurons=True: every MLP neuron too
_ENGINE = "circuits.patching.engines.end_sweep"
_POSITIONS = "circuits.patching.engines.position_sweep"
_NEURONS = "circuits.patching.engines.neuron_sweep"
_EDGES = "circuits.patching.engines.edge_sweep"
_ATTRIBUTE = "circuits.patching.engines.attribution"
_EAP_IG = "circuits.patching.engines.eap_ig"
_PLAIN = "circuits.patching.engines.plain"  # the plain loops
_REFERENCE = "circuits.patching.engines.end_sweep_plain"  # the END sweep's plain loop

ENGINES: dict[str, Engine] = {}


def register(engine: Engine) -> Engine:
    """Add ``engine`` to :data:`ENGINES` (a module of its own calls this: nothing else changes); a second engine of
    the same name is refused."""
    if engine.name in ENGINES and ENGINES[engine.name] != engine:
        raise ValueError(f"An engine named {engine.name!r} is registered already")
    ENGINES[engine.name] = engine
    return engine


for _e in (
    Engine("exact-path", f"{_ENGINE}:score_path", f"{_REFERENCE}:reference_path", ("end",), _END, "#000000",
           "path patching at END (the paper's): each head or MLP from the counterfactual run, other heads frozen",
           sweep_mode="path"),
    Engine("exact-activation", f"{_ENGINE}:score_activation", f"{_REFERENCE}:reference_activation", ("end",), _END,
           "#ff7f0e", "activation patching at END: each head or MLP from the counterfactual run, everything "
           "downstream recomputed", sweep_mode="activation"),
    Engine("positions", f"{_POSITIONS}:score_positions", f"{_PLAIN}:reference_positions", ("all", "end"), _ALL,
           "#8c564b", "activation patching of each head and MLP at every offset from END (cc.sweep_positions)",
           quick={"offsets": [0, 1, 2]}),
    Engine("screen", f"{_ATTRIBUTE}:score_screen", f"{_PLAIN}:reference_screen", ("all", "end"), _ATTRIBUTION,
           "#1f77b4", "attribution patching (AtP, activation mode) of each head and MLP at every offset: a first-order "
           "estimate", exact=False, quick={"neurons": True}),
    Engine("graddrop", f"{_ATTRIBUTE}:score_graddrop", f"{_PLAIN}:reference_graddrop", ("all", "end"),
           _ATTRIBUTION, "#17becf", "AtP*'s GradDrop: mean |estimate| over the backward passes that drop one layer's "
           "gradient", exact=False, quick={"neurons": True}),
    Engine("eap-ig", f"{_EAP_IG}:score_eap_ig", f"{_PLAIN}:reference_eap_ig", ("all", "end"), _ALL | {"edges"},
           "#2ca02c", "EAP-IG (inputs variant, MIB's baseline): integrated-gradient estimates summed over positions",
           exact=False, refuses={"post_norm": "level='edge' only (Gemma 2/3 normalise the attention output)"},
           quick={"steps": 2}, job_options={"steps": "ig_steps", "grid": "ig_grid", "edges": "edges"}),
    Engine("neurons", f"{_NEURONS}:score_neurons", f"{_PLAIN}:reference_neurons", ("end",),
           frozenset({"end", "neurons", "gqa"}), "#9467bd", "path patching of single MLP neurons at END "
           "(cc.sweep_neurons; mode='activation' for activation patching)", parts=("neurons",),
           quick={"layers": [1]}),
    Engine("edges", f"{_EDGES}:score_edges", f"{_PLAIN}:reference_edges", ("end",),
           frozenset({"end", "edges", "gqa"}), "#e377c2", "path patching of each sender -> receiver edge at END "
           "(cc.sweep_edges; Wang et al. 2023)", parts=("edges",), quick={"receivers": "1.0,MLP1"}),
):
    register(_e)
ENGINE_NAMES: tuple[str, ...] = tuple(ENGINES)  # the built-in engines
COLORS: dict[str, str] = {name: e.color for name, e in ENGINES.items()}


def node_engines() -> list[str]:
    """The engines that score every head and MLP (what the faithfulness job can rank circuits with)."""
    return [n for n, e in ENGINES.items() if "heads" in e.parts]


def end_engines() -> list[str]:
    """The engines that give exact values at END for every head and MLP."""
    return [n for n, e in ENGINES.items() if e.exact and "end" in e.positions and "heads" in e.parts]


# ``circuits identify --engine``: the END engines that are the END sweep (an identify result keeps its readouts),
# with the sweep's mode.
END_SWEEP_ENGINES: dict[str, str] = {n: e.sweep_mode for n, e in ENGINES.items() if e.sweep_mode}


def describe(names: Sequence[str] | None = None) -> str:
    """Every engine (or ``names``), one block each, with its reference loop."""
    return "\n".join(ENGINES[n].describe() for n in (names or ENGINES))


__all__ = ["CAPABILITIES", "COLORS", "END_SWEEP_ENGINES", "ENGINES", "ENGINE_NAMES", "Engine", "describe",
           "end_engines", "node_engines", "register"]
