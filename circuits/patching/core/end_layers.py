"""END-only pieces of a forward pass: what the engine (:mod:`circuits.patching.engines.end_sweep`) runs after a patch.

Attention is causal and a patch at END changes nothing before END, so after a patch at layer ``l`` each later
layer is one token's work: the MLP on the END vector, and (activation patching) attention from the new END
query over the reference run's cached keys and values. Each function here mirrors TransformerLens's own
arithmetic for that piece, so the engine equals the plain ``run_with_hooks`` loop (tests assert it).
:func:`collect_runs` gathers, in one reference and one counterfactual forward, everything the pieces read.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass

import einops
import torch
import torch.nn.functional as F
from jaxtyping import Float, Int
from torch import Tensor

from circuits.models.backend import Model, act_name, apply_softcap, head_linear
from circuits.data.pairs import PairBatch
from circuits.patching.core.metrics import Baseline, Metric
from circuits.models.forward import EndRecord, end_residuals, shared_prefix_lengths

# --- the reference and counterfactual runs ----------------------------------------------------


@dataclass
class Runs:
    """END activations of both runs, indexed by layer (``runs.resid_pre[layer]`` is ``[pair, d_model]``)."""

    resid_pre: list[Float[Tensor, "pair d_model"]]
    resid_mid: list[Float[Tensor, "pair d_model"]]
    attn_out: list[Float[Tensor, "pair d_model"]]
    z_ref: list[Float[Tensor, "pair head d_head"]]
    z_cf: list[Float[Tensor, "pair head d_head"]]
    mlp_out_cf: list[Float[Tensor, "pair d_model"]]
    keys: list[Tensor]  # per layer [pair, pos, kv_head, d_head] (rotated where rotary), activation mode only
    values: list[Tensor]
    ref_end_resid: Float[Tensor, "pair d_model"]
    cf_end_resid: Float[Tensor, "pair d_model"]


def _gather_end(store: dict, name: str, end: Tensor):
    def hook(act: Tensor, hook) -> None:
        store[name] = act[torch.arange(act.shape[0], device=act.device), end.to(act.device)].detach()

    return hook


def keep_hook(store: dict, name: str):
    """A hook that keeps its whole activation (detached) in ``store`` under ``name``, the name it was asked for (a
    Bridge's ``hook.name`` is the canonical name of an alias)."""

    def hook(act: Tensor, hook) -> None:
        store[name] = act.detach()

    return hook


# Rows sharing at least this many leading tokens (a template's few-shot examples) run them once (path mode).
SHARED_PREFIX_MIN = 16


def left_padded(caches: Sequence[Tensor], rows: Tensor, lengths: Tensor) -> tuple[list[Tensor], Tensor]:
    """Row ``rows[i]``'s first ``lengths[i]`` positions of each cache ``[row, pos, ...]``, right-aligned to the
    longest and left-padded with zeros (as TransformerLens batches generation), and the mask of real positions
    ``[i, max(lengths)]`` (bool): the cached prefixes a :meth:`~circuits.models.backend.Backend.block_runner` reads."""
    p_max = int(lengths.max())
    shift = (p_max - lengths)[:, None]
    cols = torch.arange(p_max, device=lengths.device)[None]
    keep, src = cols >= shift, (cols - shift).clamp_min(0)
    padded = not bool(keep.all())
    out = []
    for t in caches:
        part = t[rows.to(t.device)[:, None], src.to(t.device)]
        out.append(part * keep.to(t.device)[..., None, None].to(part) if padded else part)
    return out, keep


def _end_activations(model: Model, tokens: Tensor, end: Tensor, names: Sequence[str],
                     record: EndRecord | None = None) -> dict[str, Tensor]:
    """Each hook's activation at each row's END (``[row, ...]``), rows that share a prefix running it once into a
    key/value cache (:func:`circuits.models.forward.end_residuals`): END activations need no padding and no
    recomputation of a template's few-shot examples for every pair. Rows whose activations ``record`` holds (kept by
    an earlier pass over the same prompts) are read from it, not run."""
    rows = [tokens[i, : int(end[i]) + 1].tolist() for i in range(len(end))]
    known = {i: got for i, row in enumerate(rows) if record is not None and (got := record.get(row)) is not None}
    run = [rows[i] for i in range(len(rows)) if i not in known]
    fresh = EndRecord(tuple(names), budget_bytes=sys.maxsize)  # the rows run here, kept by the same hooks
    if run:
        end_residuals(model, run, shared_prefix_lengths(run, SHARED_PREFIX_MIN), row_hooks=fresh.row_hooks(run))
    got = [known[i] if i in known else fresh.get(row) for i, row in enumerate(rows)]
    return {n: torch.stack([g[n] for g in got]) for n in names}  # type: ignore[index]


def reference_end_names(model: Model) -> tuple[str, ...]:
    """The hooks :func:`collect_runs` reads at END of the reference prompts (path mode): what an
    :class:`~circuits.models.forward.EndRecord` of an earlier pass over them keeps."""
    L = model.cfg.n_layers
    return (*(act_name(site, l) for l in range(L) for site in ("resid_pre", "resid_mid", "attn_out", "z")),
            act_name("resid_post", L - 1))


@torch.no_grad()
def collect_runs(model: Model, batch: PairBatch, need_kv: bool, record: EndRecord | None = None) -> Runs:
    """The END activations of the reference and counterfactual runs the engine reads (and, with ``need_kv``, the
    reference's keys and values at every position). Without keys and values, prompts that share a prefix run it once,
    and reference prompts whose END activations ``record`` holds (:func:`reference_end_names`) are not run again."""
    L = model.cfg.n_layers
    if not need_kv:
        final = act_name("resid_post", L - 1)
        cf_names = [act_name(site, l) for l in range(L) for site in ("z", "mlp_out")]
        ref = _end_activations(model, batch.reference, batch.end, reference_end_names(model), record)
        cf = _end_activations(model, batch.counterfactual, batch.end, [*cf_names, final])
        stack = lambda d, site: [d[act_name(site, l)] for l in range(L)]  # noqa: E731
        return Runs(resid_pre=stack(ref, "resid_pre"), resid_mid=stack(ref, "resid_mid"), attn_out=stack(ref, "attn_out"),
                    z_ref=stack(ref, "z"), z_cf=stack(cf, "z"), mlp_out_cf=stack(cf, "mlp_out"), keys=[], values=[],
                    ref_end_resid=ref[final], cf_end_resid=cf[final])
    end = batch.end.to(model.cfg.device)
    ref: dict[str, Tensor] = {}
    cf: dict[str, Tensor] = {}
    ref_hooks = []
    for l in range(L):
        for site in ("resid_pre", "resid_mid", "attn_out", "z"):
            name = act_name(site, l)
            ref_hooks.append((name, _gather_end(ref, name, end)))
        if need_kv:
            k_name = model.backend.rotary_key_hook(l)
            ref_hooks.append((k_name, keep_hook(ref, k_name)))
            ref_hooks.append((act_name("v", l), keep_hook(ref, act_name("v", l))))
    final = act_name("resid_post", L - 1)
    ref_hooks.append((final, _gather_end(ref, final, end)))
    model.run_with_hooks(batch.reference.to(model.cfg.device), fwd_hooks=ref_hooks, stop_at_layer=L)
    cf_hooks = [(final, _gather_end(cf, final, end))]
    for l in range(L):
        for site in ("z", "mlp_out"):
            name = act_name(site, l)
            cf_hooks.append((name, _gather_end(cf, name, end)))
    model.run_with_hooks(batch.counterfactual.to(model.cfg.device), fwd_hooks=cf_hooks, stop_at_layer=L)
    # Per-layer lists, each tensor where its layer ran: a model spread over GPUs keeps every layer's END state on
    # that layer's device (circuits.models.backend).
    stack = lambda d, site: [d[act_name(site, l)] for l in range(L)]  # noqa: E731
    keys = values = []
    if need_kv:
        keys = [ref[model.backend.rotary_key_hook(l)] for l in range(L)]
        values = [ref[act_name("v", l)] for l in range(L)]
    return Runs(
        resid_pre=stack(ref, "resid_pre"),
        resid_mid=stack(ref, "resid_mid"),
        attn_out=stack(ref, "attn_out"),
        z_ref=stack(ref, "z"),
        z_cf=stack(cf, "z"),
        mlp_out_cf=stack(cf, "mlp_out"),
        keys=keys,
        values=values,
        ref_end_resid=ref[final],
        cf_end_resid=cf[final],
    )


# --- END-only layer pieces --------------------------------------------------------------------


def _post_norm(model: Model, norm_name: str, layer: int, out: Tensor) -> Tensor:
    """The norm some families apply to a sublayer's output before it joins the residual (Gemma 2/3:
    ``ln1_post`` after attention, ``ln2_post`` after the MLP); identity elsewhere."""
    if not model.backend.post_norms():
        return out
    shape = out.shape
    return getattr(model.blocks[layer], norm_name)(out.reshape(-1, 1, shape[-1])).reshape(shape)


def mlp_at_end(model: Model, layer: int, x: Float[Tensor, "... d_model"]) -> Tensor:
    """What layer ``layer``'s MLP adds to END residuals ``x`` (``hook_mlp_out``: after the post-MLP norm, if any)."""
    block = model.blocks[layer]
    shape = x.shape
    flat = x.reshape(-1, 1, shape[-1])
    return _post_norm(model, "ln2_post", layer, block.mlp(block.ln2(flat))).reshape(shape)


def attention_at_end(
    model: Model,
    layer: int,
    x: Float[Tensor, "sender pair d_model"],
    keys: Float[Tensor, "pair pos kv d_head"],
    values: Float[Tensor, "pair pos kv d_head"],
    end: Int[Tensor, " pair"],
) -> Float[Tensor, "sender pair d_model"]:
    """Attention output at END (``hook_attn_out``) for new END residuals, with earlier positions' keys and values
    from the reference cache: :func:`z_at_end` with ``x`` as the query, key and value input, then
    :func:`attention_output`."""
    return attention_output(model, layer, z_at_end(model, layer, x, x, x, keys, values, end))


def z_at_end(
    model: Model,
    layer: int,
    xq: Float[Tensor, "sender pair d_model"] | Float[Tensor, "sender pair head d_model"],
    xk: Float[Tensor, "sender pair d_model"] | Float[Tensor, "sender pair head d_model"],
    xv: Float[Tensor, "sender pair d_model"] | Float[Tensor, "sender pair head d_model"],
    keys: Float[Tensor, "pair pos kv d_head"],
    values: Float[Tensor, "pair pos kv d_head"],
    end: Int[Tensor, " pair"],
) -> Float[Tensor, "sender pair head d_head"]:
    """Every head's END output (``hook_z``) when END's query, key and value inputs are the residuals ``xq``, ``xk``,
    ``xv`` (the same tensor for a plain forward; one of them changed for an edge into a head's q, k or v), and the
    keys (rotated, as attention reads them) and values of earlier positions come from the reference run. Inputs
    ``[sender, pair, head, d_model]`` give each query head its own (edge circuits); key/value heads are then
    ungrouped, one per query head, as TransformerLens's ``ungroup_grouped_query_attention`` and EAP-IG/MIB.

    Follows the model's attention step by step (the pieces come from :mod:`circuits.models.backend`, so both
    TransformerLens lines compute it the same way): the pre-attention norm, the Q/K/V projections with biases, QK
    norm on each head's query and key (Qwen3, Gemma 3), then rotary at END's own position (each layer's own table:
    Gemma 3's local layers have their own base), scores times the layer's scale and soft-capped (Gemma 2), the causal
    mask and, on local layers only, the sliding window (Mistral, Gemma 2/3), and the softmax in float32."""
    cfg = model.cfg
    S, P = xq.shape[:2]
    ln1 = model.blocks[layer].ln1
    W_Q, b_Q, W_K, b_K, W_V, b_V = model.backend.attn_qkv(layer)
    normed: dict[int, Tensor] = {}
    ln = lambda x: normed.setdefault(id(x), ln1(x.reshape(-1, 1, x.shape[-1])).reshape(x.shape))  # noqa: E731
    if xq.ndim == 4:  # one input per query head
        group = cfg.n_heads // model.backend.n_kv_heads()
        W_K, b_K, W_V, b_V = (t.repeat_interleave(group, dim=0) for t in (W_K, b_K, W_V, b_V))
        keys, values = keys.repeat_interleave(group, dim=2), values.repeat_interleave(group, dim=2)
        q, k, v = (torch.einsum("sphd,hde->sphe", ln(x), w) + b for x, w, b in ((xq, W_Q, b_Q), (xk, W_K, b_K),
                                                                                  (xv, W_V, b_V)))
    else:
        q, k, v = (head_linear(ln(x).reshape(S * P, 1, -1), w, b).reshape(S, P, -1, cfg.d_head)
                   for x, w, b in ((xq, W_Q, b_Q), (xk, W_K, b_K), (xv, W_V, b_V)))
    norms = model.backend.qk_norms(layer)
    if norms is not None:
        q, k = (norm(t.reshape(-1, cfg.d_head)).reshape(t.shape) for norm, t in zip(norms, (q, k)))
    q, k = model.backend.rotary(layer, q, end), model.backend.rotary(layer, k, end)
    q = einops.rearrange(q, "s p (k g) e -> s p k g e", k=k.shape[2])
    scale, cap = model.backend.score_scale(layer), model.backend.score_softcap(layer)
    prefix_scores = apply_softcap(torch.einsum("spkge,ptke->spkgt", q, keys) * scale, cap)
    self_score = apply_softcap(torch.einsum("spkge,spke->spkg", q, k)[..., None] * scale, cap)
    positions = torch.arange(keys.shape[1], device=q.device)
    masked = positions[None, :] >= end[:, None]  # [pair, pos]: END itself and padding after it
    window = model.backend.sliding_window(layer)
    if window is not None:  # local layers (Mistral's window, Gemma's alternating local/global layers)
        masked = masked | (positions[None, :] <= end[:, None] - window)
    prefix_scores = prefix_scores.masked_fill(masked[None, :, None, None, :], float("-inf"))
    pattern = torch.cat([prefix_scores, self_score], dim=-1).float().softmax(-1).to(q.dtype)
    z = torch.einsum("spkgt,ptke->spkge", pattern[..., :-1], values) + pattern[..., -1:] * v[:, :, :, None, :]
    return einops.rearrange(z, "s p k g e -> s p (k g) e")


def project_z(model: Model, layer: int, z: Float[Tensor, "s p head d_head"]) -> Float[Tensor, "s p d_model"]:
    """Layer ``layer``'s attention projection of ``z`` (``z @ W_O + b_O``), with the same arithmetic as
    TransformerLens's attention. What joins the residual is :func:`attention_output` (the same, then the
    post-attention norm of families that have one)."""
    W_O, b_O = model.backend.attn_out(layer)
    w = einops.rearrange(W_O, "h e d -> d (h e)")
    return F.linear(einops.rearrange(z, "s p h e -> s p (h e)"), w, b_O)


def attention_output(model: Model, layer: int, z: Float[Tensor, "s p head d_head"]) -> Float[Tensor, "s p d_model"]:
    """What layer ``layer``'s attention adds to the residual for ``z`` (``hook_attn_out``): :func:`project_z`, then
    the post-attention norm (Gemma 2/3), which acts on the sum over heads, so a head's share is not linear there."""
    return _post_norm(model, "ln1_post", layer, project_z(model, layer, z))


def end_logits(model: Model, x: Float[Tensor, "row d_model"]) -> Float[Tensor, "row d_vocab"]:
    """Logits (float32) of final END residuals: the final norm, the unembedding and the final-logit soft-cap
    (Gemma 2), as a forward pass computes them."""
    logits = model.unembed(model.ln_final(x.reshape(-1, 1, x.shape[-1])))[:, 0]
    return apply_softcap(logits, model.backend.logit_softcap()).float()


def token_logits(model: Model, x: Float[Tensor, "sender pair d_model"], tokens: Int[Tensor, " pair"]
                 ) -> Float[Tensor, "sender pair"]:
    """The logit of one token per pair (``tokens[p]`` for every row of pair ``p``) from final END residuals: the final
    norm, two columns' worth of the unembedding instead of the whole vocabulary, and the soft-cap (float32). Equal
    to indexing :func:`end_logits` up to float rounding (a dot product instead of a matrix product)."""
    S, P, d = x.shape
    xn = model.ln_final(x.reshape(S * P, 1, d)).reshape(S, P, d)
    W_U, b_U = model.backend.unembed_weights()
    w = W_U.T[tokens]  # [pair, d_model]
    logits = torch.einsum("spd,pd->sp", xn, w.to(xn.dtype)) + b_U[tokens].to(xn.dtype)
    return apply_softcap(logits, model.backend.logit_softcap()).float()


def readout(
    model: Model,
    x: Float[Tensor, "sender pair d_model"],
    answer: Int[Tensor, " pair"],
    cf_answer: Int[Tensor, " pair"],
    custom: Sequence[Metric] = (),
    rows_per_chunk: int = 4096,
    *,
    prob: bool = True,
) -> dict[str, Tensor]:
    """END quantities of final residuals ``x``: answer logit, logit difference to ``cf_answer``, answer
    probability and each custom metric's ``logits_fn`` (all ``[sender, pair]``, float32).

    The logit and the logit difference read two columns of the unembedding (:func:`token_logits`), the same way for
    every row, patched or not. The probability needs a log-sum-exp over the whole vocabulary (the unembedding of
    every row: as many FLOPs as the END-only MLPs of a sweep), so it is computed only with ``prob`` (else NaN) or
    where custom metrics need the logits anyway; then rows are unembedded in chunks of whole senders."""
    S, P, _ = x.shape
    logit = token_logits(model, x, answer)
    out = {"logit": logit, "logit_diff": logit - token_logits(model, x, cf_answer)}
    if not prob and not custom:
        out["prob"] = torch.full_like(logit, float("nan"))
        return out
    per = max(1, rows_per_chunk // P)
    parts: dict[str, list[Tensor]] = {"prob": [], **{m.name: [] for m in custom}}
    for s in range(0, S, per):
        logits = end_logits(model, x[s : s + per]).reshape(-1, P, model.cfg.d_vocab)  # [sender, pair, vocab]
        parts["prob"].append((logit[s : s + per] - logits.logsumexp(-1)).exp())
        for m in custom:
            parts[m.name].append(torch.stack([m.of_logits(row, answer, cf_answer).float().reshape(P) for row in logits]))
    out.update({k: torch.cat(v) for k, v in parts.items()})
    return out


def baseline_from(model: Model, answer: Tensor, runs: Runs, custom: Sequence[Metric] = (),
                  cf_label: Tensor | None = None) -> Baseline:
    """The unpatched reference and counterfactual END quantities (the counterfactual's answer: its label where
    ``cf_label`` has one, else the counterfactual run's top token; :func:`~circuits.data.pairs.second_answers`)."""
    from circuits.data.pairs import second_answers

    cf_answer = second_answers(cf_label, end_logits(model, runs.cf_end_resid))
    ref = readout(model, runs.ref_end_resid[None], answer, cf_answer, custom)
    cf = readout(model, runs.cf_end_resid[None], answer, cf_answer)
    ref_logits = model.unembed(model.ln_final(runs.ref_end_resid[:, None]))[:, 0].float()
    rows = torch.arange(len(answer), device=ref_logits.device)
    rank = (ref_logits > ref_logits[rows, answer.to(ref_logits.device)][:, None]).sum(-1)
    return Baseline(answer, cf_answer, ref["logit"][0], ref["logit_diff"][0], ref["prob"][0], cf["logit"][0],
                    cf["logit_diff"][0], cf["prob"][0], custom={m.name: ref[m.name][0] for m in custom}, answer_rank=rank)


def check_supported(model: Model) -> None:
    """Refuse, with the reason, what the END-only pieces above do not compute the way TransformerLens does.

    Supported: pre-norm decoders with rotary or learned positions (Llama 2/3.x with RoPE scaling, Mistral, Qwen2
    with Q/K/V biases, Qwen3, Gemma 2/3 with norms after attention and MLP, soft-capping, QK norm and local/global
    layers, GPT-2). Everything in the list below could be done END-only too; it is refused because this engine
    does not implement it, not because it needs whole sequences."""
    problems = model.backend.end_unsupported()
    if problems:
        raise ValueError(
            f"The END-only engine does not support {'; '.join(problems)} (model {getattr(model.cfg, 'model_name', '?')}). Accepted: "
            "pre-norm decoders with rotary or learned positions, such as Llama 2/3.x, Mistral, Qwen2/2.5, Qwen3, "
            "Gemma 2/3 and GPT-2."
        )
