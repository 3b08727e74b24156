"""EAP-IG: edge attribution patching with integrated gradients, the "inputs" variant (Hanna et al. 2024; the
``EAP-IG-inputs`` baseline of MIB's circuit track, ``hannamw/eap-ig``).

Public signature (what other modules build on)::

    eap_ig(model, pairs, metric=DEFAULT_METRIC, *, steps=5, level="node", positions="all",
           pairs_per_batch=16, progress=True) -> EAPIGScores (a Scores)

    EAPIGScores: a Scores of parts input [], heads [layer, head], mlps [layer], edges [sender, receiver] (level
        "edge"), read as every Scores (importance(part), ranked(k, part), top(k, part), to_mib: higher is more
        important), plus EAP-IG's own per-pair estimates:
    EAPIGScores.input   Float[Tensor, " pair"]                 the embeddings' node ("input")
    EAPIGScores.head    Float[Tensor, "layer head pair"]       heads' hook_z nodes ("a{l}.h{h}")
    EAPIGScores.mlp     Float[Tensor, "layer pair"]            MLPs' hook_mlp_out nodes ("m{l}")
    EAPIGScores.edge    Float[Tensor, "sender receiver pair"]  level="edge" only (NaN where not upstream)
    EAPIGScores.senders / .receivers                           INPUT, Component / Receiver, LOGITS (EAP-IG's order)
    EAPIGScores.scores(metric) / to_dict() / from_dict(d)      another metric reading the same END quantity; files

Each score is the estimated change of the metric's END readout (``logit_diff`` for MIB's arithmetic tasks, as
:data:`~circuits.patching.core.metrics.MIB_METRIC` names it; ``logit`` for ``fraction`` / ``relative_logit``) when the
node (or edge) takes its counterfactual value, per pair:

    score(n) = sum over positions of (a_cf(n) - a_ref(n)) . (1/steps) sum_{alpha in grid} dR/da(n) at alpha

where the gradients are taken on forward passes of the reference prompt whose input embeddings (``hook_resid_pre``
of block 0) are ``e_cf + alpha (e_ref - e_cf)``, everything downstream recomputing; that is EAP-IG's sign
(``activation_difference`` = corrupted - clean). The grid is a choice (``grid``, :data:`GRIDS`, saved with the
scores): ``"left"``, ``alpha = k/steps`` for ``k = 0..steps-1`` (0, 0.2, ..., 0.8), is what MIB's circuit track runs
(the library's edge code at its pinned commit 7af394a) and the default; ``"right"``, ``k = 1..steps``, is the library
before Dec 2024 and its node code, and with ``steps=1`` is attribution patching (gradient at the reference run),
equal to :func:`circuits.patching.engines.attribution.attribute` node by node. MIB attributes with ``-logit_diff`` (a loss);
:meth:`EAPIGScores.importance` gives that orientation (``metric.sign * effect``: positive is important).

Nodes: a head's output is its ``hook_z`` (the same first-order estimate as EAP-IG's ``hook_result``: the result is
``z W_O``), an MLP's is ``hook_mlp_out``, the input's the embeddings. Edges (``level="edge"``): a sender's output
(the embeddings, a head's ``z W_O``, an MLP's output) against the gradient at a receiver's own copy of its input
(TransformerLens's ``hook_q_input`` / ``hook_k_input`` / ``hook_v_input`` per query head, ``hook_mlp_in``, and the
final residual for ``logits``; :meth:`~circuits.models.backend.Backend.split_inputs` on either TransformerLens line), exactly EAP-IG's graph (edges from every earlier node; an MLP also reads the heads
of its own layer). ``positions="all"`` sums over every position (as EAP-IG); ``"end"`` keeps END alone.

What makes it cheap: positions before the first token where a pair's prompts differ have identical embeddings in
both prompts, so every interpolated run agrees with the reference there; that prefix runs once into
the backend's key/value cache (:meth:`~circuits.models.backend.Backend.run_prefixes`, on either TransformerLens line) and only
the rest runs ``steps + 2`` times (the counterfactual, the reference, then each step; on the right grid the last step,
``alpha = 1``, is the reference run itself, ``steps + 1``; at edge level on a grouped-query model the cached keys and values are repeated per query head, as EAP-IG
ungroups them; where the backend's cache cannot give the full run's numbers,
:meth:`~circuits.models.backend.Backend.prefix_sharing`, prompts run whole: the same numbers); edge products are taken only
over each pair's positions from its first difference to END; only END is unembedded (with Gemma 2's final soft-cap, as a forward pass); gradients are summed over steps before the one
product with the activation differences; pairs are batched. Tests assert
equality with the plain full-prompt loop :func:`circuits.patching.engines.plain.eap_ig_plain`.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from pathlib import Path
from dataclasses import dataclass
from typing import Any, Literal

import einops
import torch
from jaxtyping import Float, Int
from torch import Tensor
from tqdm.auto import tqdm

from circuits.data.pairs import PairBatch, Pairs, second_answers
from circuits.io import Shapes
from circuits.models.backend import Model, act_name
from circuits.patching.engines.attribution import _readout_value, _run_body, estimated_readouts, gradient_start, readout_of
from circuits.patching.core.end_layers import check_supported, end_logits
from circuits.patching.core.metrics import DEFAULT_METRIC, Baseline, Metric, get_metric
from circuits.patching.core.readouts import baseline_of, cat_baselines
from circuits.patching.core.scores import Scores
from circuits.types import (  # EAP-IG's graph layout, declared with the vocabulary (circuits.patching.interchange.mib reads it too)
    CHANNELS,
    INPUT,  # noqa: F401 (re-exported)
    LOGITS,  # noqa: F401 (re-exported)
    Component,  # noqa: F401 (re-exported)
    EAPReceiver,
    EAPSender,
    eap_receivers,
    eap_senders,
    eap_upstream,  # noqa: F401 (re-exported)
    edge_mask,
)

LEVELS = ("node", "edge")
POSITIONS = ("all", "end")
DEFAULT_STEPS = 5  # MIB's run_attribution.py --ig-steps
# Where the integrated gradients are taken, alpha = k/steps: "left", k = 0..steps-1 (0, 0.2, ..., 0.8 at 5 steps:
# the edge code of the EAP-IG library at the commit MIB's circuit track pins, 7af394a, `range(0, steps)`), or
# "right", k = 1..steps (0.2, ..., 1.0: the library before Dec 2024, and its node code at that commit).
GRIDS = ("left", "right")
DEFAULT_GRID = "left"


def alphas(steps: int, grid: str = DEFAULT_GRID) -> list[float]:
    """The interpolation points of ``grid`` (:data:`GRIDS`) at ``steps`` steps, in the order they run."""
    if grid not in GRIDS:
        raise ValueError(f"Unknown grid {grid!r}; accepted: {', '.join(GRIDS)}")
    return [k / steps for k in (range(0, steps) if grid == "left" else range(1, steps + 1))]


@dataclass(frozen=True, repr=False)
class EAPIGScores(Scores):
    """EAP-IG's scores: a :class:`~circuits.patching.core.scores.Scores` of the ``input`` node ``[]``, heads ``[layer,
    head]``, MLPs ``[layer]`` and, at edge level, edges ``[sender, receiver]`` (:func:`eap_senders` x
    :func:`eap_receivers`; NaN where there is no edge) by its metric, read as every Scores is read (``importance``,
    ``ranked``, ``top``, ``to_mib``: ``sign * effect``, what MIB's file holds); and what is EAP-IG's own: the per-pair
    estimates (float32) of the change of the readout ``readout`` when each node (or edge) takes its counterfactual
    value (see the module docstring): ``input [pair]``, ``head [layer, head, pair]``, ``mlp [layer, pair]``, ``edge
    [sender, receiver, pair]`` (``None`` at node level), and how they were made (``steps``, ``positions``,
    ``grid``, ``seconds``). Build one with :meth:`of`."""

    readout: str = ""
    steps: int = 0
    positions: str = "all"
    input: Float[Tensor, " pair"] | None = None
    head: Float[Tensor, "layer head pair"] | None = None
    mlp: Float[Tensor, "layer pair"] | None = None
    edge: Float[Tensor, "sender receiver pair"] | None = None
    seconds: float = 0.0
    grid: str = DEFAULT_GRID  # the alphas the gradients were taken at (:data:`GRIDS`)

    @classmethod
    def of(cls, metric: str | Metric, readout: str, baseline: Baseline, steps: int, positions: str, input: Tensor,
           head: Tensor, mlp: Tensor, edge: Tensor | None = None, seconds: float = 0.0,
           grid: str = DEFAULT_GRID) -> EAPIGScores:
        """The scores of the estimates by ``metric``: only the metric they were made with, or one that reads the
        same END quantity, can score them."""
        m = get_metric(metric)
        if readout_of(m) != readout:
            raise ValueError(f"These EAP-IG scores estimate the {readout!r} readout; metric {m.name!r} reads "
                             f"{readout_of(m)!r}: rerun eap_ig with metric={m.name!r}")

        def effect(delta: Tensor) -> Tensor:
            return m.effect(estimated_readouts(readout, baseline, delta), baseline)

        parts = {"input": effect(input), "heads": effect(head), "mlps": effect(mlp)}
        labels: dict = {}
        if edge is not None:
            parts["edges"] = effect(edge)
            L, H = head.shape[:2]
            labels["edges"] = (eap_senders(L, H), eap_receivers(L, H))
        return cls(parts, m.name, m.sign, baseline, labels=labels, engine="eap-ig", readout=readout, steps=steps,
                   positions=positions, input=input, head=head, mlp=mlp, edge=edge, seconds=seconds, grid=grid)

    @property
    def senders(self) -> list[EAPSender]:
        return eap_senders(*self.parts["heads"].shape[:2])

    @property
    def receivers(self) -> list[EAPReceiver]:
        return eap_receivers(*self.parts["heads"].shape[:2]) if self.edge is not None else []

    def scores(self, metric: str | Metric | None = None) -> EAPIGScores:
        """These scores (``metric`` ``None``), or the same estimates by another metric reading the same END
        quantity."""
        if metric is None or get_metric(metric).name == self.metric:
            return self
        return EAPIGScores.of(metric, self.readout, self.baseline, self.steps, self.positions, self.input,  # type: ignore[arg-type]
                              self.head, self.mlp, self.edge, self.seconds, self.grid)  # type: ignore[arg-type]

    def to_dict(self) -> dict[str, Any]:
        """The estimates and names (the metric by name): :meth:`from_dict` reads it."""
        assert self.baseline is not None
        return {"metric": self.metric, "readout": self.readout, "baseline": self.baseline.to_dict(),
                "steps": self.steps, "positions": self.positions, "input": self.input, "head": self.head,
                "mlp": self.mlp, "edge": self.edge, "senders": [str(s) for s in self.senders],
                "receivers": [str(r) for r in self.receivers], "seconds": self.seconds, "grid": self.grid}

    @classmethod
    def checked(cls, d: Any, source: str | Path = "the EAP-IG scores") -> EAPIGScores:
        """:meth:`from_dict` of what a file holds, every field checked first (``Scores.load`` reads through it): the
        estimates float tensors ``input [pair]``, ``head [layer, head, pair]``, ``mlp [layer, pair]``, ``edge [sender,
        receiver, pair]`` over the baseline's pairs, the names text, ``steps`` a count; else one line naming
        ``source`` and the field."""
        shapes = Shapes(source)
        if not isinstance(d, dict):
            raise shapes.fail(f"it holds a {type(d).__name__}, not the dictionary EAPIGScores.save writes")
        for k, kind in (("metric", str), ("readout", str), ("positions", str), ("steps", int), ("seconds", (int, float)),
                        ("senders", list), ("receivers", list), ("grid", str)):
            v = d.get(k, "right" if k == "grid" else None)
            if not isinstance(v, kind) or isinstance(v, bool):
                raise shapes.fail(f"{k} is {v!r} ({type(v).__name__}), not what EAPIGScores.save writes there")
        shapes.tensor("input", d.get("input"), ("pair",), no_inf=True)
        shapes.tensor("head", d.get("head"), ("layer", "head", "pair"), no_inf=True)
        shapes.tensor("mlp", d.get("mlp"), ("layer", "pair"), no_inf=True)
        if d.get("edge") is not None:
            shapes.tensor("edge", d["edge"], ("sender", "receiver", "pair"), no_inf=True)
        Baseline.checked(d.get("baseline"), shapes)
        return shapes.build(lambda: cls.from_dict(d), "it cannot be read as EAP-IG scores")

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> EAPIGScores:
        """The scores :meth:`to_dict` saved (a built-in metric; a custom one cannot be rebuilt from its name)."""
        L, H = d["head"].shape[:2]
        receivers = eap_receivers(L, H) if d["edge"] is not None else []
        if [str(s) for s in eap_senders(L, H)] != d["senders"] or [str(r) for r in receivers] != d["receivers"]:
            raise ValueError("Saved EAP-IG scores name senders/receivers this version does not lay out the same way")
        return cls.of(d["metric"], d["readout"], Baseline.from_dict(d["baseline"]), int(d["steps"]), d["positions"],
                      d["input"], d["head"], d["mlp"], d["edge"], float(d["seconds"]),
                      d.get("grid", "right"))  # saved before the grid was a choice: the right-endpoint grid


@contextlib.contextmanager
def edge_hooks(model: Model) -> Iterator[None]:
    """TransformerLens's per-receiver input copies, as EAP-IG sets them: ``hook_{q,k,v}_input`` one per query head
    (grouped key/value heads ungrouped) and ``hook_mlp_in``; restored on exit. A shared prefix continued inside
    holds one key/value head per query head (:meth:`~circuits.models.backend.Backend.ungroup_prefix`)."""
    with model.backend.split_inputs(ungroup=True):
        yield


def check_edges_supported(model: Model) -> None:
    """Edges read a head's output as ``z W_O`` added to the residual stream: refuse models that normalise the
    attention output before adding it (Gemma 2/3), where no head has its own additive output."""
    if model.backend.post_norms():
        raise ValueError(f"Edge-level EAP-IG needs heads that add z W_O to the residual stream; "
                         f"{model.backend.architecture()} normalises the attention output first (ln1_post), so a "
                         "head has no additive output of its own. Use level='node' for this model.")


@torch.enable_grad()
def eap_ig(
    model: Model,
    pairs: Pairs,
    metric: str | Metric = DEFAULT_METRIC,
    *,
    steps: int = DEFAULT_STEPS,
    level: Literal["node", "edge"] = "node",
    positions: Literal["all", "end"] = "all",
    grid: Literal["left", "right"] = DEFAULT_GRID,
    pairs_per_batch: int = 16,
    progress: bool = True,
) -> EAPIGScores:
    """EAP-IG (inputs variant) of every head, MLP and the input, and with ``level="edge"`` of every edge of EAP-IG's
    graph (see the module docstring).

    Args:
        metric: the metric whose END readout is differentiated (MIB's is ``MIB_METRIC``, ``logit_diff``).
        steps: integration steps.
        grid: where the gradients are taken (:data:`GRIDS`): ``"left"``, ``alpha = k/steps`` for ``k = 0..steps-1``
            (MIB's pinned EAP-IG at edge level; ``steps=1`` is the gradient at the counterfactual run), or ``"right"``,
            ``k = 1..steps`` (``steps=1`` is attribution patching, the gradient at the reference run).
        level: ``"node"`` or ``"edge"``.
        positions: ``"all"`` (summed over every position, as EAP-IG) or ``"end"`` (END only).
        pairs_per_batch: pairs per forward/backward.
    """
    start = time.perf_counter()
    if not isinstance(steps, int) or isinstance(steps, bool) or steps < 1:
        raise ValueError(f"steps must be a positive integer (EAP-IG's interpolation steps), got {steps!r}")
    if level not in LEVELS:
        raise ValueError(f"Unknown level {level!r}; accepted: {', '.join(LEVELS)}")
    grid_alphas = alphas(steps, grid)
    if positions not in POSITIONS:
        raise ValueError(f"Unknown positions {positions!r}; accepted: {', '.join(POSITIONS)}")
    if pairs_per_batch < 1:
        raise ValueError(f"pairs_per_batch must be at least 1, got {pairs_per_batch}")
    if level == "edge":
        check_supported(model)
        check_edges_supported(model)
    m, name, custom, batch, n_pre = gradient_start(model, pairs, metric)
    cfg = model.cfg
    L, H, P = cfg.n_layers, cfg.n_heads, len(batch)
    parts: dict[str, list[Tensor]] = {"input": [], "head": [], "mlp": [], "edge": []}
    bases: list[Baseline] = []
    bar = tqdm(total=P, desc=f"EAP-IG ({steps} steps)", unit="pair", disable=not progress)
    for b0 in range(0, P, pairs_per_batch):
        rows = torch.arange(b0, min(P, b0 + pairs_per_batch), device=batch.end.device)
        out, base = _eap_ig_rows(model, batch.select(rows), n_pre[rows], m, name, custom, grid_alphas, level,
                                 positions == "end")
        bases.append(base)
        for k, v in out.items():
            parts[k].append(v)
        bar.update(len(rows))
    bar.close()
    cat = {k: torch.cat(v, -1) for k, v in parts.items() if v}
    edge = None
    if level == "edge":
        edge = cat["edge"].masked_fill(~edge_mask(L, H)[..., None], float("nan"))
    return EAPIGScores.of(m, name, cat_baselines(bases), steps, positions, cat["input"], cat["head"], cat["mlp"], edge,
                          time.perf_counter() - start, grid)


def _eap_ig_rows(model: Model, sub: PairBatch, n: Int[Tensor, " row"], m: Metric, name: str, custom: list[Metric],
                 grid: list[float], level: str, end_only: bool) -> tuple[dict[str, Tensor], Baseline]:
    """Scores of pairs whose prompts agree before position ``n[i]`` (body positions ``n[i] + j``), summed over body
    positions: ``input [row]``, ``head [layer, head, row]``, ``mlp [layer, row]``, ``edge [sender, receiver, row]``."""
    edges = level == "edge"
    cache = model.backend.run_prefixes(sub.reference, n)
    if edges and cache is not None:  # EAP-IG ungroups key/value heads: the prefix's keys and values, one per query head
        cache = model.backend.ungroup_prefix(cache)
    with edge_hooks(model) if edges else contextlib.nullcontext():
        return _eap_ig_body(model, sub, n, torch.zeros_like(n), m, name, custom, grid, edges, end_only, cache)


def _eap_ig_body(model: Model, sub: PairBatch, n: Int[Tensor, " row"], first: Int[Tensor, " row"], m: Metric,
                 name: str, custom: list[Metric], grid: list[float], edges: bool, end_only: bool,
                 cache) -> tuple[dict[str, Tensor], Baseline]:
    """One batch from body position 0 (absolute ``n``); ``first``: each row's first body position where its prompts
    differ (before it every activation difference is exactly 0, so no product is taken there)."""
    cfg = model.cfg
    L = cfg.n_layers
    device = sub.end.device
    body_len = int((sub.end - n).max()) + 1
    j = torch.arange(body_len, device=device)
    src = (n[:, None] + j[None]).clamp_max(sub.reference.shape[1] - 1)
    ref_body, cf_body = sub.reference.gather(1, src), sub.counterfactual.gather(1, src)
    body_end = sub.end - n
    # Positions that count: the body up to END (after END nothing reaches the readout), or END alone.
    keep = (j[None] == body_end[:, None]) if end_only else (j[None] <= body_end[:, None])
    keep = (keep & (j[None] >= first[:, None])).float()  # [row, body]
    # Each row's window of differing positions, body positions first[i] + w (w < W): the only ones where an
    # activation difference can be non-zero (edge products are taken there alone).
    W = int((body_end - first).clamp_min(0).max()) + 1
    w = torch.arange(W, device=device)
    window = (first[:, None] + w[None]).clamp_max(body_len - 1)  # [row, W]
    keep_w = keep.gather(1, window) * (first[:, None] + w[None] < body_len).float()
    embed = "blocks.0.hook_resid_pre"

    def store_to(store: dict[str, Tensor], name: str):  # by the name asked for (a Bridge's hook.name is an
        def hook(act: Tensor, hook) -> Tensor:  # alias's canonical name)
            store[name] = act
            return act
        return hook

    def own_copy(store: dict[str, Tensor], name: str):
        # the gradient at this receiver's own copy: a Bridge's hook_mlp_in is ln2's input itself (the tensor the
        # residual stream also carries on), so the hook hands on a copy (3.9 clones there itself)
        def hook(act: Tensor, hook) -> Tensor:
            store[name] = act = act.clone()
            return act
        return hook

    acts = [embed] + [act_name("z", l) for l in range(L)] + [act_name("mlp_out", l) for l in range(L)]
    cf: dict[str, Tensor] = {}
    ref: dict[str, Tensor] = {}
    with torch.no_grad():
        cf_resid = _run_body(model, cf_body, cache, [(a, store_to(cf, a)) for a in acts])
        rows = torch.arange(len(sub), device=device)
        cf_answer = second_answers(sub.cf_label, end_logits(model, cf_resid[rows, body_end]))
        # The reference embeddings (the first block's input, the forward stopped after it); the reference run itself
        # is the last step (alpha = 1).
        with model.hooks(fwd_hooks=[(embed, store_to(ref, embed))]):
            model.backend.continue_prefixes(ref_body, cache, stop_at_layer=1)
    if edges:
        targets = [f"blocks.{l}.hook_{c}_input" for l in range(L) for c in CHANNELS] + \
                  [f"blocks.{l}.hook_mlp_in" for l in range(L)]
    else:
        targets = acts[1:]
    gsum: dict[str, Tensor] = {}
    e_cf, e_ref = cf[embed], ref[embed]
    steps = len(grid)
    if grid[-1] != 1.0:  # the reference run is no step of the grid: run once for its activations and baseline
        with torch.no_grad():
            resid = _run_body(model, ref_body, cache, [(a, store_to(ref, a)) for a in acts[1:]])
            base = baseline_of(model, sub.answer, resid[rows, body_end], cf_resid[rows, body_end], custom,
                               sub.cf_label).to("cpu")
    for k, alpha in enumerate(grid, 1):
        x = torch.lerp(e_cf, e_ref, alpha).detach().requires_grad_(True)  # exact endpoints (alpha = 1: e_ref)
        got: dict[str, Tensor] = {}
        hooks = [(embed, lambda act, hook: x)] + [(t, own_copy(got, t)) for t in targets]
        last_is_ref = k == steps and alpha == 1.0
        if last_is_ref:  # alpha = 1: the reference run (lerp's endpoint is e_ref exactly), its activations kept
            hooks += [(a, store_to(ref, a)) for a in acts[1:]]
        resid = _run_body(model, ref_body, cache, hooks)
        if last_is_ref:
            with torch.no_grad():
                ref = {a: v.detach() for a, v in ref.items()}
                base = baseline_of(model, sub.answer, resid.detach()[rows, body_end], cf_resid[rows, body_end],
                                   custom, sub.cf_label).to("cpu")
        total = _readout_value(name, end_logits(model, resid[rows, body_end]), sub.answer, cf_answer, m).sum()
        names = [embed] + targets + (["resid_final"] if edges else [])
        tensors = [x] + [got[t] for t in targets] + ([resid] if edges else [])
        grads = torch.autograd.grad(total, tensors, allow_unused=True)
        for nm, t, g in zip(names, tensors, grads):
            g = torch.zeros_like(t) if g is None else g
            if nm in gsum:
                gsum[nm].add_(g)
            else:
                gsum[nm] = g.float().clone() if g.dtype == torch.float32 else g.float()
        del grads, tensors, got, resid, total
    # One device for the products (a model spread over GPUs keeps each layer's activations on its own).
    g = {k: v.div_(steps).to(device) for k, v in gsum.items()}
    del gsum
    d = {a: (cf[a].float() - ref[a].float()).to(device) for a in acts}
    out: dict[str, Tensor] = {}
    out["input"] = torch.einsum("rpd,rpd,rp->r", d[embed], g[embed], keep).cpu()
    if not edges:
        out["head"] = torch.stack([torch.einsum("rphd,rphd,rp->hr", d[act_name("z", l)], g[act_name("z", l)], keep)
                                   for l in range(L)]).cpu()
        out["mlp"] = torch.stack([torch.einsum("rpd,rpd,rp->r", d[act_name("mlp_out", l)], g[act_name("mlp_out", l)],
                                               keep) for l in range(L)]).cpu()
        return out, base
    # Edges: every sender's output into the residual stream against every receiver's input gradient.
    sender_out = [d[embed][:, :, None]]
    for l in range(L):
        W_O = model.backend.attn_out(l)[0].detach().float().to(device)  # [head, d_head, d_model]; scores need no graph
        sender_out.append(torch.einsum("rphe,hed->rphd", d[act_name("z", l)], W_O))
        sender_out.append(d[act_name("mlp_out", l)][:, :, None])
    def in_window(t: Tensor) -> Tensor:  # [row, body, k, d_model] -> [row, W, k, d_model]
        return t.gather(1, window[:, :, None, None].expand(-1, -1, *t.shape[2:]))

    S = in_window(torch.cat(sender_out, 2)) * keep_w[:, :, None, None]  # [row, W, sender, d_model]
    recv = []  # receivers' input gradients, [row, body, receiver, d_model] each, in eap_receivers order
    for l in range(L):
        recv += [g.pop(f"blocks.{l}.hook_{c}_input") for c in CHANNELS]
        recv.append(g.pop(f"blocks.{l}.hook_mlp_in")[:, :, None])
    recv.append(g.pop("resid_final")[:, :, None])
    S = einops.rearrange(S, "row pos s d -> row s (pos d)").contiguous()  # once: each block is one batched matmul
    edge = torch.cat([torch.bmm(S, einops.rearrange(in_window(R), "row pos r d -> row (pos d) r")) for R in recv], 2)
    edge = einops.rearrange(edge, "row s r -> s r row")
    del recv
    out["edge"] = edge.detach().cpu()
    # Nodes from the same runs: in a pre-norm residual stream the gradient at a sender's output is the sum of the
    # gradients at every receiver input downstream of it, so a node's score is the sum of its real edges' scores.
    real = edge_mask(L, cfg.n_heads).to(edge.device)[..., None]
    node = (edge * real).sum(1)  # [sender, row]
    per_layer = einops.rearrange(node[1:], "(layer c) row -> layer c row", layer=L)
    out["input"], out["head"], out["mlp"] = node[0].cpu(), per_layer[:, :-1].cpu(), per_layer[:, -1].cpu()
    return out, base


def score_eap_ig(model: Model, pairs: Pairs, *, metric: str | Metric, positions: Literal["all", "end"],
                 progress: bool, memory_mb: float, steps: int | None = None, level: Literal["node", "edge"] = "node",
                 edges: bool = False, **options) -> Scores:
    """The registry's ``eap-ig``: :func:`eap_ig` scored by ``metric`` (``edges=True``: ``level="edge"``)."""
    return eap_ig(model, pairs, metric, steps=steps or DEFAULT_STEPS, level="edge" if edges else level,
                  positions=positions, progress=progress, **options)
