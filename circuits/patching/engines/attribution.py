"""Attribution patching (Nanda 2022; Syed et al. 2023) of every head, MLP and MLP neuron at every position, with
the AtP* corrections (Kramar et al. 2024).

The effect of patching a node ``n`` (a head's ``hook_z``, an MLP's ``hook_mlp_out``, a neuron of ``hook_post``, at
one position) with its counterfactual value is estimated to first order as ``(a_cf - a_ref) . dM/da_ref``: one
reference forward, one counterfactual forward and one backward of the chosen metric's readout give it for every
node at once, batched over pairs. Three things make it cheap and exact where it can be:

- positions before the first token where a pair's prompts differ hold identical activations in both runs, so their
  estimate is exactly 0; that shared prefix (mostly the few-shot examples) runs once, without gradients, into
  the backend's key/value cache (:meth:`~circuits.models.backend.Backend.run_prefixes`: TransformerLens 3's, or Hugging Face's
  on a TransformerBridge), and only the rest runs forward twice and backward once;
- only END is unembedded (the readout needs the END logits alone);
- ``mode="path"`` gives the estimate of the paper's path patching: every ``hook_z`` becomes a leaf, so gradients
  reach the logits only through MLPs and the residual stream (the frozen heads), and only END carries an effect.

AtP* corrections (activation mode). *QK fix*: a head's query or key feeds its attention softmax, whose saturation
makes the linear estimate fail; for the query node at ``t`` and key node at ``t`` of every head the new attention
pattern is computed exactly (one row for a query, one column re-normalised in every later row for a key) and only
the step from the pattern to the metric is linear (AtP* eq. 7-10). These are reported as their own nodes
(``head_q``, ``head_k``): a head's ``hook_z`` comes after its softmax, so its own estimate needs no fix. *GradDrop*:
``L`` extra backward passes, each with the gradient through one layer's residual-stream writes dropped; a node's
score is the mean of the ``|estimate|`` over those passes (AtP* eq. 11), which a cancellation of direct and indirect
effects cannot hide. It costs ``L`` backward passes, so it is off by default (``grad_drop=True``).

:mod:`circuits.beyond.screen.job` ranks these estimates and re-measures the top ones exactly.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from jaxtyping import Int
from torch import Tensor
from tqdm.auto import tqdm

from circuits.models import backend
from circuits.models.backend import Model, act_name
from circuits.data.pairs import PairBatch, Pairs, as_batch, second_answers
from circuits.patching.core.end_layers import check_supported
from circuits.patching.core.metrics import DEFAULT_METRIC, Baseline, Metric, get_metric
from circuits.patching.core.readouts import Readouts, baseline_of, cat_baselines, first_difference
from circuits.patching.core.scores import Scores
from circuits.patching.engines.input_node import INPUT_SITE  # the input node (MIB's node graph: the embeddings)
from circuits.types import MODES, Mode, Neuron


def readout_of(metric: Metric) -> str:
    """The END quantity a metric reads: ``logit`` (relative_logit, fraction), ``logit_diff``, ``prob`` or a custom
    metric's own name."""
    if metric.logits_fn is not None:
        return metric.name
    if metric.name == "answer_logprob":  # a log of a linear estimate of the probability could be the log of a negative
        raise ValueError("answer_logprob: the attribution screen estimates the answer logit, logit difference or "
                         "probability linearly, not its log; rank by prob, logit_diff or fraction")
    return {"relative_logit": "logit", "fraction": "logit"}.get(metric.name, metric.name)


def gradient_start(model: Model, pairs: Pairs, metric: str | Metric) -> tuple[Metric, str, list[Metric], PairBatch,
                                                                              Int[Tensor, " pair"]]:
    """What a gradient engine (attribution patching, EAP-IG) starts from: the metric, the END readout it
    differentiates (:func:`readout_of`), the custom metrics read with it, the pairs as one batch, and each pair's
    shared prefix length: everything before its first difference (both runs agree there), run once into the
    backend's key/value cache where that gives the full run's numbers (``backend.prefix_sharing``); else 0, prompts
    run whole."""
    check_supported(model)
    m = get_metric(metric)
    batch = as_batch(pairs, model)
    shared = model.backend.prefix_sharing()
    n_pre = torch.minimum(first_difference(batch), batch.end) if shared else torch.zeros_like(batch.end)
    return m, readout_of(m), [m] if m.logits_fn is not None else [], batch, n_pre


def _readout_value(name: str, logits: Tensor, answer: Tensor, cf_answer: Tensor, metric: Metric) -> Tensor:
    rows = torch.arange(len(answer), device=logits.device)
    if name == "logit":
        return logits[rows, answer]
    if name == "logit_diff":
        return logits[rows, answer] - logits[rows, cf_answer]
    if name == "prob":
        return logits.softmax(-1)[rows, answer]
    return metric.of_logits(logits, answer, cf_answer).reshape(len(answer))


def estimated_readouts(readout: str, b: Baseline, delta: Tensor) -> Readouts:
    """Readouts estimated as ``baseline + delta`` for ``readout`` (the one END quantity an attribution estimates),
    every other readout NaN."""
    base = {"logit": b.logit, "logit_diff": b.logit_diff, "prob": b.prob, **b.custom}
    nan = torch.full_like(delta, float("nan"))
    out = Readouts(nan, nan, nan, {k: nan for k in b.custom})
    value = base[readout] + delta
    if readout in ("logit", "logit_diff", "prob"):
        setattr(out, readout, value)
    else:
        out.custom[readout] = value
    return out


class _Gate(torch.autograd.Function):
    """Identity forward; backward drops the gradient when its layer is the one GradDrop drops."""

    @staticmethod
    def forward(ctx, x, layer, state):  # type: ignore[override]
        ctx.layer, ctx.state = layer, state
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):  # type: ignore[override]
        return (torch.zeros_like(grad) if ctx.state.get("drop") == ctx.layer else grad), None, None


def _run_body(model, body: Tensor, prefix, hooks: list) -> Tensor:
    """The final residual of ``body`` after ``prefix`` (:meth:`~circuits.models.backend.Backend.run_prefixes`; ``None``: whole
    prompts) with ``hooks`` on."""
    with model.hooks(fwd_hooks=hooks):
        return model.backend.continue_prefixes(body, prefix)


def _end_logits(model: Model, resid: Tensor, ends: Tensor) -> Tensor:
    """END logits: the final norm, then the unembedding as one matmul (no per-call copy of ``W_U``)."""
    x = model.ln_final(resid[torch.arange(len(ends), device=resid.device), ends][:, None])[:, 0]
    W_U, b_U = model.backend.unembed_weights()
    return backend.apply_softcap(x @ W_U + b_U, model.backend.logit_softcap()).float()


def _qk_fix(model: Model, layer: int, A: Tensor, G: Tensor, q_ref: Tensor, q_cf: Tensor, k_ref: Tensor, k_cf: Tensor,
            valid: Tensor) -> tuple[Tensor, Tensor]:
    """AtP*'s query and key estimates for one layer: ``[row, body_pos, head]`` each.

    ``A``/``G``: the attention pattern and the metric's gradient with respect to it, ``[row, head, body, T]`` with
    ``T = n_max + body`` key columns (left-padded prefixes, then the body); ``q_*`` ``[row, body, head, d_head]`` and
    ``k_*`` ``[row, T, kv_head, d_head]`` (rotated, as attention reads them); ``valid`` ``[row, body, T]``: which keys
    each query sees (causal, not padding); a local layer's window (:meth:`~circuits.models.backend.Backend.sliding_window`)
    is applied here: query ``j`` sits at column ``n_max + j``, and columns differ as positions do."""
    A, G = A.float(), G.float()
    n_max = A.shape[-1] - A.shape[-2]
    window = model.backend.sliding_window(layer)
    if window is not None:
        cols = torch.arange(A.shape[-1], device=valid.device)
        query = n_max + torch.arange(A.shape[-2], device=valid.device)
        valid = valid & (cols[None, None] > query[None, :, None] - window)
    mask = ~valid[:, None]  # [row, 1, body, T]
    # Query node at j: row j recomputed with the counterfactual query against the reference keys.
    scores = lambda q, k: model.backend.attention_scores(layer, q, k)  # noqa: E731
    s_q = scores(q_cf, k_ref).float().masked_fill(mask, float("-inf"))
    dq = ((s_q.softmax(-1) - A) * G).sum(-1)  # [row, head, body]
    # Key node at t: column t of every later row changes by delta; each row re-normalises exactly. Only body keys
    # differ between the runs, so only those columns are computed.
    if model.backend.score_softcap(layer) > 0:
        delta = scores(q_ref, k_cf[:, n_max:]).float() - scores(q_ref, k_ref[:, n_max:]).float()
    else:  # scores are linear in the key
        delta = scores(q_ref, k_cf[:, n_max:] - k_ref[:, n_max:]).float()
    A_b, G_b, mask_b = A[..., n_max:], G[..., n_max:], mask[..., n_max:]
    delta = delta.masked_fill(mask_b, 0.0)
    logit_a = torch.log(A_b.clamp_min(1e-30)) - torch.log1p(-A_b.clamp_max(1 - 1e-7))
    a_new = torch.sigmoid(logit_a + delta).masked_fill(mask_b, 0.0)
    others = (A * G).sum(-1, keepdim=True) - A_b * G_b  # sum over the row's other keys
    mean_others = others / (1 - A_b).clamp_min(1e-12)
    dk = ((a_new - A_b) * (G_b - mean_others)).masked_fill(mask_b, 0.0).sum(-2)  # [row, head, body]
    return dq.transpose(1, 2), dk.transpose(1, 2)


@dataclass
class Attribution:
    """First-order estimates of patching each node, as the change of the readout ``readout`` per pair (float32).

    Positions are offsets from each pair's END (``0`` is END). ``head`` ``[layer, head, offset, pair]``, ``mlp``
    ``[layer, offset, pair]``, ``head_q``/``head_k`` ``[layer, head, offset, pair]`` (QK-fixed query and key nodes,
    activation mode), ``neuron`` ``[layer, d_mlp, offset, pair]`` over the first ``neuron.shape[2]`` offsets (every
    later offset is 0: both prompts agree there). Offsets beyond a pair's prompt are NaN. ``graddrop_*`` hold the
    GradDrop scores (mean over pairs) when computed. ``input`` ``[offset, pair]``: the input node's estimate (MIB's node
    graph: the embeddings, ``blocks.0.hook_resid_pre``: its gradient times its change; ``graddrop["input"]`` its
    GradDrop score), ``None`` in an Attribution made without it.
    """

    metric: Metric
    mode: Mode
    readout: str
    baseline: Baseline
    head: Tensor
    mlp: Tensor
    neuron: Tensor | None
    head_q: Tensor | None
    head_k: Tensor | None
    ends: Int[Tensor, " pair"]
    first_diff: Int[Tensor, " pair"]
    graddrop: dict[str, Tensor] = field(default_factory=dict)
    seconds: float = 0.0
    input: Tensor | None = None

    def view(self, delta: Tensor, baseline: Baseline | None = None) -> Readouts:
        """Estimated readouts (``baseline + delta``) for the metric; the other readouts NaN."""
        return estimated_readouts(self.readout, self.baseline if baseline is None else baseline, delta)

    def effect(self, delta: Tensor, metric: Metric | None = None) -> Tensor:
        """The metric (default: the one estimated) over pairs for estimates ``delta`` ``[..., offset, pair]`` ->
        ``[..., offset]`` (pairs that have each offset)."""
        m = self.metric if metric is None else metric
        out = torch.full(delta.shape[:-1], float("nan"))
        for k in range(delta.shape[-2]):
            valid = torch.nonzero(self.ends >= k).flatten()
            if len(valid):
                base = self.baseline.select(valid)
                out[..., k] = m.effect(self.view(delta[..., k, valid], base), base)
        return out

    def scores(self, metric: str | Metric | None = None, *, graddrop: bool = False, input: bool = False) -> Scores:
        """:class:`~circuits.patching.core.scores.Scores` by offset from END: heads ``[layer, head, offset]``, MLPs
        ``[layer, offset]``, the QK-fixed query and key nodes (``head_q``/``head_k`` are not component axes of
        their own: left out) and, when estimated, neurons ``[layer * d_mlp, offset]``.

        ``metric``: the metric the estimates were made with (default), or one reading the same END quantity.
        ``graddrop=True``: AtP*'s GradDrop scores instead (mean ``|estimate|`` over the layer-dropped passes,
        already over pairs: non-negative, ``sign`` ``+1``). ``input``: the input node too (part ``input``
        ``[offset]``, MIB's node graph), where it was estimated."""
        m = self.metric if metric is None else get_metric(metric)
        if readout_of(m) != self.readout:
            raise ValueError(f"These estimates are of the {self.readout!r} readout (metric {self.metric.name}); "
                             f"metric {m.name!r} reads {readout_of(m)!r}: rerun attribute with metric={m.name!r}")
        if graddrop:
            if not self.graddrop:
                raise ValueError("No GradDrop scores here: run attribute(..., grad_drop=True)")
            parts, sign, name, engine = dict(self.graddrop), 1, f"|{m.name}|", "graddrop"
        else:
            parts = {"head": self.effect(self.head, m), "mlp": self.effect(self.mlp, m)}
            if self.neuron is not None:
                parts["neuron"] = self.effect(self.neuron, m)
            if self.input is not None:
                parts["input"] = self.effect(self.input, m)
            sign, name, engine = m.sign, m.name, "screen"
        out = {"heads": parts["head"], "mlps": parts["mlp"]}
        if input and "input" in parts:
            out["input"] = parts["input"]
        labels: dict = {}
        if "neuron" in parts:
            L, D = parts["neuron"].shape[:2]
            out["neurons"] = parts["neuron"].reshape(L * D, -1)
            labels["neurons"] = [Neuron(l, i) for l in range(L) for i in range(D)]
        return Scores(out, name, sign, self.baseline, offsets=True, labels=labels, engine=engine)


@torch.enable_grad()
def attribute(
    model: Model,
    pairs: Pairs,
    metric: str | Metric = DEFAULT_METRIC,
    *,
    mode: Mode = "activation",
    neurons: bool = True,
    qk_fix: bool = True,
    grad_drop: bool = False,
    pairs_per_batch: int = 64,
    progress: bool = True,
) -> Attribution:
    """Attribution patching of every head, MLP and neuron at every position (see the module docstring).

    Args:
        metric: what is estimated: a built-in metric name or a custom :class:`Metric` (its ``logits_fn``).
        mode: ``"activation"`` (everything downstream recomputes) or ``"path"`` (heads frozen; END only).
        neurons: also estimate every ``hook_post`` neuron.
        qk_fix: AtP*'s query and key nodes with the exact softmax (activation mode).
        grad_drop: AtP*'s GradDrop scores (``n_layers`` extra backward passes).
        pairs_per_batch: pairs per forward/backward.
    """
    import time

    start = time.perf_counter()
    if mode not in MODES:
        raise ValueError(f"Unknown mode {mode!r}; accepted: {', '.join(MODES)}")
    m, name, custom, batch, n_pre = gradient_start(model, pairs, metric)
    cfg = model.cfg
    L, H, P = cfg.n_layers, cfg.n_heads, len(batch)
    K = int(batch.end.max()) + 1
    first = first_difference(batch)
    Kn = int((batch.end - torch.minimum(first, batch.end)).max()) + 1  # offsets where any pair's prompts differ
    qk = qk_fix and mode == "activation"
    head = torch.full((L, H, K, P), float("nan"))
    mlp = torch.full((L, K, P), float("nan"))
    neuron = torch.full((L, cfg.d_mlp, Kn, P), float("nan")) if neurons else None
    head_q = torch.full((L, H, K, P), float("nan")) if qk else None
    head_k = torch.full((L, H, K, P), float("nan")) if qk else None
    inp = torch.full((K, P), float("nan"))  # the input node (the embeddings), [offset, pair]
    gd = {"head": torch.zeros(L, H, K), "mlp": torch.zeros(L, K), "input": torch.zeros(K)} if grad_drop else {}
    if grad_drop and neurons:
        gd["neuron"] = torch.zeros(L, cfg.d_mlp, Kn)
    gd_count = torch.zeros(K)
    bases: list[Baseline] = []
    bar = tqdm(total=P, desc="attribution patching", unit="pair", disable=not progress)
    for b0 in range(0, P, pairs_per_batch):
        rows = torch.arange(b0, min(P, b0 + pairs_per_batch), device=batch.end.device)
        sub = batch.select(rows)
        out = _attribute_rows(model, sub, n_pre[rows], m, name, custom, mode, neurons, qk, grad_drop)
        bases.append(out["baseline"])  # type: ignore[arg-type]
        ends, pres = sub.end.cpu(), n_pre[rows].cpu()
        for r, i in enumerate(rows.cpu().tolist()):
            e = int(ends[r])
            body = e - int(pres[r]) + 1
            offs = torch.arange(body - 1, -1, -1)  # body position j (absolute n + j) is offset end - n - j
            head[:, :, : e + 1, i] = 0.0
            mlp[:, : e + 1, i] = 0.0
            head[:, :, offs, i] = out["head"][:, r, :body].permute(0, 2, 1)
            mlp[:, offs, i] = out["mlp"][:, r, :body]
            inp[: e + 1, i] = 0.0
            inp[offs, i] = out["input"][r, :body]
            if qk:
                head_q[:, :, : e + 1, i] = 0.0  # type: ignore[index]
                head_k[:, :, : e + 1, i] = 0.0  # type: ignore[index]
                head_q[:, :, offs, i] = out["q"][:, r, :body].permute(0, 2, 1)  # type: ignore[index]
                head_k[:, :, offs, i] = out["k"][:, r, :body].permute(0, 2, 1)  # type: ignore[index]
            keep = offs < Kn
            if neurons:
                neuron[:, :, : min(Kn, e + 1), i] = 0.0  # type: ignore[index]
                neuron[:, :, offs[keep], i] = out["neuron"][:, r, :body][:, keep].permute(0, 2, 1)  # type: ignore[index]
            if grad_drop:
                gd_count[: e + 1] += 1
                gd["head"][:, :, offs] += out["gd_head"][:, r, :body].permute(0, 2, 1)
                gd["mlp"][:, offs] += out["gd_mlp"][:, r, :body]
                gd["input"][offs] += out["gd_input"][r, :body]
                if neurons:
                    gd["neuron"][:, :, offs[keep]] += out["gd_neuron"][:, r, :body][:, keep].permute(0, 2, 1)
        bar.update(len(rows))
    bar.close()
    baseline = cat_baselines(bases)
    if grad_drop:
        gd = {k: v / gd_count[: v.shape[-1]].clamp_min(1) for k, v in gd.items()}
    return Attribution(m, mode, name, baseline, head, mlp, neuron, head_q, head_k, batch.end.cpu(), first.cpu(), gd,
                       time.perf_counter() - start, inp)


def _attribute_rows(model: Model, sub: PairBatch, n: Tensor, m: Metric, name: str, custom: list[Metric],
                    mode: Mode, neurons: bool, qk: bool, grad_drop: bool) -> dict[str, Tensor | Baseline]:
    """Estimates for pairs whose prompts agree before position ``n[i]``, at body positions ``n[i] + j``:
    ``[layer, row, body(, ...)]``."""
    cfg = model.cfg
    L = cfg.n_layers
    device = sub.end.device
    cache = model.backend.run_prefixes(sub.reference, n)
    body_len = int((sub.end - n).max()) + 1
    j = torch.arange(body_len, device=device)
    src = (n[:, None] + j[None]).clamp_max(sub.reference.shape[1] - 1)
    ref_body, cf_body = sub.reference.gather(1, src), sub.counterfactual.gather(1, src)
    body_end = sub.end - n
    n_max = int(n.max())
    kcol = torch.arange(n_max + body_len, device=device)
    # Key column t of row i: padding before n_max - n[i]; query j sits at column n_max + j.
    valid = (kcol[None, None] >= (n_max - n)[:, None, None]) & (kcol[None, None] <= n_max + j[None, :, None])
    rotary = model.backend.rotary_key_hook(0).endswith("rot_k")
    q_name = (lambda l: f"blocks.{l}.attn.hook_rot_q") if rotary else (lambda l: act_name("q", l))
    k_name = (lambda l: model.backend.rotary_key_hook(l))

    def keep(store: dict, key: str, leaf: bool = False):
        def hook(act: Tensor, hook):
            if leaf:  # path mode: a frozen head passes no gradient upstream
                act = act.detach().requires_grad_(True)
            store[key] = act
            return act
        return hook

    sites = [("z", l) for l in range(L)] + [("mlp_out", l) for l in range(L)] + ([("post", l) for l in range(L)] if neurons else [])
    cf: dict[str, Tensor] = {}
    cf_hooks = [(act_name(s, l), keep(cf, f"{s}{l}")) for s, l in sites] + [(INPUT_SITE, keep(cf, "input"))]
    if qk:
        cf_hooks += [(q_name(l), keep(cf, f"q{l}")) for l in range(L)] + [(k_name(l), keep(cf, f"k{l}")) for l in range(L)]
    with torch.no_grad():
        cf_resid = _run_body(model, cf_body, cache, cf_hooks)
        cf_logits = _end_logits(model, cf_resid, body_end)
    cf_answer = second_answers(sub.cf_label, cf_logits)

    ref: dict[str, Tensor] = {}
    state: dict[str, int | None] = {"drop": None}
    ref_hooks = [(INPUT_SITE, keep(ref, "input", leaf=True))]  # the input node: a leaf, its gradient read
    ref_hooks += [(act_name(s, l), keep(ref, f"{s}{l}", leaf=(mode == "path" and s == "z"))) for s, l in sites]
    if qk:
        ref_hooks += [(q_name(l), keep(ref, f"q{l}")) for l in range(L)] + [(k_name(l), keep(ref, f"k{l}")) for l in range(L)]
        ref_hooks += [(act_name("pattern", l), keep(ref, f"A{l}")) for l in range(L)]
    if grad_drop:
        for l in range(L):
            for s in ("attn_out", "mlp_out"):
                ref_hooks.append((act_name(s, l), lambda act, hook, l=l: _Gate.apply(act, l, state)))
    ref_resid = _run_body(model, ref_body, cache, ref_hooks)
    if qk and cache is not None:  # every key attention read: the prefix's where the key hook saw the body alone
        for l in range(L):
            pk = model.backend.prefix_keys(cache, l)
            for store in (cf, ref):
                store[f"k{l}"] = torch.cat([pk.to(store[f"k{l}"]), store[f"k{l}"]], 1)
    ref_logits = _end_logits(model, ref_resid, body_end)
    total = _readout_value(name, ref_logits, sub.answer, cf_answer, m).sum()
    keys = [f"{s}{l}" for s, l in sites] + ["input"] + ([f"A{l}" for l in range(L)] if qk else [])
    grads = dict(zip(keys, torch.autograd.grad(total, [ref[k] for k in keys], retain_graph=grad_drop, allow_unused=True)))

    def estimates(g: dict[str, Tensor | None]) -> dict[str, Tensor]:
        def dot(site: str, l: int, reduce: bool) -> Tensor:
            d = (cf[f"{site}{l}"].float() - ref[f"{site}{l}"].detach().float())
            gl = g[f"{site}{l}"]
            prod = d * (gl.float() if gl is not None else torch.zeros_like(d))
            return prod.sum(-1) if reduce else prod
        out = {"head": torch.stack([dot("z", l, True) for l in range(L)]).cpu(),
               "mlp": torch.stack([dot("mlp_out", l, True) for l in range(L)]).cpu()}
        gi = g["input"]  # the input node: its gradient times its change, [row, body]
        d_in = cf["input"].float() - ref["input"].detach().float()
        out["input"] = (d_in * (gi.float() if gi is not None else torch.zeros_like(d_in))).sum(-1).cpu()
        if neurons:
            out["neuron"] = torch.stack([dot("post", l, False) for l in range(L)]).cpu()
        return out

    out: dict[str, Tensor | Baseline] = dict(estimates(grads))
    if qk:
        qs, ks = [], []
        for l in range(L):
            G = grads[f"A{l}"]
            G = torch.zeros_like(ref[f"A{l}"]) if G is None else G
            dq, dk = _qk_fix(model, l, ref[f"A{l}"].detach(), G, ref[f"q{l}"].detach(), cf[f"q{l}"],
                             ref[f"k{l}"].detach(), cf[f"k{l}"], valid)
            qs.append(dq.cpu())
            ks.append(dk.cpu())
        out["q"], out["k"] = torch.stack(qs), torch.stack(ks)
    if grad_drop:
        acc: dict[str, Tensor] = {}
        for l in range(L):
            state["drop"] = l
            n = len(sites) + 1  # every site and the input
            g = dict(zip(keys[:n], torch.autograd.grad(total, [ref[k] for k in keys[:n]], retain_graph=l < L - 1,
                                                       allow_unused=True)))
            for k, v in estimates(g).items():
                acc[k] = acc.get(k, 0) + v.abs()  # type: ignore[operator]
        for k, v in acc.items():
            out[f"gd_{k}"] = v / max(L - 1, 1)
    rows = torch.arange(len(sub), device=ref_resid.device)
    with torch.no_grad():
        out["baseline"] = baseline_of(model, sub.answer, ref_resid.detach()[rows, body_end],
                                      cf_resid[rows, body_end], custom, sub.cf_label).to("cpu")
    return out


# --- the registry's entries (circuits.patching.engines.registry): the screen (AtP) and AtP*'s GradDrop as Scores -------------
def _score(model: Model, pairs: Pairs, metric: str | Metric, positions: str, progress: bool, grad_drop: bool,
           neurons: bool = False, qk_fix: bool = False, **options) -> Scores:
    att = attribute(model, pairs, metric, mode="activation", neurons=neurons, qk_fix=qk_fix, grad_drop=grad_drop,
                    progress=progress, **options)
    return att.scores(graddrop=grad_drop, input=True).at(positions)


def score_screen(model: Model, pairs: Pairs, *, metric: str | Metric, positions: str, progress: bool,
                 memory_mb: float, **options) -> Scores:
    """``screen``: :func:`attribute` (activation mode) scored by ``metric``, at every offset or at END."""
    return _score(model, pairs, metric, positions, progress, False, **options)


def score_graddrop(model: Model, pairs: Pairs, *, metric: str | Metric, positions: str, progress: bool,
                   memory_mb: float, **options) -> Scores:
    """``graddrop``: AtP*'s GradDrop scores of :func:`attribute`, at every offset or at END."""
    return _score(model, pairs, metric, positions, progress, True, **options)
