"""MIB interchange: node and edge scores in the graph JSON that EAP-IG writes and MIB's circuit track reads
(``hannamw/eap-ig``'s ``Graph.to_json`` / ``Graph.from_json``, ``MIB-circuit-track``'s ``circuit_loading.py``).

The file (one per task and model, ``<task>_<model>/importances.json``, e.g. ``arithmetic-addition_llama3``)::

    {"cfg": {"n_layers": 32, "n_heads": 32, "parallel_attn_mlp": false, "d_model": 4096},
     "nodes": {"input": {"in_graph": true, "score": 0.1}, "a0.h0": {...}, ..., "m0": {...}, ..., "logits": {...}},
     "edges": {"input->a0.h0<q>": {"score": -0.0003, "in_graph": false}, ..., "a0.h1->m0": {...},
               ..., "m31->logits": {...}}}

Names are EAP-IG's: ``input`` (the embeddings), ``a{layer}.h{head}`` (a head), ``m{layer}`` (an MLP), ``logits``;
an edge is ``parent->child`` with ``<q>``, ``<k>`` or ``<v>`` when the child is a head (which of its inputs). Nodes
and edges are listed in EAP-IG's order (``Graph.from_model``): every edge from each earlier node to each head's q,
k and v input, to each MLP (which also reads the heads of its own layer), and to the logits. Scores are oriented as
EAP-IG attributes with MIB's loss (``-logit_diff``): positive where the counterfactual value lowers the metric, i.e.
important. That is circuits' own convention (:meth:`circuits.patching.core.scores.Scores.importance`, ``sign * effect``,
larger is more important for every engine and metric), so a file's score is a Scores importance, unchanged, and
:meth:`~circuits.patching.core.scores.Scores.to_mib` is the one place scores become a file; MIB's evaluation keeps the top ``k`` by score (``--absolute`` ranks by ``|score|``). ``in_graph`` marks
one circuit (``to_mib``'s ``top``); MIB's evaluation recomputes it at each size from the scores.

- :meth:`Scores.to_mib <circuits.patching.core.scores.Scores.to_mib>`: any Scores of heads and MLPs (and edges in EAP-IG's
  graph; an :class:`~circuits.patching.engines.eap_ig.EAPIGScores` is one), or node or edge scores in circuits'
  names (:meth:`MIBGraph.from_tensors`) -> :class:`MIBGraph`; :meth:`MIBGraph.write` / :func:`write_submission`.
- :func:`read` / :meth:`MIBGraph.from_json`: a file from EAP-IG, MIB or here -> :class:`MIBGraph`, whose
  ``heads`` ``[layer, head]`` and ``mlps`` ``[layer]`` (higher is more important) are what
  :func:`circuits.patching.circuit_curves.faithfulness` ranks, and ``edges`` ``[sender, receiver]`` in
  :func:`~circuits.patching.engines.eap_ig.eap_senders` x :func:`~circuits.patching.engines.eap_ig.eap_receivers` order.

``export then import`` is exact (scores are written as JSON floats of the float32 values, read back to float32).
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from jaxtyping import Bool, Float
from torch import Tensor

from circuits.types import (
    INPUT,
    LOGITS,
    Component,
    EAPReceiver,
    EAPSender,
    Receiver,
    eap_receivers,
    eap_senders,
    eap_upstream,
    edge_mask,
)

# MIB's task names for this project's operations (MIB has addition and subtraction; its HF datasets are
# mib-bench/arithmetic_addition and mib-bench/arithmetic_subtraction) and its model short names.
MIB_TASKS = {"addition": "arithmetic_addition", "subtraction": "arithmetic_subtraction"}
MIB_MODELS = {"gpt2": "gpt2-small", "qwen2.5": "Qwen/Qwen2.5-0.5B", "gemma2": "google/gemma-2-2b",
              "llama3": "meta-llama/Llama-3.1-8B"}
CFG_KEYS = ("n_layers", "n_heads", "parallel_attn_mlp", "d_model")
# Limits checked before allocating: a graph's senders x receivers (Llama-3.1-8B's is 3.3e6) and its file's bytes.
MAX_EDGE_CELLS = 100_000_000
MAX_FILE_BYTES = 4 << 30
_NODE = re.compile(r"^(?:(input)|(logits)|a(\d+)\.h(\d+)|m(\d+))$")
_EDGE = re.compile(r"^(.+?)->(.+?)(?:<([qkv])>)?$")


def node_name(node: EAPSender | EAPReceiver) -> str:
    """EAP-IG's name of a node: ``input``, ``a{l}.h{h}``, ``m{l}``, ``logits`` (a receiver names its component)."""
    if node == INPUT or node == LOGITS:
        return str(node)
    c = node.component if isinstance(node, Receiver) else node
    assert isinstance(c, Component)
    return f"a{c.layer}.h{c.head}" if c.kind == "head" else f"m{c.layer}"


def edge_name(sender: EAPSender, receiver: EAPReceiver) -> str:
    """``a0.h1->a2.h3<q>``, ``input->m0``, ``m3->logits``."""
    tail = f"<{receiver.channel}>" if isinstance(receiver, Receiver) and receiver.channel else ""
    return f"{node_name(sender)}->{node_name(receiver)}{tail}"


def parse_node(name: str) -> EAPSender | str:
    """``input`` / ``logits`` (as is), ``a{l}.h{h}`` -> a head :class:`Component`, ``m{l}`` -> an MLP."""
    m = _NODE.match(name)
    if not m:
        raise ValueError(f"Bad MIB node name {name!r}: accepted are input, logits, a<layer>.h<head> (e.g. a3.h7) "
                         "and m<layer> (e.g. m12)")
    if m.group(1) or m.group(2):
        return name
    if m.group(3) is not None:
        return Component("head", int(m.group(3)), int(m.group(4)))
    return Component.mlp(int(m.group(5)))


def parse_edge(name: str) -> tuple[EAPSender, EAPReceiver]:
    """``a0.h1->a2.h3<q>`` -> ``(Component head 0.1, Receiver 2.3.q)``; ``m3->logits`` -> ``(MLP3, "logits")``."""
    m = _EDGE.match(name)
    if not m:
        raise ValueError(f"Bad MIB edge name {name!r}: accepted is PARENT->CHILD, with <q>, <k> or <v> when the child "
                         "is a head (e.g. a0.h1->a2.h3<q>, input->m0, m3->logits)")
    parent, child = parse_node(m.group(1)), parse_node(m.group(2))
    if parent == LOGITS or child == INPUT:
        raise ValueError(f"Bad MIB edge {name!r}: logits has no outgoing edges and input no incoming ones")
    if isinstance(child, Component) and child.kind == "head":
        if m.group(3) is None:
            raise ValueError(f"Bad MIB edge {name!r}: an edge into a head names its input (<q>, <k> or <v>)")
        return parent, Receiver(child, m.group(3))  # type: ignore[arg-type, return-value]
    if m.group(3) is not None:
        raise ValueError(f"Bad MIB edge {name!r}: only an edge into a head has <q>/<k>/<v>")
    return parent, (LOGITS if child == LOGITS else Receiver(child))  # type: ignore[arg-type, return-value]


def edge_order(n_layers: int, n_heads: int) -> list[tuple[int, int]]:
    """EAP-IG's edge order (``Graph.from_model``, sequential attention and MLP) as ``(sender, receiver)`` indices
    into :func:`eap_senders` x :func:`eap_receivers`."""
    H = n_heads
    stream = [0]  # forward indices of the nodes written so far: input, then each layer's heads and MLP
    out = []
    for l in range(n_layers):
        heads = [1 + l * (H + 1) + h for h in range(H)]
        for s in stream:
            for h in range(H):
                for c in range(3):
                    out.append((s, l * (3 * H + 1) + c * H + h))
        stream += heads
        out += [(s, l * (3 * H + 1) + 3 * H) for s in stream]
        stream.append(1 + l * (H + 1) + H)
    logits = n_layers * (3 * H + 1)
    return out + [(s, logits) for s in stream]


@dataclass
class MIBGraph:
    """One graph file: the model's shape, node and edge scores (NaN where unscored) and one circuit's flags.

    ``node_scores`` / ``nodes_in_graph``: ``[node]`` in :func:`eap_senders` order (``input``, then per layer its
    heads and its MLP; ``logits`` is always in the graph and carries no score); ``edge_scores`` / ``edges_in_graph``:
    ``[sender, receiver]`` in :func:`eap_senders` x :func:`eap_receivers` order (NaN / False where EAP-IG's graph has
    no edge)."""

    n_layers: int
    n_heads: int
    d_model: int
    node_scores: Float[Tensor, " node"] | None
    nodes_in_graph: Bool[Tensor, " node"]
    edge_scores: Float[Tensor, "sender receiver"]
    edges_in_graph: Bool[Tensor, "sender receiver"]
    parallel_attn_mlp: bool = False

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, MIBGraph):
            return NotImplemented
        same = lambda a, b: (a is None and b is None) or (  # noqa: E731
            a is not None and b is not None and a.shape == b.shape and torch.equal(a.isnan(), b.isnan())
            and torch.equal(a.nan_to_num(), b.nan_to_num()))
        return ((self.n_layers, self.n_heads, self.d_model, self.parallel_attn_mlp)
                == (other.n_layers, other.n_heads, other.d_model, other.parallel_attn_mlp)
                and same(self.node_scores, other.node_scores) and torch.equal(self.nodes_in_graph, other.nodes_in_graph)
                and same(self.edge_scores, other.edge_scores) and torch.equal(self.edges_in_graph, other.edges_in_graph))

    @property
    def senders(self) -> list[EAPSender]:
        return eap_senders(self.n_layers, self.n_heads)

    @property
    def receivers(self) -> list[EAPReceiver]:
        return eap_receivers(self.n_layers, self.n_heads)

    @property
    def cfg(self) -> dict[str, Any]:
        return {"n_layers": self.n_layers, "n_heads": self.n_heads, "parallel_attn_mlp": self.parallel_attn_mlp,
                "d_model": self.d_model}

    # --- circuits' view -------------------------------------------------------------------------------
    def _per_layer(self, v: Tensor) -> tuple[Tensor, Tensor]:
        per_layer = v[1:].reshape(self.n_layers, self.n_heads + 1)
        return per_layer[:, :-1].clone(), per_layer[:, -1].clone()

    @property
    def heads(self) -> Float[Tensor, "layer head"]:
        """Head scores (higher is more important), from the node scores, or where the file has none, each head's
        outgoing edge scores summed (a node's effect is the sum of its edges' under EAP-IG's linearisation)."""
        return self._per_layer(self._nodes())[0]

    @property
    def mlps(self) -> Float[Tensor, " layer"]:
        return self._per_layer(self._nodes())[1]

    def _nodes(self) -> Tensor:
        if self.node_scores is not None and not bool(self.node_scores[1:].isnan().all()):
            return self.node_scores
        return torch.nansum(self.edge_scores, 1)

    @property
    def edges(self) -> Float[Tensor, "sender receiver"]:
        return self.edge_scores

    def circuit_nodes(self) -> list[EAPSender]:
        """The nodes with ``in_graph`` true (``input`` included when it is)."""
        return [s for s, keep in zip(self.senders, self.nodes_in_graph.tolist()) if keep]

    def circuit_edges(self) -> list[tuple[EAPSender, EAPReceiver]]:
        S, R = self.senders, self.receivers
        return [(S[i], R[j]) for i, j in self.edges_in_graph.nonzero().tolist()]

    # --- building --------------------------------------------------------------------------------------
    @classmethod
    def from_tensors(cls, n_layers: int, n_heads: int, d_model: int, *, heads: Tensor | None = None,
                     mlps: Tensor | None = None, input_score: float | None = None, edges: Tensor | None = None,
                     top: int | float | None = None, absolute: bool = False) -> MIBGraph:
        """A graph from scores in circuits' layout (higher is more important): node scores ``heads [layer, head]``,
        ``mlps [layer]`` (and the input's), or ``edges [sender, receiver]``; with ``top`` (a count, or a fraction
        in (0, 1]) the best ones are marked in the graph, as MIB's ``apply_topn`` (by score, or ``|score|``)."""
        for k, v in (("n_layers", n_layers), ("n_heads", n_heads), ("d_model", d_model)):  # what read() accepts
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"The graph's {k} is {v!r}; a whole number >= 1 is expected (MIB's cfg)")
        for what, t in (("heads", heads), ("mlps", mlps), ("edges", edges)):
            if t is not None and bool(t.isinf().any()):
                raise ValueError(f"The {what} scores hold infinite values; a MIB graph's scores are finite (NaN: "
                                 "not scored)")
        if input_score is not None and math.isinf(float(input_score)):
            raise ValueError("The input score is infinite; a MIB graph's scores are finite")
        S, R = 1 + n_layers * (n_heads + 1), n_layers * (3 * n_heads + 1) + 1
        real = edge_mask(n_layers, n_heads)
        node_scores = None
        if heads is not None or mlps is not None:
            if heads is None or mlps is None or heads.shape != (n_layers, n_heads) or mlps.shape != (n_layers,):
                raise ValueError(f"Node scores need heads [{n_layers}, {n_heads}] and mlps [{n_layers}]; got heads "
                                 f"{None if heads is None else list(heads.shape)}, mlps "
                                 f"{None if mlps is None else list(mlps.shape)}")
            per_layer = torch.cat([heads.float(), mlps.float()[:, None]], 1).flatten()
            first = torch.tensor([float("nan") if input_score is None else float(input_score)])
            node_scores = torch.cat([first, per_layer])
        if edges is not None:
            if edges.shape != (S, R):
                raise ValueError(f"Edge scores of this model are [sender, receiver] = [{S}, {R}] (EAP-IG's graph); got "
                                 f"{list(edges.shape)}")
            edge_scores = edges.float().masked_fill(~real, float("nan"))
        else:
            edge_scores = torch.zeros(S, R).masked_fill(~real, float("nan"))
        if node_scores is None and edges is None:
            raise ValueError("Nothing to export: give node scores (heads and mlps) or edge scores")
        g = cls(n_layers, n_heads, d_model, node_scores, torch.zeros(S, dtype=torch.bool), edge_scores,
                torch.zeros(S, R, dtype=torch.bool))
        if top is not None:
            g.select(top, level="edge" if edges is not None else "node", absolute=absolute)
        return g

    def select(self, top: int | float, level: str = "edge", absolute: bool = False) -> MIBGraph:
        """Mark the ``top`` best edges (or nodes) in the graph, a count or a fraction in (0, 1] of the real ones;
        nodes follow edges (a node is in when an edge of the circuit leaves it and one reaches it, input always),
        edges follow nodes (an edge is in when both ends are; input and logits always are). In place."""
        from circuits.patching.core.ranking import order

        real = edge_mask(self.n_layers, self.n_heads)
        if level == "edge":
            values = self.edge_scores[real]
        elif level == "node":
            values = self._nodes()[1:]
        else:
            raise ValueError(f"Unknown level {level!r}; accepted: edge, node")
        n = _count(top, len(values))
        chosen = order(values.abs() if absolute else values, 1)[:n]
        if level == "edge":
            flat = torch.zeros(len(values), dtype=torch.bool)
            flat[chosen] = True
            self.edges_in_graph = torch.zeros_like(real)
            self.edges_in_graph[real] = flat
            has_out = self.edges_in_graph.any(1)
            fed = self.edges_in_graph.any(0)
            has_in = torch.zeros_like(has_out)
            has_in[0] = True
            per_layer = fed[:-1].reshape(self.n_layers, 3 * self.n_heads + 1)
            heads_in = per_layer[:, :-1].reshape(self.n_layers, 3, self.n_heads).any(1)
            has_in[1:] = torch.cat([heads_in, per_layer[:, -1:]], 1).flatten()
            self.nodes_in_graph = has_out & has_in
        else:
            self.nodes_in_graph = torch.zeros(len(self.senders), dtype=torch.bool)
            self.nodes_in_graph[0] = True
            self.nodes_in_graph[1 + chosen] = True
            recv_in = torch.zeros(len(self.receivers), dtype=torch.bool)
            recv_in[-1] = True
            for j, r in enumerate(self.receivers[:-1]):
                assert isinstance(r, Receiver)
                c = r.component
                recv_in[j] = bool(self.nodes_in_graph[1 + c.layer * (self.n_heads + 1) + (c.head if c.head is not None
                                                                                           else self.n_heads)])
            self.edges_in_graph = real & self.nodes_in_graph[:, None] & recv_in[None, :]
        return self

    # --- the file --------------------------------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        """EAP-IG's ``Graph.to_json`` dictionary (nodes then edges in its order; ``score`` only where scored)."""
        nodes: dict[str, dict[str, Any]] = {}
        for i, s in enumerate(self.senders):
            entry: dict[str, Any] = {"in_graph": bool(self.nodes_in_graph[i])}
            if self.node_scores is not None and not math.isnan(float(self.node_scores[i])):
                entry["score"] = float(self.node_scores[i])
            nodes[node_name(s)] = entry
        nodes[LOGITS] = {"in_graph": True}
        S, R = self.senders, self.receivers
        scores, flags = self.edge_scores.tolist(), self.edges_in_graph.tolist()
        # an edge not scored (NaN) is written with score null, which read() takes as not scored: JSON has no NaN
        edges = {edge_name(S[i], R[j]): {"score": None if math.isnan(scores[i][j]) else scores[i][j],
                                         "in_graph": flags[i][j]}
                 for i, j in edge_order(self.n_layers, self.n_heads)}
        return {"cfg": self.cfg, "nodes": nodes, "edges": edges}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> MIBGraph:
        """A graph from EAP-IG's JSON dictionary (``cfg``, ``nodes``, ``edges``; node ``score`` optional, edges
        absent from the file unscored). One clear error for a file that is not one."""
        if not isinstance(d, dict):
            raise ValueError(f"Not an EAP-IG/MIB graph file: a JSON {type(d).__name__}, not an object with cfg, nodes "
                             "and edges")
        missing = [k for k in ("cfg", "nodes", "edges") if k not in d]
        if missing:
            raise ValueError(f"Not an EAP-IG/MIB graph file: missing {', '.join(missing)} (accepted: a JSON object with "
                             "cfg, nodes and edges, as EAP-IG's Graph.to_json writes)")
        cfg = d["cfg"]
        if not isinstance(cfg, dict):
            raise ValueError(f"The graph's cfg is a {type(cfg).__name__}, not an object with n_layers, n_heads and "
                             "d_model")
        for k in ("nodes", "edges"):
            if not isinstance(d[k], dict):
                raise ValueError(f"The graph's {k} is a {type(d[k]).__name__}, not an object of name -> entry")
        if any(k not in cfg for k in ("n_layers", "n_heads", "d_model")):
            raise ValueError(f"The graph's cfg needs n_layers, n_heads and d_model; got {sorted(cfg)}")
        for k in ("n_layers", "n_heads", "d_model"):
            if isinstance(cfg[k], bool) or not isinstance(cfg[k], int) or cfg[k] < 1:
                raise ValueError(f"The graph's cfg {k} is {cfg[k]!r}; a whole number >= 1 is expected")
        if not isinstance(cfg.get("parallel_attn_mlp", False), bool):
            raise ValueError(f"The graph's cfg parallel_attn_mlp is {cfg['parallel_attn_mlp']!r}; true or false")
        if cfg.get("parallel_attn_mlp", False):
            raise ValueError("Graphs of parallel attention/MLP blocks are not supported here (circuits' engines "
                             "refuse those models)")
        L, H = cfg["n_layers"], cfg["n_heads"]
        cells = (1 + L * (H + 1)) * (L * (3 * H + 1) + 1)  # senders x receivers, checked before anything is allocated
        if cells > MAX_EDGE_CELLS:
            raise ValueError(f"The graph declares {L} layers x {H} heads ({cells:.3g} edge cells), more than the "
                             f"{MAX_EDGE_CELLS:.3g} a graph here may hold")
        senders, receivers = eap_senders(L, H), eap_receivers(L, H)
        s_index = {node_name(s): i for i, s in enumerate(senders)}
        r_index = {(node_name(r), r.channel if isinstance(r, Receiver) else None): j for j, r in enumerate(receivers)}
        node_scores = torch.full((len(senders),), float("nan"))
        nodes_in = torch.zeros(len(senders), dtype=torch.bool)
        scored = False
        for name, entry in d["nodes"].items():
            if name == LOGITS:
                continue
            if name not in s_index:
                raise ValueError(f"Node {name!r} is not in a graph of {L} layers x {H} heads")
            if isinstance(entry, bool):  # the older form: name -> in_graph
                entry = {"in_graph": entry}
            in_graph, score = _entry(f"Node {name!r}", entry)
            nodes_in[s_index[name]] = in_graph
            if score is not None:
                node_scores[s_index[name]] = score
                scored = True
        edge_scores = torch.full((len(senders), len(receivers)), float("nan"))
        edges_in = torch.zeros(len(senders), len(receivers), dtype=torch.bool)
        for name, entry in d["edges"].items():
            s, r = parse_edge(name)
            key = (node_name(r), r.channel if isinstance(r, Receiver) else None)
            if node_name(s) not in s_index or key not in r_index:
                raise ValueError(f"Edge {name!r} is not in a graph of {L} layers x {H} heads")
            if not eap_upstream(s, r):
                raise ValueError(f"Edge {name!r} goes backwards (its parent does not come before its child)")
            i, j = s_index[node_name(s)], r_index[key]
            in_graph, score = _entry(f"Edge {name!r}", entry)
            if score is not None:
                edge_scores[i, j] = score
            edges_in[i, j] = in_graph
        return cls(L, H, int(cfg["d_model"]), node_scores if scored else None, nodes_in, edge_scores, edges_in)

    def write(self, path: str | Path) -> Path:
        """Write the JSON file (``path``: a ``.json`` file)."""
        from circuits.io import write_text

        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        return write_text(path, json.dumps(self.to_json()))


def _entry(what: str, entry: Any) -> tuple[bool, float | None]:
    """A node's or edge's ``in_graph`` (a JSON true/false, never a string) and ``score`` (a number or null)."""
    if not isinstance(entry, dict):
        raise ValueError(f"{what} is a {type(entry).__name__}, not an object with in_graph and score")
    in_graph, score = entry.get("in_graph", False), entry.get("score")
    if not isinstance(in_graph, bool):
        raise ValueError(f"{what}: in_graph is {in_graph!r}; true or false is expected")
    if score is not None and (isinstance(score, bool) or not isinstance(score, (int, float))):
        raise ValueError(f"{what}: score is {score!r}; a number or null is expected")
    if score is not None and not math.isfinite(score):  # Python's json reads NaN and Infinity, which JSON has not
        raise ValueError(f"{what}: score is {score!r}; a finite number, or null where it is not scored, is expected")
    return in_graph, None if score is None else float(score)


def _count(top: int | float, n: int) -> int:
    if isinstance(top, bool) or not isinstance(top, (int, float)) or top < 0 or (isinstance(top, float) and top > 1):
        raise ValueError(f"top must be a count (int >= 0) or a fraction in [0, 1], got {top!r}")
    return min(n, int(top) if isinstance(top, int) else int(math.floor(top * n + 0.5)))


def read(path: str | Path) -> MIBGraph:
    """A graph file written by EAP-IG, MIB or :meth:`MIBGraph.write`: a regular JSON file of bounded size whose
    fields have the types EAP-IG writes; anything else is one ValueError naming the file and the field."""
    from circuits.io import read_json

    path = Path(path)
    try:
        d = read_json(path, limit=MAX_FILE_BYTES)
    except FileNotFoundError:
        raise FileNotFoundError(f"No MIB graph file at {path}") from None
    except ValueError as e:
        raise ValueError(f"{e} (accepted: EAP-IG's graph JSON)") from None
    try:
        return MIBGraph.from_json(d)
    except ValueError as e:
        raise ValueError(f"{path}: {e}") from None


def submission_folder(task: str, model: str) -> str:
    """MIB's folder name for one task and model: ``arithmetic-addition_llama3`` (task ``addition`` or MIB's own
    ``arithmetic_addition``; model one of :data:`MIB_MODELS`' short names)."""
    task = MIB_TASKS.get(task, task)
    if task not in MIB_TASKS.values() and task not in ("ioi", "mcqa", "arc_easy", "arc_challenge"):
        raise ValueError(f"Unknown MIB task {task!r}; accepted: {', '.join(MIB_TASKS)} (this project's operations) or "
                         f"MIB's names {', '.join(MIB_TASKS.values())}, ioi, mcqa, arc_easy, arc_challenge")
    if model not in MIB_MODELS:
        raise ValueError(f"Unknown MIB model {model!r}; accepted: {', '.join(MIB_MODELS)}")
    return f"{task.replace('_', '-')}_{model}"


def write_submission(graph: MIBGraph, root: str | Path, task: str, model: str) -> Path:
    """``root/<task>_<model>/importances.json``, the layout MIB's ``run_evaluation.py`` reads and its leaderboard
    takes (one folder per task and model)."""
    return graph.write(Path(root) / submission_folder(task, model) / "importances.json")


def graph_of(n_layers: int, n_heads: int, d_model: int, *, nodes: Any = None, edges: Any = None,
             top: int | float | None = None, absolute: bool = False) -> MIBGraph:
    """MIB's graph of a result's measured scores (:class:`~circuits.patching.core.scores.Scores`, importance: higher is
    more important), for a model of ``n_layers`` x ``n_heads`` heads and width ``d_model``:

    - ``nodes``: scores of every head ``[layer, head]`` and MLP ``[layer]`` (an identify result's), the node scores;
    - ``edges``: labelled edge scores ``(sender, receiver)`` (an edge sweep's, for the receivers it measured), each put
      at its cell of EAP-IG's graph; a cell no sweep measured stays NaN (written as ``NaN``, never as a measured 0).

    ``top``: that many (or that fraction of) edges, or nodes without edge scores, marked ``in_graph``. A score whose
    shape or component does not fit the model is one ValueError naming it."""
    heads = mlps = matrix = None
    if nodes is not None:
        s = nodes.over_positions()
        if "heads" not in s.parts or "mlps" not in s.parts:
            raise ValueError("MIB's node scores need head and MLP scores (an identify result's)")
        heads, mlps = s.importance("heads"), s.importance("mlps")
        if tuple(heads.shape) != (n_layers, n_heads) or tuple(mlps.shape) != (n_layers,):
            raise ValueError(f"the scores are of {tuple(heads.shape)[0]} layers x {tuple(heads.shape)[-1]} heads, the "
                             f"model has {n_layers} x {n_heads}: they were measured on another model")
    if edges is not None:
        if "edges" not in edges.parts or "edges" not in edges.labels:
            raise ValueError("MIB's edge scores need labelled edges (an edge sweep's senders and receivers)")
        senders, receivers = edges.labels["edges"]
        imp = edges.importance("edges")
        s_index = {s: i for i, s in enumerate(eap_senders(n_layers, n_heads))}
        r_index = {r: j for j, r in enumerate(eap_receivers(n_layers, n_heads))}
        outside = [str(x) for x in (*senders, *receivers) if x not in s_index and x not in r_index]
        if outside:
            raise ValueError(f"edges of {', '.join(outside[:3])} are outside a model of {n_layers} layers x {n_heads} "
                             "heads: they were measured on another model")
        matrix = torch.full((len(s_index), len(r_index)), float("nan"))
        for i, s in enumerate(senders):
            for j, r in enumerate(receivers):
                if eap_upstream(s, r):
                    matrix[s_index[s], r_index[r]] = float(imp[i, j])
    g = MIBGraph.from_tensors(n_layers, n_heads, d_model, heads=heads, mlps=mlps, edges=matrix, top=top,
                              absolute=absolute)
    if matrix is None:  # no edge was measured: none written as a measured 0
        g.edge_scores = torch.full_like(g.edge_scores, float("nan"))
    return g
