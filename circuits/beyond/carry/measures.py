"""The carry study's measurements, each beside its null (issue 42): is the first answer token of a two-digit sum (the
carry, "1") computed by other components than the units digit one position later?

- :func:`overlap`: the top-k components (heads and MLPs by their absolute mean effect at one answer position) at END
  and at END + 1, their Jaccard index with a bootstrap interval over pairs, against two nulls: the Jaccard of two
  random k-sets of the same components (exact, hypergeometric: :func:`random_jaccard`), and the split-half Jaccard at
  one position (the same position's top-k on two disjoint halves of the pairs: the overlap noise alone leaves).
- :func:`carry_directions` and :func:`flip_tops`: the difference of means of the END residual, carry against no
  carry, at every layer (its separation on the cells it was fitted on picks the layer), and the top token at END when
  that direction (or a random one of the same norm, the null) is added to a no-carry prompt's residual or subtracted
  from a carry prompt's, there and at END only.
- :func:`fourier_contrast`: the share of the top components' direct effect on the digits 0..9 at periods 10 and 5
  beyond the straight trend, at END + 1 against END, beside white noise's share on the same ten points.

Everything here takes tensors or a model and prompts; the job (:mod:`circuits.beyond.carry.job`) decides the data.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from jaxtyping import Bool, Float, Int
from torch import Tensor

from circuits.models.backend import Model, act_name
from circuits.patching.core.ranking import order
from circuits.patching.core.uncertainty import percentile_interval, resample_pairs
from circuits.types import jaccard


def component_names(n_layers: int, n_heads: int) -> list[str]:
    """The names of the flat component axis :func:`flat_components` makes: heads ``"L.H"`` then MLPs ``"MLP L"``."""
    return [f"{l}.{h}" for l in range(n_layers) for h in range(n_heads)] + [f"MLP{l}" for l in range(n_layers)]


def flat_components(heads: Float[Tensor, "layer head pair"], mlps: Float[Tensor, "layer pair"]
                    ) -> Float[Tensor, "component pair"]:
    """Heads (layer-major) then MLPs on one component axis."""
    return torch.cat([heads.reshape(-1, heads.shape[-1]), mlps.reshape(-1, mlps.shape[-1])])


def top_set(effects: Float[Tensor, " component"], k: int) -> Int[Tensor, " k"]:
    """The ``k`` components with the largest absolute effect (the project's one sort: ties by index)."""
    return order(effects.abs(), 1)[:k]


def random_jaccard(n: int, k: int, level: float = 0.95) -> dict[str, float]:
    """The Jaccard index of two k-sets drawn at random from ``n`` components, exactly: their intersection ``i`` is
    hypergeometric (``C(k, i) C(n - k, k - i) / C(n, k)``) and the index ``i / (2k - i)``. Its mean, the central
    ``level`` range, and the distribution (for :func:`p_at_least`)."""
    if not 0 < k <= n:
        raise ValueError(f"k must lie in 1..{n} (the components), got {k}")
    total = math.comb(n, k)
    probs = [math.comb(k, i) * math.comb(n - k, k - i) / total for i in range(k + 1)]
    values = [i / (2 * k - i) for i in range(k + 1)]
    cdf, lo, hi = 0.0, None, None
    for v, p in zip(values, probs):
        cdf += p
        if lo is None and cdf >= (1 - level) / 2:
            lo = v
        if hi is None and cdf >= (1 + level) / 2:
            hi = v
    return {"mean": sum(v * p for v, p in zip(values, probs)), "low": float(lo), "high": float(hi),
            "values": values, "probs": probs}


def p_at_least(null: dict, observed: float) -> float:
    """The chance that two random k-sets overlap at least as much as ``observed`` (one-sided, from
    :func:`random_jaccard`'s distribution)."""
    return float(sum(p for v, p in zip(null["values"], null["probs"]) if v >= observed - 1e-12))


def overlap(at0: Float[Tensor, "component pair"], at1: Float[Tensor, "component pair"], k: int, *,
            n_boot: int = 1000, n_splits: int = 200, level: float = 0.95, seed: int = 0) -> dict:
    """The top-``k`` components at END (``at0``: each component's effect on each pair there) and at END + 1
    (``at1``, the same pairs), by absolute mean effect, and their overlap.

    Returns ``jaccard`` (on every pair) with its percentile bootstrap interval (``n_boot`` resamples of the pairs,
    the same draw for both positions), ``null`` (:func:`random_jaccard`: mean, range) and ``p_random`` (the chance of
    a random overlap at least as large), and the split-half reference: over ``n_splits`` random halves A, B of the
    pairs, the Jaccard of each position's top-k on A with the same position's on B (``within``, per position, then
    their mean) and with the other position's on B (``across``): how much two samples of one position's top-k agree,
    the most a shared circuit could show on this many pairs."""
    if at0.shape != at1.shape or at0.ndim != 2:
        raise ValueError(f"effects at both positions must be [component, pair] of one shape, got {list(at0.shape)} "
                         f"and {list(at1.shape)}")
    n, P = at0.shape
    if P < 2:
        raise ValueError(f"the overlap's interval needs at least 2 pairs, got {P}")
    top0, top1 = top_set(at0.mean(1), k), top_set(at1.mean(1), k)
    idx = resample_pairs(P, n_boot, seed)
    draws = torch.tensor([jaccard(top_set(at0[:, i].mean(1), k), top_set(at1[:, i].mean(1), k)) for i in idx], dtype=torch.float64)
    lo, hi = percentile_interval(draws, level)
    null = random_jaccard(n, k, level)
    g = torch.Generator().manual_seed(seed + 1)
    within0, within1, across = [], [], []
    for _ in range(n_splits):
        perm = torch.randperm(P, generator=g)
        a, b = perm[: P // 2], perm[P // 2: 2 * (P // 2)]
        t0a, t0b = top_set(at0[:, a].mean(1), k), top_set(at0[:, b].mean(1), k)
        t1a, t1b = top_set(at1[:, a].mean(1), k), top_set(at1[:, b].mean(1), k)
        within0.append(jaccard(t0a, t0b))
        within1.append(jaccard(t1a, t1b))
        across.append((jaccard(t0a, t1b) + jaccard(t1a, t0b)) / 2)
    w0, w1, ac = (torch.tensor(v, dtype=torch.float64) for v in (within0, within1, across))
    gap = (w0 + w1) / 2 - ac  # per split: how much less two positions agree than one position with itself
    glo, ghi = percentile_interval(gap, level)
    observed = jaccard(top0, top1)
    return {"k": k, "n_components": n, "n_pairs": P, "top_end": top0.tolist(), "top_next": top1.tolist(),
            "jaccard": observed, "low": float(lo), "high": float(hi), "n_boot": n_boot,
            "null": {key: null[key] for key in ("mean", "low", "high")}, "p_random": p_at_least(null, observed),
            "split_half": {"n_splits": n_splits, "within_end": float(w0.mean()), "within_next": float(w1.mean()),
                           "across": float(ac.mean()), "gap": float(gap.mean()), "gap_low": float(glo),
                           "gap_high": float(ghi)}}


# --- the carry direction ------------------------------------------------------------------------------------------


def carry_directions(resid: Float[Tensor, "layer prompt d_model"], carry: Bool[Tensor, " prompt"]
                     ) -> tuple[Float[Tensor, "layer d_model"], Float[Tensor, " layer"]]:
    """At each layer the difference of means of the residual, carry prompts minus the others, and its separation
    there: the gap between the two classes' mean projections on it over their pooled standard deviation (Cohen's d
    of the projection)."""
    if carry.all() or not carry.any():
        raise ValueError("the carry direction needs prompts of both classes (a + b >= 10 and a + b <= 9)")
    r = resid.double()
    d = r[:, carry].mean(1) - r[:, ~carry].mean(1)
    unit = d / d.norm(dim=-1, keepdim=True).clamp_min(1e-30)
    proj = torch.einsum("lpd,ld->lp", r, unit)
    p1, p0 = proj[:, carry], proj[:, ~carry]
    pooled = (((p1.var(1, unbiased=True) * (p1.shape[1] - 1) + p0.var(1, unbiased=True) * (p0.shape[1] - 1))
               / max(1, p1.shape[1] + p0.shape[1] - 2)).sqrt()) if p1.shape[1] + p0.shape[1] > 2 else torch.ones(len(d))
    sep = (p1.mean(1) - p0.mean(1)) / pooled.clamp_min(1e-30)
    return d.float(), sep.float()


def random_directions(n: int, d_model: int, norm: float, seed: int = 0) -> Float[Tensor, "direction d_model"]:
    """``n`` directions drawn uniformly on the sphere of radius ``norm`` (the null's)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d_model, generator=g, dtype=torch.float64)
    return (x / x.norm(dim=-1, keepdim=True) * norm).float()


@torch.no_grad()
def flip_tops(model: Model, tokens: Int[Tensor, "prompt pos"], ends: Int[Tensor, " prompt"], layer: int,
              directions: Float[Tensor, "direction d_model"], signs: Float[Tensor, " prompt"], *,
              batch_size: int = 64) -> Int[Tensor, "direction prompt"]:
    """The top token at END of each prompt when ``signs[prompt] * directions[i]`` is added to its residual after
    block ``layer`` (``hook_resid_post``) at END alone; rows of (direction, prompt) batched, one hook per batch.
    Prompts are right-padded to one width (``ends``: each prompt's END)."""
    D, P = len(directions), len(tokens)
    if signs.shape != (P,) or ends.shape != (P,):
        raise ValueError(f"signs and ends need one entry per prompt ({P}), got {list(signs.shape)} and {list(ends.shape)}")
    if not 0 <= layer < model.cfg.n_layers:
        raise ValueError(f"layer {layer} is outside the model's 0..{model.cfg.n_layers - 1}")
    device = model.cfg.device
    rows = [(i, p) for i in range(D) for p in range(P)]
    out = torch.empty(D, P, dtype=torch.long)
    for s in range(0, len(rows), batch_size):
        chunk = rows[s: s + batch_size]
        di = torch.tensor([i for i, _ in chunk])
        pi = torch.tensor([p for _, p in chunk])
        add = (directions[di] * signs[pi, None]).to(device)
        end = ends[pi].to(device)
        r = torch.arange(len(chunk), device=device)

        def hook(x, hook, add=add, end=end, r=r):
            x = x.clone()
            x[r, end] = x[r, end] + add.to(x.dtype)
            return x

        logits = model.run_with_hooks(tokens[pi].to(device), fwd_hooks=[(act_name("resid_post", layer), hook)])
        out[di, pi] = logits[r, end].argmax(-1).cpu()
    return out


@torch.no_grad()
def end_residuals(model: Model, tokens: Int[Tensor, "prompt pos"], ends: Int[Tensor, " prompt"], *,
                  batch_size: int = 64) -> tuple[Float[Tensor, "layer prompt d_model"], Int[Tensor, " prompt"]]:
    """Every layer's residual after its block at END (``hook_resid_post``), and the unpatched top token at END."""
    L = model.cfg.n_layers
    names = [act_name("resid_post", l) for l in range(L)]
    device = model.cfg.device
    resid, tops = [], []
    for s in range(0, len(tokens), batch_size):
        t, e = tokens[s: s + batch_size].to(device), ends[s: s + batch_size].to(device)
        r = torch.arange(len(t), device=device)
        logits, cache = model.run_with_cache(t, names_filter=lambda n: n in names)
        resid.append(torch.stack([cache[n][r, e].float().cpu() for n in names]))
        tops.append(logits[r, e].argmax(-1).cpu())
    return torch.cat(resid, 1), torch.cat(tops)


def rate(flips: Sequence[bool] | Tensor) -> float | None:
    """The share of True, None for no item."""
    f = torch.as_tensor(flips, dtype=torch.bool)
    return float(f.float().mean()) if f.numel() else None


# --- Fourier energy beyond the straight trend --------------------------------------------------------------------


def beyond_trend_shares(effects: Float[Tensor, "... n"], periods: Sequence[float] = (10, 5)) -> Float[Tensor, "..."]:
    """The share of a signal's energy over the number line (its mean left out) that lies at ``periods`` once the best
    straight line is taken out too: what a period-10 or period-5 wave adds beyond a monotone trend, which on 0..9 puts
    63.5% of its own energy on period 10 (:func:`circuits.explain.fourier.trend_shares`). 0 for a straight line."""
    from circuits.explain.fourier import fourier_spectrum

    n = effects.shape[-1]
    ks = [round(n / p) for p in periods]
    if any(k < 1 or k > n // 2 or abs(n / k - p) > 1e-9 for k, p in zip(ks, periods)):
        raise ValueError(f"periods {list(periods)} are not periods of a number line of {n} points")
    x = effects.double() - effects.double().mean(-1, keepdim=True)
    t = torch.arange(n, dtype=torch.float64)
    ramp = (t - t.mean()) / (t - t.mean()).norm()
    rest = x - (x @ ramp)[..., None] * ramp
    energy = fourier_spectrum(rest).double()
    total = (x ** 2).sum(-1)
    return (energy[..., ks].sum(-1) / total.clamp_min(1e-30)).float()


def beyond_trend_chance(n: int, periods: Sequence[float] = (10, 5), draws: int = 20000, seed: int = 0) -> float:
    """:func:`beyond_trend_shares` of white noise on ``n`` points, the mean over ``draws`` Gaussian signals: the
    chance level of that share on this number line."""
    g = torch.Generator().manual_seed(seed)
    return float(beyond_trend_shares(torch.randn(draws, n, generator=g, dtype=torch.float64), periods).double().mean())


def fourier_contrast(at_end: Float[Tensor, "component pair n"], at_next: Float[Tensor, "component pair n"], *,
                     periods: Sequence[float] = (10, 5), n_boot: int = 1000, level: float = 0.95, seed: int = 0) -> dict:
    """The energy share at ``periods`` beyond the straight trend (:func:`beyond_trend_shares`, mean over pairs per
    component, then over components) of each position's components' direct effects on the number line, END + 1 minus
    END with a percentile bootstrap interval and a two-sided bootstrap p over the components (each position's
    resampled apart: the claim is about components), beside white noise's share on the same line."""
    from circuits.patching.core.uncertainty import bootstrap_p

    e = beyond_trend_shares(at_end, periods).double().mean(1)  # [component]
    x = beyond_trend_shares(at_next, periods).double().mean(1)
    be = e[resample_pairs(len(e), n_boot, seed)].mean(1)
    bx = x[resample_pairs(len(x), n_boot, seed + 1)].mean(1)
    lo, hi = percentile_interval(bx - be, level)
    elo, ehi = percentile_interval(be, level)
    xlo, xhi = percentile_interval(bx, level)
    return {"periods": [float(p) for p in periods], "n_numbers": int(at_end.shape[-1]),
            "end": {"share": float(e.mean()), "low": float(elo), "high": float(ehi), "per_component": e.tolist()},
            "next": {"share": float(x.mean()), "low": float(xlo), "high": float(xhi), "per_component": x.tolist()},
            "difference": float(x.mean() - e.mean()), "low": float(lo), "high": float(hi),
            "p": bootstrap_p(bx - be), "chance": beyond_trend_chance(int(at_end.shape[-1]), periods, seed=seed)}
