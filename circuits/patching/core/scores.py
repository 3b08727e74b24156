"""What every engine and attribution method returns: importance over named component axes (:class:`Scores`).

A :class:`Scores` holds one tensor per *part* -- ``"heads"`` ``[layer, head]``, ``"mlps"`` ``[layer]``,
``"neurons"`` ``[neuron]`` (named in ``labels["neurons"]``), ``"edges"`` ``[sender, receiver]`` (named in
``labels["edges"]``), ``"input"`` ``[]`` (EAP-IG's embeddings node) -- each with an optional trailing ``offset``
axis (``offsets=True``: positions counted back from END, ``0`` is END) -- in the units of one metric, with that
metric's important direction ``sign`` and the unpatched baseline. Values are the metric's effects as the engine
measured or estimated them (NaN where nothing was measured).

One sign convention: :meth:`Scores.importance` is ``sign * effect``, so **larger is more important** for every
engine and metric; :meth:`Scores.ranked` orders by it through :func:`circuits.patching.core.ranking.order` (the only
sort: stable ties by flat index, NaN last or left out) and :meth:`Scores.top` keeps the first ``k``.
:meth:`Scores.to_mib` writes MIB's graph (:mod:`circuits.patching.interchange.mib`), whose scores are importances too.

EAP-IG returns one (:class:`~circuits.patching.engines.eap_ig.EAPIGScores` is a Scores with its per-pair estimates);
the other engines' results, which keep every readout per pair, give one by a metric, their one reader:
``SweepResult.scores(metric)``, ``PositionSweep.scores(metric)``, ``NeuronSweep.scores(metric)``,
``EdgeSweep.scores(metric)``, ``Attribution.scores(metric)`` (AtP*; ``graddrop=True`` for GradDrop), and
``IdentifyResult.scores(metric)``. Every ranking is read here: no other class defines ``ranked``, ``top``, ``key``,
``importance`` or ``by_layer`` (``tests/unit/test_architecture.py``). Every entry of the engine registry
(:mod:`circuits.patching.engines.registry`) returns Scores, through a scoring function in its engine's module.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch
from jaxtyping import Float
from torch import Tensor

from circuits.io import Shapes, load_torch, save_torch
from circuits.patching.core.metrics import Baseline
from circuits.patching.interchange.mib import MIBGraph
from circuits.patching.core.ranking import KeyRule, ranked_entries
from circuits.results import brief
from circuits.types import Component, Head, Neuron, Receiver

PARTS = ("input", "heads", "mlps", "neurons", "edges")  # the component axes, in the order ranked() meets them
# What the leading axes of each part are (without the optional trailing offset axis).
PART_AXES = {"input": (), "heads": ("layer", "head"), "mlps": ("layer",), "neurons": ("neuron",),
             "edges": ("sender", "receiver")}


def _parse_sender(s: str) -> Any:
    return s if s == "input" else Component.parse(s)


def _parse_receiver(s: str) -> Any:
    return s if s == "logits" else Receiver.parse_many(s)[0]


@dataclass(frozen=True)
class Scores:
    """Importance of components by one metric: ``parts`` (see the module docstring), ``metric`` (its name), ``sign``
    (``-1``: a drop is important, ``+1``: a rise), ``baseline`` (the unpatched END quantities per pair, or ``None``),
    ``offsets`` (every part ends in an offset-from-END axis), ``labels`` (the names of the ``neurons`` axis,
    ``[Neuron]``, and of the ``edges`` axes, ``([sender], [receiver])``), ``engine`` (which engine made it) and
    ``per_pair`` (optional ``[..., pair]`` tensors of the same parts)."""

    parts: dict[str, Tensor]
    metric: str
    sign: int
    baseline: Baseline | None = None
    offsets: bool = False
    labels: dict[str, Any] = field(default_factory=dict)
    engine: str = ""
    per_pair: dict[str, Tensor] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.sign not in (-1, 1):
            raise ValueError(f"sign must be -1 (a drop is important) or +1 (a rise is), got {self.sign!r}")
        for name, t in self.parts.items():
            if name not in PART_AXES:
                raise ValueError(f"Unknown part {name!r}; accepted: {', '.join(PARTS)}")
            if t.ndim != len(PART_AXES[name]) + self.offsets:
                raise ValueError(f"Part {name!r} has shape {list(t.shape)}; expected axes "
                                 f"{list(PART_AXES[name]) + (['offset'] if self.offsets else [])}")
        if "neurons" in self.parts and len(self.labels.get("neurons", ())) != self.parts["neurons"].shape[0]:
            raise ValueError("Neuron scores need labels['neurons'], one Neuron per row")
        if "edges" in self.parts:
            senders, receivers = self.labels.get("edges", ((), ()))
            if (len(senders), len(receivers)) != tuple(self.parts["edges"].shape[:2]):
                raise ValueError("Edge scores need labels['edges'] = (senders, receivers), one per row and column")

    def __repr__(self) -> str:
        shapes = ", ".join(f"{k} {list(v.shape)}" for k, v in self.parts.items())
        n = "" if self.baseline is None else f", {len(self.baseline.logit)} pairs"
        return (f"<Scores{' of ' + self.engine if self.engine else ''}: {self.metric} (sign {self.sign:+d}), "
                f"{shapes}{', by offset' if self.offsets else ''}{n}>")

    # --- values -----------------------------------------------------------------------------------------------
    def __getitem__(self, part: str) -> Tensor:
        return self.parts[part]

    @property
    def heads(self) -> Float[Tensor, "layer head *offset"]:
        return self.parts["heads"]

    @property
    def mlps(self) -> Float[Tensor, " layer *offset"]:
        return self.parts["mlps"]

    def value(self, component: Any, offset: int | None = None) -> float:
        """The effect of one component: a :class:`~circuits.types.Head` (or head
        :class:`~circuits.types.Component`), an MLP component or a :class:`~circuits.types.Neuron`; ``offset`` on
        scores by offset."""
        if isinstance(component, Neuron):
            part, idx = "neurons", (self.labels["neurons"].index(component),)
        elif getattr(component, "kind", "head") == "mlp":
            part, idx = "mlps", (component.layer,)
        else:
            part, idx = "heads", (component.layer, component.head)
        return float(self.parts[part][idx + (() if offset is None else (offset,))])

    def importance(self, part: str | None = None) -> Tensor | dict[str, Tensor]:
        """``sign * effect``: larger is more important, for every engine and metric. One part's tensor, or every
        part's (a dict) when ``part`` is ``None``."""
        if part is not None:
            return self.sign * self.parts[part]
        return {k: self.sign * v for k, v in self.parts.items()}

    def over_positions(self, reduce: str = "max") -> Scores:
        """One score per component from its scores at every offset (NaN offsets ignored; a component no offset
        measured scores 0): ``reduce="max"``, the largest ``|effect|`` (non-negative, so ``sign`` is ``+1`` and the
        metric reads ``|metric|``); ``"sum"``, the effects summed over offsets, signed (as MIB and the EAP-IG
        library sum per-position attributions). Scores without an offset axis are returned as they are."""
        if not self.offsets:
            return self
        if reduce == "sum":
            return replace(self, parts={k: v.nan_to_num(0.0).sum(-1) for k, v in self.parts.items()}, offsets=False,
                           per_pair={})
        if reduce != "max":
            raise ValueError(f"over_positions(reduce={reduce!r}): accepted: max, sum")
        parts = {k: v.abs().nan_to_num(0.0).amax(-1) for k, v in self.parts.items()}
        return replace(self, parts=parts, metric=f"|{self.metric}|", sign=1, offsets=False, per_pair={})

    def at_end(self) -> Scores:
        """Scores by offset reduced to END (offset 0): one value per component, no offset axis."""
        if not self.offsets:
            return self
        return replace(self, parts={k: v[..., 0] for k, v in self.parts.items()}, offsets=False, per_pair={})

    def at(self, positions: str) -> Scores:
        """These scores at ``positions``: ``"end"`` (:meth:`at_end`) or ``"all"`` (as they are)."""
        return self.at_end() if positions == "end" else self

    # --- rankings --------------------------------------------------------------------------------------------
    def label(self, part: str, index: tuple[int, ...]) -> Any:
        """The component at ``index`` of ``part``: a :class:`~circuits.types.Head`, an MLP
        :class:`~circuits.types.Component`, a :class:`~circuits.types.Neuron`, a ``(sender, receiver)`` edge or
        ``"input"``; with an offset axis, ``(component, offset)``."""
        lead, off = (index[:-1], index[-1]) if self.offsets else (index, None)
        if part == "heads":
            c: Any = Head(*lead)
        elif part == "mlps":
            c = Component.mlp(lead[0])
        elif part == "neurons":
            c = self.labels["neurons"][lead[0]]
        elif part == "edges":
            senders, receivers = self.labels["edges"]
            c = (senders[lead[0]], receivers[lead[1]])
        else:
            c = "input"
        return c if off is None else (c, off)

    def ranked(self, k: int | None = None, part: str | Sequence[str] | None = None, *, into: Any = None
               ) -> list[tuple[Any, float]]:
        """``[(component, effect), ...]``, most important first (by ``sign * effect``, through
        :func:`~circuits.patching.core.ranking.order`; NaN left out), the first ``k`` (all by default). ``part``: one part
        or several (default: every part but ``input``, ranked together: their effects share the metric's units);
        the values are the effects themselves, in the metric's units. ``into`` (a receiver): the ``edges`` into it
        alone, as ``[(sender, effect), ...]``."""
        if into is not None:
            senders = [(s, e) for (s, to), e in self.ranked(part="edges") if to == into]
            return senders if k is None else senders[:k]
        names = [p for p in PARTS if p in self.parts and p != "input"] if part is None else (
            [part] if isinstance(part, str) else list(part))
        if len(names) == 1:
            out = [(self.label(names[0], i), e) for i, e in ranked_entries(self.parts[names[0]], self.sign)]
        else:
            flat = torch.cat([self.parts[p].flatten() for p in names])
            where = [(p, i) for p in names for i in _indices(self.parts[p].shape)]
            out = [(self.label(*where[i[0]]), e) for i, e in ranked_entries(flat, self.sign)]
        return out if k is None else out[:k]

    def top(self, k: int | None, part: str | Sequence[str] | None = None, *, first: str | KeyRule | None = None) -> list[Any]:
        """The ``k`` most important components (see :meth:`ranked`); with ``first`` (a key rule), the components it
        selects first, then the rest in ranked order (how fine-tuning and the knockout curves take "the top k"). Fewer
        than ``k`` ranked components is one ValueError line."""
        if first is None:
            return [c for c, _ in self.ranked(k, part)]
        assert isinstance(part, str), "top(first=rule) reads one part"
        chosen = [c for c, _ in self.key(first, part)][:k]
        chosen += [c for c, _ in self.ranked(part=part) if c not in chosen][: k - len(chosen)]
        if len(chosen) < k:
            raise ValueError(f"{self!r} ranks only {len(chosen)} {part}, fewer than {k}")
        return chosen

    def key(self, rule: str | KeyRule, part: str = "heads") -> list[tuple[Any, float]]:
        """``[(component, effect), ...]`` of ``part`` that a key rule (:class:`~circuits.patching.core.ranking.KeyRule`,
        by these scores' metric) selects, most important first."""
        rule = KeyRule.parse(rule, (self.metric,))
        if rule.metric != self.metric:
            raise ValueError(f"Key rule {rule} reads {rule.metric}; these scores are {self.metric}")
        return [(self.label(part, i), e) for i, e in rule.select(self.parts[part], self.sign)]

    def by_layer(self) -> dict[int, Tensor]:
        """The ``neurons`` part laid out by MLP layer: ``{layer: [d_mlp]}`` (the widest index named; NaN where a neuron
        was not scored)."""
        neurons = self.labels["neurons"]
        width = max(n.index for n in neurons) + 1
        out = {l: torch.full((width,), float("nan")) for l in sorted({n.layer for n in neurons})}
        for n, e in zip(neurons, self.parts["neurons"]):
            out[n.layer][n.index] = e
        return out

    # --- files ---------------------------------------------------------------------------------------------
    def to_mib(self, d_model: int, level: str | None = None, *, top: int | float | None = None,
               absolute: bool = False):
        """MIB's graph (:class:`circuits.patching.interchange.mib.MIBGraph`) of these scores' importances (MIB's orientation: higher is
        more important): node scores from ``heads`` and ``mlps`` (and ``input``), edge scores from ``edges`` in
        EAP-IG's graph order; ``top`` marks that many (or that fraction of) edges, or nodes with ``level="node"``.
        Scores by offset are reduced first (:meth:`over_positions`)."""
        s = self.over_positions()
        level = level or ("edge" if "edges" in s.parts else "node")
        if level == "edge" and "edges" not in s.parts:
            raise ValueError("These scores have no edges; export them with level='node'")
        heads, mlps = s.parts.get("heads"), s.parts.get("mlps")
        if heads is None:
            raise ValueError("MIB's graph needs head (and MLP) scores")
        L, H = heads.shape
        imp = s.importance()
        assert isinstance(imp, dict)
        g = MIBGraph.from_tensors(L, H, d_model, heads=imp["heads"], mlps=imp["mlps"] if mlps is not None else None,
                                  input_score=float(imp["input"]) if "input" in imp else None,
                                  edges=imp["edges"] if level == "edge" else None)
        if top is not None:
            g.select(top, level=level, absolute=absolute)
        return g

    def to_dict(self) -> dict[str, Any]:
        """Tensors, names and labels as text: :meth:`from_dict` reads it back."""
        labels: dict[str, Any] = {}
        if "neurons" in self.labels:
            labels["neurons"] = [list(n) for n in self.labels["neurons"]]
        if "edges" in self.labels:
            labels["edges"] = [[str(s) for s in self.labels["edges"][0]], [str(r) for r in self.labels["edges"][1]]]
        return {"parts": dict(self.parts), "metric": self.metric, "sign": self.sign, "offsets": self.offsets,
                "baseline": None if self.baseline is None else self.baseline.to_dict(), "labels": labels,
                "engine": self.engine, "per_pair": dict(self.per_pair)}

    @classmethod
    def checked(cls, d: Any, source: str | Path = "the scores") -> Scores:
        """:meth:`from_dict` of what a file holds (``source``: its name), every field checked first: each part a
        float tensor of its axes (infinity refused; NaN is "not measured"), ``metric`` and ``engine`` text, ``sign``
        -1 or +1, ``offsets`` a bool, the labels' names, and the baseline and per-pair tensors over one pair count;
        anything else is one :class:`~circuits.io.TensorError` line naming ``source`` and the field."""
        shapes = Shapes(source)
        if not isinstance(d, dict):
            raise shapes.fail(f"it holds a {type(d).__name__}, not the dictionary Scores.save writes")
        missing = [k for k in ("parts", "metric", "sign", "offsets", "baseline", "labels", "engine") if k not in d]
        if missing:
            raise shapes.fail(f"it lacks {', '.join(missing)} (Scores.save writes parts, metric, sign, offsets, "
                              "baseline, labels, engine and per_pair)")
        for k, kind in (("metric", str), ("engine", str), ("offsets", bool)):
            if not isinstance(d[k], kind):
                raise shapes.fail(f"{k} is {d[k]!r} ({type(d[k]).__name__}), not {kind.__name__}")
        if not d["metric"]:
            raise shapes.fail("metric is empty; it names the metric the scores are in")
        if isinstance(d["sign"], bool) or d["sign"] not in (-1, 1):
            raise shapes.fail(f"sign is {d['sign']!r}, not -1 (a drop is important) or +1 (a rise is)")
        parts, per_pair = d["parts"], d.get("per_pair", {})
        for what, value in (("parts", parts), ("per_pair", per_pair)):
            if not isinstance(value, dict) or not value and what == "parts":
                raise shapes.fail(f"{what} is {brief(value)}, not a dictionary of part -> tensor")
            unknown = [k for k in value if k not in PART_AXES]
            if unknown:
                raise shapes.fail(f"{what} names {unknown[0]!r}, not a part ({', '.join(PARTS)})")
        offset = ("offset",) if d["offsets"] else ()
        for name, t in parts.items():
            shapes.tensor(f"parts.{name}", t, PART_AXES[name] + offset, no_inf=True)
        for name, t in per_pair.items():
            if name not in parts:
                raise shapes.fail(f"per_pair.{name} has no part {name!r} in parts")
            shapes.tensor(f"per_pair.{name}", t, (*PART_AXES[name], *offset, "pair"), no_inf=True)
        if d["baseline"] is not None:
            Baseline.checked(d["baseline"], shapes)
        labels = d["labels"]
        if not isinstance(labels, dict):
            raise shapes.fail(f"labels is {brief(labels)}, not a dictionary")
        return shapes.build(lambda: cls.from_dict(d), "its labels cannot be read",  # the labels' names, or counts
                            (KeyError, TypeError, ValueError, IndexError))

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Scores:
        labels: dict[str, Any] = {}
        if "neurons" in d["labels"]:
            labels["neurons"] = [Neuron(*n) for n in d["labels"]["neurons"]]
        if "edges" in d["labels"]:
            s, r = d["labels"]["edges"]
            labels["edges"] = ([_parse_sender(x) for x in s], [_parse_receiver(x) for x in r])
        base = None if d["baseline"] is None else Baseline.from_dict(d["baseline"])
        return cls(dict(d["parts"]), d["metric"], int(d["sign"]), base, bool(d["offsets"]), labels, d["engine"],
                   dict(d.get("per_pair", {})))

    def save(self, path: str | Path) -> Path:
        path = Path(path)
        save_torch(self.to_dict(), path)
        return path

    @classmethod
    def load(cls, path: str | Path) -> Scores:
        """The scores :meth:`save` wrote; a file of anything else (a field of another type, a tensor of another
        shape or pair count, one declaring more than the file holds) is one ValueError line naming it
        (:meth:`checked`)."""
        path = Path(path)
        return cls.checked(load_torch(path, "scores"), path)


def _indices(shape: torch.Size) -> list[tuple[int, ...]]:
    """Every index of ``shape`` in flat (row-major) order."""
    if not len(shape):
        return [()]
    grids = torch.meshgrid(*[torch.arange(n) for n in shape], indexing="ij")
    return [tuple(int(g) for g in row) for row in torch.stack([g.flatten() for g in grids], 1)]
