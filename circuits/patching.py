"""The END-position patching engine (Section 4.1, Algorithm 1, Appendix B).

Two sweeps over every component -- each attention head (``hook_z`` of one head at END) and each MLP
(``hook_mlp_out`` at END) -- on a batch of prompt pairs:

- **path patching** (the paper's): the sender takes its counterfactual value at END, every other
  head is frozen at its reference value, MLPs recompute; the receiver is the logits.
- **activation patching**: the sender takes its counterfactual value at END and everything
  downstream recomputes.

Why this is exact and fast. Attention is causal and only the END position is changed, so every
earlier position keeps its reference value in every layer. After a patch at layer ``l`` the work
left is one token per layer:

- path patching: the frozen heads add their reference attention output at END, and each MLP
  recomputes on the END vector alone -- no attention is computed at all;
- activation patching: later attention recomputes at END only; its keys and values at earlier
  positions are those of the reference run (cached once), and only END's own query, key and value
  are new.

Many senders share one pass: the END state is a ``[sender, pair, d_model]`` tensor, senders join it
at their own layer, and the answer logits are read from the unembedding columns needed (plus a
log-sum-exp for probabilities). Chunks of senders keep memory within a budget. The plain
one-forward-per-component loop lives in :mod:`circuits.patching_reference`; tests assert the two agree.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import einops
import torch
import torch.nn.functional as F
from jaxtyping import Float, Int
from torch import Tensor
from tqdm.auto import tqdm
from transformer_lens import HookedTransformer
from transformer_lens.utilities.attention import simple_attn_linear
from transformer_lens.utils import get_act_name

from circuits.prompts import PairBatch

Mode = Literal["path", "activation"]
Metric = Literal["relative_logit", "fraction", "logit_diff", "prob"]
METRICS: tuple[Metric, ...] = ("relative_logit", "fraction", "logit_diff", "prob")
# Which sign makes a component important for each metric ("a drop in the answer" for all but fraction).
IMPORTANT_SIGN: dict[str, int] = {"relative_logit": -1, "fraction": 1, "logit_diff": -1, "prob": -1}
METRIC_DOC = {
    "relative_logit": "mean over pairs of (patched - original) / original answer logit (the paper's metric)",
    "fraction": "mean change of the answer logit over the mean change the full counterfactual causes",
    "logit_diff": "mean change of logit(answer) - logit(counterfactual run's answer)",
    "prob": "mean change of the answer probability",
}


@dataclass(frozen=True)
class Component:
    """A sender: an attention head (``kind="head"``) or a whole MLP (``head`` is None)."""

    kind: Literal["head", "mlp"]
    layer: int
    head: int | None = None

    def __str__(self) -> str:
        return f"{self.layer}.{self.head}" if self.kind == "head" else f"MLP{self.layer}"


@dataclass
class Baseline:
    """END-position quantities of the unpatched runs, one value per pair."""

    answer: Int[Tensor, " pair"]
    cf_answer: Int[Tensor, " pair"]  # the counterfactual run's top prediction
    logit: Float[Tensor, " pair"]  # answer logit, reference run
    logit_diff: Float[Tensor, " pair"]  # logit(answer) - logit(cf_answer), reference run
    prob: Float[Tensor, " pair"]
    cf_logit: Float[Tensor, " pair"]  # answer logit, counterfactual run
    cf_logit_diff: Float[Tensor, " pair"]
    cf_prob: Float[Tensor, " pair"]


@dataclass
class SweepResult:
    """Patched END quantities for every head and MLP, per pair (float32).

    ``head_*`` are ``[layer, head, pair]`` and ``mlp_*`` are ``[layer, pair]``: the answer logit,
    the answer-minus-counterfactual-answer logit difference and the answer probability after patching.
    """

    mode: Mode
    baseline: Baseline
    head_logit: Float[Tensor, "layer head pair"]
    head_logit_diff: Float[Tensor, "layer head pair"]
    head_prob: Float[Tensor, "layer head pair"]
    mlp_logit: Float[Tensor, "layer pair"]
    mlp_logit_diff: Float[Tensor, "layer pair"]
    mlp_prob: Float[Tensor, "layer pair"]
    extra: dict = field(default_factory=dict)

    def per_pair(self, metric: Metric) -> tuple[Float[Tensor, "layer head pair"], Float[Tensor, "layer pair"]]:
        """The metric for each component and pair."""
        b = self.baseline
        if metric == "relative_logit":
            return (self.head_logit - b.logit) / b.logit, (self.mlp_logit - b.logit) / b.logit
        if metric == "fraction":
            full = b.cf_logit - b.logit
            return (self.head_logit - b.logit) / full, (self.mlp_logit - b.logit) / full
        if metric == "logit_diff":
            return self.head_logit_diff - b.logit_diff, self.mlp_logit_diff - b.logit_diff
        if metric == "prob":
            return self.head_prob - b.prob, self.mlp_prob - b.prob
        raise ValueError(f"Unknown metric {metric!r}; accepted: {', '.join(METRICS)}")

    def effects(self, metric: Metric = "relative_logit") -> tuple[Float[Tensor, "layer head"], Float[Tensor, " layer"]]:
        """Mean over pairs. ``fraction`` is a ratio of means (per-pair ratios explode when a pair's
        full counterfactual effect is near 0)."""
        if metric == "fraction":
            b = self.baseline
            full = (b.cf_logit - b.logit).mean()
            return (self.head_logit - b.logit[None, None]).mean(-1) / full, (self.mlp_logit - b.logit[None]).mean(-1) / full
        heads, mlps = self.per_pair(metric)
        return heads.mean(-1), mlps.mean(-1)


# --- the reference and counterfactual runs ----------------------------------------------------


@dataclass
class _Runs:
    resid_pre: Float[Tensor, "layer pair d_model"]
    resid_mid: Float[Tensor, "layer pair d_model"]
    attn_out: Float[Tensor, "layer pair d_model"]
    z_ref: Float[Tensor, "layer pair head d_head"]
    z_cf: Float[Tensor, "layer pair head d_head"]
    mlp_out_cf: Float[Tensor, "layer pair d_model"]
    keys: list[Tensor]  # per layer [pair, pos, kv_head, d_head] (rotated where rotary), activation mode only
    values: list[Tensor]
    ref_end_resid: Float[Tensor, "pair d_model"]
    cf_end_resid: Float[Tensor, "pair d_model"]


def _gather_end(store: dict, name: str, end: Tensor):
    def hook(act: Tensor, hook) -> None:
        store[name] = act[torch.arange(act.shape[0], device=act.device), end].detach()

    return hook


def _store_full(store: dict, name: str):
    def hook(act: Tensor, hook) -> None:
        store[name] = act.detach()

    return hook


@torch.no_grad()
def _collect(model: HookedTransformer, batch: PairBatch, need_kv: bool) -> _Runs:
    L = model.cfg.n_layers
    end = batch.end.to(model.cfg.device)
    ref: dict[str, Tensor] = {}
    cf: dict[str, Tensor] = {}
    rotary = model.cfg.positional_embedding_type == "rotary"
    ref_hooks = []
    for l in range(L):
        for site in ("resid_pre", "resid_mid", "attn_out", "z"):
            name = get_act_name(site, l)
            ref_hooks.append((name, _gather_end(ref, name, end)))
        if need_kv:
            k_name = f"blocks.{l}.attn.hook_rot_k" if rotary else get_act_name("k", l)
            ref_hooks.append((k_name, _store_full(ref, k_name)))
            ref_hooks.append((get_act_name("v", l), _store_full(ref, get_act_name("v", l))))
    final = get_act_name("resid_post", L - 1)
    ref_hooks.append((final, _gather_end(ref, final, end)))
    model.run_with_hooks(batch.reference.to(model.cfg.device), fwd_hooks=ref_hooks, stop_at_layer=L)
    cf_hooks = [(final, _gather_end(cf, final, end))]
    for l in range(L):
        for site in ("z", "mlp_out"):
            name = get_act_name(site, l)
            cf_hooks.append((name, _gather_end(cf, name, end)))
    model.run_with_hooks(batch.counterfactual.to(model.cfg.device), fwd_hooks=cf_hooks, stop_at_layer=L)
    stack = lambda d, site: torch.stack([d[get_act_name(site, l)] for l in range(L)])  # noqa: E731
    keys = values = []
    if need_kv:
        keys = [ref[f"blocks.{l}.attn.hook_rot_k" if rotary else get_act_name("k", l)] for l in range(L)]
        values = [ref[get_act_name("v", l)] for l in range(L)]
    return _Runs(
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


def _mlp(model: HookedTransformer, layer: int, x: Float[Tensor, "... d_model"]) -> Tensor:
    block = model.blocks[layer]
    shape = x.shape
    flat = x.reshape(-1, 1, shape[-1])
    return block.mlp(block.ln2(flat)).reshape(shape)


def _rotate(model: HookedTransformer, layer: int, x: Float[Tensor, "... n d_head"], pos: Int[Tensor, " pair"]) -> Tensor:
    """Rotary embedding of ``x`` (``[..., pair, head, d_head]``) at each pair's own position."""
    attn = model.blocks[layer].attn
    rd = model.cfg.rotary_dim
    x_rot, x_pass = x[..., :rd], x[..., rd:]
    cos = attn.rotary_cos[pos][:, None, :].to(x.dtype)  # [pair, 1, rd]
    sin = attn.rotary_sin[pos][:, None, :].to(x.dtype)
    rotated = x_rot * cos + attn.rotate_every_two(x_rot) * sin
    return torch.cat([rotated, x_pass], dim=-1)


def _attention_at_end(
    model: HookedTransformer,
    layer: int,
    x: Float[Tensor, "sender pair d_model"],
    keys: Float[Tensor, "pair pos kv d_head"],
    values: Float[Tensor, "pair pos kv d_head"],
    end: Int[Tensor, " pair"],
) -> Float[Tensor, "sender pair d_model"]:
    """Attention output at END for new END residuals, with earlier positions from the reference cache."""
    cfg = model.cfg
    attn = model.blocks[layer].attn
    S, P, _ = x.shape
    xn = model.blocks[layer].ln1(x.reshape(S * P, 1, -1)).reshape(S, P, -1)
    n_kv = cfg.n_key_value_heads or cfg.n_heads
    W_K = attn._W_K if cfg.n_key_value_heads else attn.W_K
    b_K = attn._b_K if cfg.n_key_value_heads else attn.b_K
    W_V = attn._W_V if cfg.n_key_value_heads else attn.W_V
    b_V = attn._b_V if cfg.n_key_value_heads else attn.b_V
    flat = xn.reshape(S * P, 1, -1)
    q, k, v = (simple_attn_linear(flat, w, b).reshape(S, P, -1, cfg.d_head)
               for w, b in ((attn.W_Q, attn.b_Q), (W_K, b_K), (W_V, b_V)))
    if cfg.positional_embedding_type == "rotary":
        q = _rotate(model, layer, q, end)
        k = _rotate(model, layer, k, end)
    q = einops.rearrange(q, "s p (k g) e -> s p k g e", k=n_kv)
    scale = attn.attn_scale
    prefix_scores = torch.einsum("spkge,ptke->spkgt", q, keys) / scale
    self_score = torch.einsum("spkge,spke->spkg", q, k)[..., None] / scale
    positions = torch.arange(keys.shape[1], device=x.device)
    masked = positions[None, :] >= end[:, None]  # [pair, pos]: END itself and padding after it
    if cfg.window_size is not None and (cfg.use_local_attn or attn.attn_type == "local"):
        masked = masked | (positions[None, :] <= end[:, None] - cfg.window_size)
    prefix_scores = prefix_scores.masked_fill(masked[None, :, None, None, :], float("-inf"))
    pattern = torch.cat([prefix_scores, self_score], dim=-1).float().softmax(-1).to(x.dtype)
    z = torch.einsum("spkgt,ptke->spkge", pattern[..., :-1], values) + pattern[..., -1:] * v[:, :, :, None, :]
    return _project_z(attn, einops.rearrange(z, "s p k g e -> s p (k g) e"))


def _project_z(attn, z: Float[Tensor, "s p head d_head"]) -> Float[Tensor, "s p d_model"]:
    """Attention output from ``z``, with the same arithmetic as TransformerLens's attention."""
    w = einops.rearrange(attn.W_O, "h e d -> d (h e)")
    return F.linear(einops.rearrange(z, "s p h e -> s p (h e)"), w, attn.b_O)


def _readout(
    model: HookedTransformer, x: Float[Tensor, "rows d_model"], answer: Tensor, cf_answer: Tensor, rows_per_chunk: int
) -> tuple[Tensor, Tensor, Tensor]:
    """Answer logit, logit difference to ``cf_answer`` and answer probability, in float32.

    Uses the model's own final norm and unembedding (the same arithmetic as a forward pass); the full
    vocabulary is needed anyway for the probability's log-sum-exp, so it is computed in row chunks."""
    logit, other, lse = [], [], []
    for i in range(0, x.shape[0], rows_per_chunk):
        rows = slice(i, i + rows_per_chunk)
        logits = model.unembed(model.ln_final(x[rows, None]))[:, 0].float()
        idx = torch.arange(logits.shape[0], device=logits.device)
        logit.append(logits[idx, answer[rows]])
        other.append(logits[idx, cf_answer[rows]])
        lse.append(logits.logsumexp(-1))
    logit_t, other_t, lse_t = torch.cat(logit), torch.cat(other), torch.cat(lse)
    return logit_t, logit_t - other_t, (logit_t - lse_t).exp()


# --- the sweep --------------------------------------------------------------------------------


def all_components(model: HookedTransformer) -> list[Component]:
    heads = [Component("head", l, h) for l in range(model.cfg.n_layers) for h in range(model.cfg.n_heads)]
    return heads + [Component("mlp", l) for l in range(model.cfg.n_layers)]


def _check_supported(model: HookedTransformer) -> None:
    cfg = model.cfg
    problems = []
    if cfg.parallel_attn_mlp:
        problems.append("parallel attention/MLP blocks")
    if getattr(cfg, "use_normalization_before_and_after", False):
        problems.append("norms after attention and MLP")
    if cfg.attn_only:
        problems.append("attention-only models")
    if cfg.positional_embedding_type not in ("rotary", "standard"):
        problems.append(f"positional embedding {cfg.positional_embedding_type!r}")
    if getattr(cfg, "output_logits_soft_cap", -1) and cfg.output_logits_soft_cap > 0:
        problems.append("logit soft-capping")
    if getattr(cfg, "attn_scores_soft_cap", -1) and cfg.attn_scores_soft_cap > 0:
        problems.append("attention soft-capping")
    if problems:
        raise ValueError(
            f"The END-only engine does not support {', '.join(problems)} (model {cfg.model_name}). Accepted: "
            "pre-norm decoder models with rotary or learned positions, such as Llama, Mistral and GPT-2."
        )


@torch.no_grad()
def baseline(model: HookedTransformer, batch: PairBatch) -> Baseline:
    """Unpatched END quantities for the reference and counterfactual runs."""
    runs = _collect(model, batch, need_kv=False)
    return _baseline_from(model, batch, runs)


def _baseline_from(model: HookedTransformer, batch: PairBatch, runs: _Runs) -> Baseline:
    answer = batch.answer.to(model.cfg.device)
    normed = model.ln_final(runs.cf_end_resid[:, None])[:, 0]
    cf_answer = (normed @ model.unembed.W_U + model.unembed.b_U).argmax(-1)
    big = 4096
    logit, ld, prob = _readout(model, runs.ref_end_resid, answer, cf_answer, big)
    cf_logit, cf_ld, cf_prob = _readout(model, runs.cf_end_resid, answer, cf_answer, big)
    return Baseline(answer, cf_answer, logit, ld, prob, cf_logit, cf_ld, cf_prob)


def rows_for_budget(model: HookedTransformer, n_pairs: int, memory_mb: float) -> int:
    """Senders per chunk so that one chunk's working tensors fit ``memory_mb``."""
    cfg = model.cfg
    per_row = cfg.d_model * 6 + (cfg.d_mlp or 4 * cfg.d_model) * 3 + cfg.n_heads * 64
    bytes_per = torch.finfo(cfg.dtype).bits // 8
    rows = int(memory_mb * 2**20 / (per_row * bytes_per))
    return max(1, rows // max(n_pairs, 1))


@torch.no_grad()
def sweep(
    model: HookedTransformer,
    batch: PairBatch,
    mode: Mode = "path",
    *,
    components: list[Component] | None = None,
    memory_mb: float = 1024,
    progress: bool = True,
) -> SweepResult:
    """Patch every component's END value from the counterfactual run, one END-only pass for many.

    Args:
        model: a ``HookedTransformer`` (fp32, bf16 or fp16; grouped-query attention supported).
        batch: prompt pairs (right-padded; each pair's END is ``batch.end``).
        mode: ``"path"`` (other heads frozen at their reference values) or ``"activation"``.
        components: senders to patch (default: every head and MLP); others are left NaN.
        memory_mb: working-memory budget that sets how many senders share a pass.
        progress: show a progress bar over chunks.
    """
    if mode not in ("path", "activation"):
        raise ValueError(f"Unknown mode {mode!r}; accepted: 'path', 'activation'")
    _check_supported(model)
    cfg = model.cfg
    L, H, P = cfg.n_layers, cfg.n_heads, len(batch)
    device = cfg.device
    runs = _collect(model, batch, need_kv=(mode == "activation"))
    base = _baseline_from(model, batch, runs)
    end = batch.end.to(device)
    comps = sorted(components or all_components(model), key=lambda c: (c.layer, c.kind == "mlp", c.head or 0))
    for c in comps:
        if not 0 <= c.layer < L or (c.kind == "head" and not (c.head is not None and 0 <= c.head < H)):
            raise ValueError(f"Component {c} is outside this model ({L} layers x {H} heads).")

    out = {k: torch.full((L, H, P), float("nan")) for k in ("head_logit", "head_logit_diff", "head_prob")}
    out.update({k: torch.full((L, P), float("nan")) for k in ("mlp_logit", "mlp_logit_diff", "mlp_prob")})
    per_chunk = rows_for_budget(model, P, memory_mb)
    chunks = [comps[i : i + per_chunk] for i in range(0, len(comps), per_chunk)]
    bar = tqdm(total=len(comps), desc=f"{mode} patching", unit="comp", disable=not progress)
    for chunk in chunks:
        x, owners = None, []
        first = chunk[0].layer
        for layer in range(first, L):
            if x is not None:  # rows already past their sender layer: attention at this layer
                if mode == "path":
                    x = x + runs.attn_out[layer][None]
                else:
                    x = x + _attention_at_end(model, layer, x, runs.keys[layer], runs.values[layer], end)
            heads = [c for c in chunk if c.layer == layer and c.kind == "head"]
            if heads:
                # z at END with one head from the counterfactual run, projected like a forward pass does.
                idx = torch.tensor([c.head for c in heads], device=device)
                z = runs.z_ref[layer][None].repeat(len(heads), 1, 1, 1)  # [n, pair, head, d_head]
                rows = torch.arange(len(heads), device=device)
                z[rows, :, idx] = runs.z_cf[layer][:, idx].transpose(0, 1)
                new = runs.resid_pre[layer][None] + _project_z(model.blocks[layer].attn, z)
                x = new if x is None else torch.cat([x, new])
                owners += heads
            if x is not None:
                x = x + _mlp(model, layer, x)
            mlps = [c for c in chunk if c.layer == layer and c.kind == "mlp"]
            if mlps:
                new = (runs.resid_mid[layer] + runs.mlp_out_cf[layer])[None].expand(len(mlps), -1, -1)
                x = new if x is None else torch.cat([x, new])
                owners += mlps
        assert x is not None
        n = x.shape[0]
        flat = x.reshape(n * P, -1)
        reps = lambda t: t.repeat(n)  # noqa: E731
        logit, ld, prob = _readout(model, flat, reps(base.answer), reps(base.cf_answer), 4096)
        logit, ld, prob = (t.reshape(n, P).cpu() for t in (logit, ld, prob))
        for i, c in enumerate(owners):
            if c.kind == "head":
                out["head_logit"][c.layer, c.head] = logit[i]
                out["head_logit_diff"][c.layer, c.head] = ld[i]
                out["head_prob"][c.layer, c.head] = prob[i]
            else:
                out["mlp_logit"][c.layer] = logit[i]
                out["mlp_logit_diff"][c.layer] = ld[i]
                out["mlp_prob"][c.layer] = prob[i]
        bar.update(len(chunk))
    bar.close()
    cpu_base = Baseline(*(getattr(base, f).cpu() for f in base.__dataclass_fields__))
    return SweepResult(mode=mode, baseline=cpu_base, **out)
