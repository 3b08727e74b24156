"""The vocabulary every step shares: heads, components, patching modes and ablation kinds.

One definition of each, used by every subpackage (as auto-circuit keeps its ``types.py``). Index order is
always ``(layer, head)``. Heads and components are written ``"21.2"`` and ``"MLP19"`` everywhere (CLI flags,
JSON, figure labels); :meth:`Head.parse` and :meth:`Component.parse` also read ``"L21H2"`` and ``[21, 2]``.
"""

from __future__ import annotations

import functools
import operator
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any, Literal, NamedTuple, Union

Mode = Literal["path", "activation"]
MODES: tuple[Mode, ...] = ("path", "activation")
# The dtypes a model is loaded and run in (circuits.models.loading.DTYPES maps them to torch dtypes).
DTYPE_NAMES: tuple[str, ...] = ("float32", "bfloat16", "float16")
# The built-in metrics (circuits.patching.core.metrics defines them; configs check names against this without torch).
METRIC_NAMES: tuple[str, ...] = ("relative_logit", "fraction", "logit_diff", "prob", "answer_logprob")
# The default of every scores() of every result type and of every job's metric
# (declared here so configs read it without torch; circuits.patching.core.metrics.DEFAULT_METRIC is this name).
DEFAULT_METRIC = "fraction"
# The MIB-style default: what scoring that follows MIB names (the faithfulness job; the information-flow figure of
# circuits positions, in logits as Stolfo et al.), MIB's arithmetic metric, the logit difference. These two are the
# only named metric defaults; everywhere else the metric is passed.
MIB_METRIC = "logit_diff"
# How a circuit of size s (a fraction of n nodes or edges) counts what it keeps: the toolkit's own functions take
# round(s * n) with halves up (DEFAULT_COUNT); the jobs that follow MIB take int(s * n) as MIB's circuit track does
# (MIB_COUNT). The only two named count defaults (circuits.patching.circuit_curves.curve.n_kept_at applies them).
COUNTS: tuple[str, ...] = ("round", "floor")
DEFAULT_COUNT = "round"
MIB_COUNT = "floor"
# The rule that picks key components unless told otherwise (circuits.patching.core.ranking.KeyRule parses it).
DEFAULT_KEY_RULE = f"{DEFAULT_METRIC}>=0.05"

# A key rule's two forms, "<metric><op><threshold>" and "top<k>[:<metric>]" (parsed by
# circuits.patching.core.ranking.KeyRule; here so that labels read a rule's metric without torch).
KEY_RULE_THRESHOLD = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_]*)\s*(<=|>=|<|>)\s*(\S+)\s*$")
KEY_RULE_TOP = re.compile(r"^\s*top\s*:?\s*(\d+)\s*(?::\s*([A-Za-z_][A-Za-z0-9_]*))?\s*$", re.IGNORECASE)
KEY_RULE_ACCEPTED = ("METRIC<VALUE, METRIC<=VALUE, METRIC>VALUE, METRIC>=VALUE or topK[:METRIC], with METRIC one of "
                     f"{', '.join(METRIC_NAMES)} (e.g. 'relative_logit<-0.05', 'fraction>=0.05', 'top10')")


def key_rule_parts(text: str, custom: tuple[str, ...] = ()) -> tuple[str, str | None, float | None, int | None]:
    """A key rule's text read as ``(metric, op, threshold, top_k)``, else one ``ValueError`` saying what is accepted
    (:meth:`circuits.patching.core.ranking.KeyRule.parse` builds its rule from these; here, without torch, so a
    config checks ``--key-rule`` before the model loads). ``custom``: custom metrics a rule may also use."""
    import math

    m = KEY_RULE_THRESHOLD.match(text)
    if m:
        metric, op, value = m.groups()
        try:
            threshold = float(value)
        except ValueError:
            raise ValueError(f"Cannot read the threshold {value!r} in key rule {text!r}. Accepted: "
                             f"{KEY_RULE_ACCEPTED}.") from None
        if not math.isfinite(threshold):
            raise ValueError(f"The threshold in key rule {text!r} must be a finite number. Accepted: {KEY_RULE_ACCEPTED}.")
        parts: tuple[str, str | None, float | None, int | None] = (metric, op, threshold, None)
    elif (m := KEY_RULE_TOP.match(text)) is not None:
        if int(m.group(1)) < 1:
            raise ValueError(f"Key rule {text!r} selects no heads; use top1 or more.")
        parts = (m.group(2) or DEFAULT_METRIC, None, None, int(m.group(1)))
    else:
        raise ValueError(f"Cannot read key rule {text!r}. Accepted: {KEY_RULE_ACCEPTED}.")
    if parts[0] not in METRIC_NAMES and parts[0] not in custom:
        raise ValueError(f"Unknown metric {parts[0]!r} in key rule {text!r}; accepted: {', '.join((*METRIC_NAMES, *custom))}")
    return parts


def top_heads_label(k: int, key_rule: Any) -> str:
    """What ``top_heads(k)`` took, said as measured: "top 10 heads by fraction" (the key heads the rule selected come
    first, then the rest of the same metric's ranking, so "key heads" would claim more than the rule chose)."""
    text = getattr(key_rule, "metric", None) and f"{key_rule.metric}>=0" or str(key_rule)
    m = KEY_RULE_THRESHOLD.match(text)
    t = None if m else KEY_RULE_TOP.match(text)
    metric = m.group(1) if m else (t.group(2) or DEFAULT_METRIC) if t else None
    return f"top {k} heads by {metric}" if metric else f"top {k} heads"
ComponentKind = Literal["head", "mlp"]
Site = Literal["z", "mlp_out"]  # the TransformerLens hook a component is patched at (``get_act_name(site, layer)``)

_HEAD = re.compile(r"^\s*(?:L\s*)?(\d+)\s*(?:\.|H|\s*,\s*)\s*(\d+)\s*$", re.IGNORECASE)
_MLP = re.compile(r"^\s*MLP\s*(\d+)\s*$", re.IGNORECASE)
_NEURON = re.compile(r"^\s*(?:MLP|N)\s*(\d+)\s*[.:/]\s*(\d+)\s*$", re.IGNORECASE)


class Ablation(str, Enum):
    """How a knocked-out component's output is replaced (Section 4.1 "Validation").

    ``MEAN``: its mean over the counterfactual prompts, per template position (the paper's, after Wang et
    al. 2023a); ``ZERO``: zero; ``RESAMPLE``: its value on another pair's counterfactual prompt of the same
    template and length, position by position (resample ablation, Chan et al. 2022).
    """

    MEAN = "mean"
    ZERO = "zero"
    RESAMPLE = "resample"

    @classmethod
    def parse(cls, value: str | Ablation) -> Ablation:
        try:
            return cls(value)
        except ValueError:
            raise ValueError(f"Unknown ablation {value!r}; accepted: {', '.join(a.value for a in cls)}") from None


class Head(NamedTuple):
    """An attention head, ``(layer, head)``. A tuple, so it unpacks, indexes ``effects[head]`` and equals
    ``(layer, head)``; written ``"21.2"``."""

    layer: int
    head: int

    def __str__(self) -> str:
        return f"{self.layer}.{self.head}"

    @classmethod
    def parse(cls, value: Any) -> Head:
        """``(21, 2)``, ``[21, 2, effect]``, ``"21.2"``, ``"L21H2"``, a head :class:`Component`, or a ranked
        ``(Head, effect)`` pair as ``Scores.key()`` and ``Scores.ranked()`` return them."""
        if isinstance(value, Head):
            return value
        if isinstance(value, Component):
            return value.as_head
        if isinstance(value, tuple) and len(value) == 2 and isinstance(value[0], (Head, Component)):
            return cls.parse(value[0])  # (Head, effect)
        if isinstance(value, str):
            m = _HEAD.match(value)
            if not m:
                raise ValueError(f"Bad head {value!r}: write heads as LAYER.HEAD (e.g. 21.2) or L21H2")
            return cls(int(m.group(1)), int(m.group(2)))
        if isinstance(value, Sequence) and len(value) >= 2:
            try:  # integers only: (19, 0.05) is an MLP's ranked pair, not head 19.0
                return cls(_integer(value[0]), _integer(value[1]))
            except (TypeError, ValueError):
                pass
        raise ValueError(f"Bad head {value!r}: expected LAYER.HEAD (e.g. 21.2), (layer, head), a Head or a "
                         "(Head, effect) pair as key_heads() returns")

    def check(self, n_layers: int, n_heads: int) -> Head:
        if not (0 <= self.layer < n_layers and 0 <= self.head < n_heads):
            raise ValueError(f"Head {self} is outside this model ({n_layers} layers x {n_heads} heads).")
        return self


@dataclass(frozen=True)
class Component:
    """A sender of the sweep: an attention head (``kind="head"``) or a whole MLP (``head`` is None)."""

    kind: ComponentKind
    layer: int
    head: int | None = None

    def __post_init__(self) -> None:
        if self.kind not in ("head", "mlp"):
            raise ValueError(f"Unknown component kind {self.kind!r}; accepted: head, mlp")
        if (self.kind == "head") != (self.head is not None):
            raise ValueError("A head component needs a head index; an MLP component has none.")

    def __str__(self) -> str:
        return f"{self.layer}.{self.head}" if self.kind == "head" else f"MLP{self.layer}"

    @property
    def site(self) -> Site:
        return "z" if self.kind == "head" else "mlp_out"

    @property
    def as_head(self) -> Head:
        if self.head is None:
            raise ValueError(f"{self} is not a head")
        return Head(self.layer, self.head)

    @classmethod
    def of(cls, head: Head | tuple[int, int]) -> Component:
        layer, index = head
        return cls("head", layer, index)

    @classmethod
    def mlp(cls, layer: int) -> Component:
        return cls("mlp", int(layer))

    @classmethod
    def parse(cls, value: Any) -> Component:
        """``"20.8"`` / ``"L20H8"`` (a head) or ``"MLP19"`` (an MLP)."""
        if isinstance(value, Component):
            return value
        if isinstance(value, str) and (m := _MLP.match(value)):
            return cls.mlp(int(m.group(1)))
        try:
            return cls.of(Head.parse(value))
        except ValueError:
            raise ValueError(f"Bad component {value!r}: write a head as LAYER.HEAD (e.g. 20.8) or an MLP as "
                             "MLP<layer> (e.g. MLP19)") from None

    def sort_key(self) -> tuple[int, int, int]:
        """Layer order, heads before the MLP of their layer (the order a forward pass meets them)."""
        return (self.layer, self.kind == "mlp", self.head or 0)


def _integer(value: Any) -> int:
    """An index from an int, a numpy or 0-d tensor integer, or digits; not a bool or a float (an effect)."""
    if isinstance(value, bool):
        raise TypeError("a bool is not an index")
    if isinstance(value, str) and value.strip().isdigit():
        return int(value)
    return operator.index(value)


def as_components(items: Iterable[Any]) -> list[Component]:
    """What ``sweep(components=...)`` takes, as components: :class:`Component` s, :class:`Head` s, ``(layer, head)``,
    ``"20.8"``, ``"MLP19"``, ranked ``(Head, effect)`` pairs (``key_heads()``), or ``("mlp", layer)``. A bad item is
    one ValueError saying what is accepted."""
    out = []
    for item in items:
        if isinstance(item, Component):
            out.append(item)
        elif isinstance(item, (tuple, list)) and len(item) == 2 and isinstance(item[0], str) and item[0].lower() == "mlp":
            out.append(Component.mlp(_integer(item[1])))
        else:
            try:
                out.append(Component.parse(item))
            except ValueError:
                raise ValueError(f"Bad component {item!r}: accepted are Head(20, 8), (20, 8), '20.8', a (Head, effect) "
                                 "pair from key_heads(), Component.mlp(19) or 'MLP19'") from None
    return out


class Neuron(NamedTuple):
    """One MLP neuron, ``(layer, index)`` into ``hook_post`` (``d_mlp`` wide); written ``"MLP19.1234"``."""

    layer: int
    index: int

    def __str__(self) -> str:
        return f"MLP{self.layer}.{self.index}"

    @classmethod
    def parse(cls, value: Any) -> Neuron:
        """``"MLP19.1234"``, ``"N19.1234"`` or ``(19, 1234)``."""
        if isinstance(value, str):
            m = _NEURON.match(value)
            if not m:
                raise ValueError(f"Bad neuron {value!r}: write a neuron as MLP<layer>.<index> (e.g. MLP19.1234)")
            return cls(int(m.group(1)), int(m.group(2)))
        if isinstance(value, Sequence) and len(value) >= 2:
            try:
                return cls(int(value[0]), int(value[1]))
            except (TypeError, ValueError):
                pass
        raise ValueError(f"Bad neuron {value!r}: expected MLP<layer>.<index> (e.g. MLP19.1234) or (layer, index)")

    def check(self, n_layers: int, d_mlp: int) -> Neuron:
        if not 0 <= self.layer < n_layers:
            raise ValueError(f"Neuron {self}: layer {self.layer} is outside this model (layers 0..{n_layers - 1}).")
        if not 0 <= self.index < d_mlp:
            raise ValueError(f"Neuron {self}: index {self.index} is outside d_mlp (accepted: 0..{d_mlp - 1}).")
        return self


Channel = Literal["q", "k", "v"]
CHANNELS: tuple[Channel, ...] = ("q", "k", "v")
_RECEIVER = re.compile(r"^\s*(.+?)\s*(?:\.|:)?\s*\b([qkv])\s*$", re.IGNORECASE)


@dataclass(frozen=True)
class Receiver:
    """Where an edge ends (path patching, Wang et al. 2023a): a head's query, key or value input at END, or an MLP's
    input. Written ``"20.8.q"``, ``"20.8.k"``, ``"20.8.v"`` or ``"MLP19"``."""

    component: Component
    channel: Channel | None = None

    def __post_init__(self) -> None:
        if (self.component.kind == "head") != (self.channel is not None):
            raise ValueError("A head receiver needs a channel (q, k or v); an MLP receiver has none.")
        if self.channel is not None and self.channel not in CHANNELS:
            raise ValueError(f"Unknown channel {self.channel!r}; accepted: q, k, v")

    def __str__(self) -> str:
        return f"{self.component}.{self.channel}" if self.channel else str(self.component)

    @property
    def layer(self) -> int:
        return self.component.layer

    @classmethod
    def parse_many(cls, value: Any) -> list[Receiver]:
        """``"20.8"`` (its q, k and v inputs), ``"20.8.q"``, ``"MLP19"``; a list or comma-separated text."""
        items = [x.strip() for x in value.split(",")] if isinstance(value, str) else list(value)
        out: list[Receiver] = []
        for item in items:
            if isinstance(item, Receiver):
                out.append(item)
                continue
            if item == "":
                continue
            m = _RECEIVER.match(str(item)) if isinstance(item, str) and not _MLP.match(item) else None
            if m and re.fullmatch(r"\s*(?:L\s*)?\d+\s*(?:\.|H)\s*\d+\s*", m.group(1), re.IGNORECASE):
                out.append(cls(Component.of(Head.parse(m.group(1))), m.group(2).lower()))  # type: ignore[arg-type]
                continue
            try:
                c = Component.parse(item)
            except ValueError:
                raise ValueError(f"Bad receiver {item!r}: write a head as LAYER.HEAD (its q, k and v inputs) or "
                                 "LAYER.HEAD.q/k/v, or an MLP as MLP<layer> (e.g. 20.8,20.8.q,MLP19)") from None
            out.extend([cls(c, ch) for ch in CHANNELS] if c.kind == "head" else [cls(c)])
        if not out:
            raise ValueError("No receivers given: write e.g. 20.8,MLP19")
        return out


def parse_heads(text: str | Iterable[Any]) -> list[Head]:
    """``"21.2,20.6"`` (or a list of anything :meth:`Head.parse` reads) -> heads, order kept."""
    items = [s for s in (x.strip() for x in text.split(","))] if isinstance(text, str) else list(text)
    if isinstance(text, str) and not any(items):
        raise ValueError("No heads given: write heads as LAYER.HEAD, comma-separated (e.g. 21.2,20.6)")
    return [Head.parse(x) for x in items if x != ""]


def parse_layers(text: str, what: str = "MLP") -> list[int]:
    """``"19,20"`` -> ``[19, 20]``."""
    try:
        return [int(s) for s in text.split(",") if s.strip()]
    except ValueError:
        raise ValueError(f"Bad {what} list {text!r}: write layer indices, comma-separated (e.g. 19,20)") from None


def all_heads(n_layers: int, n_heads: int) -> list[Head]:
    return [Head(l, h) for l in range(n_layers) for h in range(n_heads)]


def jaccard(a: Iterable[Any], b: Iterable[Any]) -> float:
    """``|A & B| / |A | B|`` of two sets of heads, components or indices (a tensor: its elements); 1 when both are
    empty."""
    sa, sb = (set(x.tolist() if hasattr(x, "tolist") else x) for x in (a, b))
    return len(sa & sb) / len(sa | sb) if sa | sb else 1.0


# --- EAP-IG's (and MIB's) graph of a model: its nodes in EAP-IG's order -----------------------------------------
# EAP-IG's names for the two nodes that are not components: the embeddings (a sender) and the logits (a receiver).
INPUT = "input"
LOGITS = "logits"
EAPSender = Union[Component, Literal["input"]]
EAPReceiver = Union[Receiver, Literal["logits"]]


def eap_senders(n_layers: int, n_heads: int) -> list[EAPSender]:
    """EAP-IG's forward (sender) nodes in its order: ``input``, then per layer its heads, then its MLP."""
    out: list[EAPSender] = [INPUT]
    for l in range(n_layers):
        out += [Component("head", l, h) for h in range(n_heads)] + [Component.mlp(l)]
    return out


def eap_receivers(n_layers: int, n_heads: int) -> list[EAPReceiver]:
    """EAP-IG's backward (receiver) nodes in its order: per layer every head's q, then k, then v input, then the
    MLP's input; ``logits`` last."""
    out: list[EAPReceiver] = []
    for l in range(n_layers):
        for ch in CHANNELS:
            out += [Receiver(Component("head", l, h), ch) for h in range(n_heads)]
        out.append(Receiver(Component.mlp(l)))
    return out + [LOGITS]


def eap_upstream(sender: EAPSender, receiver: EAPReceiver) -> bool:
    """Whether EAP-IG's graph has the edge: the input and every node feed later nodes and the logits; a head feeds
    later layers; an MLP's input also reads the heads of its own layer."""
    if sender == INPUT or receiver == LOGITS:
        return True
    assert isinstance(sender, Component) and isinstance(receiver, Receiver)
    if receiver.channel is not None:
        return sender.layer < receiver.layer
    return sender.layer < receiver.layer or (sender.layer == receiver.layer and sender.kind == "head")


def edge_mask(n_layers: int, n_heads: int) -> Any:
    """``True`` where EAP-IG's graph has the edge, ``Bool[Tensor, "sender receiver"]`` in :func:`eap_senders` x
    :func:`eap_receivers` order (torch is imported when called: this module imports none)."""
    return _edge_mask(n_layers, n_heads).clone()


@functools.lru_cache(maxsize=8)
def _edge_mask(n_layers: int, n_heads: int) -> Any:
    import torch

    s, r = eap_senders(n_layers, n_heads), eap_receivers(n_layers, n_heads)
    return torch.tensor([[eap_upstream(a, b) for b in r] for a in s])


# The pair fields a --pairs-file replaces (its lines are the prompts, counterfactuals and answers): None in the config
# of a run made from one (circuits.data.pair_config; issue 40: no unused defaults recorded). Here, below every layer,
# so the report's made-by line (circuits.viz.page) reads the same tuple.
PAIRS_FILE_REPLACES: tuple[str, ...] = ("seed", "few_shot", "prefix_policy", "counterfactual", "operand_range",
                                        "max_candidates")
