"""Fourier features of the key components' direct effect on the number tokens (Zhou et al., NeurIPS 2024, Section 3;
Feucht et al. 2026, "Arithmetic in the Wild").

Zhou et al. read each MLP's and attention layer's output at the last position through the unembedding, restricted to
the number tokens, and take the discrete Fourier transform over the number axis: the outputs are sparse in that
basis, MLPs carrying the low frequencies (the magnitude of the answer) and attention the high ones (its value
modulo 2, 5, 10). Here the same readout is made for single components (a head, a whole MLP) at END:

- :func:`direct_number_effects`: each component's output at END, divided by the scale of the whole stream that the
  final norm divides by (centred where the model centres: LayerNorm), times the unembedding columns of the number
  tokens -- its *direct* effect on each number's logit, ``[component, pair, number]``. Summed over every component,
  the embeddings and the biases it gives the model's number logits (tested), as
  :mod:`~circuits.explain.dla`'s parts give its logit difference.
- :func:`fourier_spectrum`: the energy of a signal over the number line at each frequency ``k`` (period ``n / k``),
  Parseval-normalised so that the energies add up to the signal's sum of squares; ``k = 0`` is the mean (a
  component lifting every number alike says nothing about which number), so shares and dominant periods leave it out.
- the nulls a share is read against: :func:`chance_shares` (white noise on the same number line: each period's
  expected share is its degrees of freedom over the ``n - 1`` the mean leaves, so on ten points periods 10, 5, 3.33
  and 2.5 get 2/9 each and period 2 gets 1/9, not 1/5) and :func:`trend_shares` (a straight line over the number
  line: a monotone "larger numbers up" lands mostly on the longest period, 63.5% of it on ten points);
  :meth:`NumberSpectra.component_share_intervals` bootstraps over the components a claim about heads or MLPs
  generalises across, not over pairs.

SmolLM2 and Gemma 3 tokenize numbers digit by digit: their single-token number line is 0..9 (:func:`number_tokens`
finds it from the tokenizer), so the periods that can be seen are 10, 5, 10/3, 2.5 and 2 (Zhou et al.'s GPT-2-XL
and Llama have single tokens up to 520 and more, hence periods up to 100 there). docs/results.md says why the value
axis of the operands is not used instead.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch
from jaxtyping import Float
from torch import Tensor

from circuits.data.pairs import PromptError, PromptPair, answer_token
from circuits.explain.dla import _check_linear, end_activations
from circuits.models.backend import Model
from circuits.models.backend import act_name as get_act_name
from circuits.patching.core.ranking import order
from circuits.types import Component

MAX_NUMBERS = 1000  # the number line is searched up to here (Llama-2's and GPT-2's single-token numbers stop earlier)


def number_tokens(tokenizer, prompt: str, limit: int = MAX_NUMBERS) -> list[int]:
    """The tokens of 0, 1, 2, ... written after ``prompt``, up to the first number that is not one token (0..9 for
    digit-by-digit tokenizers such as SmolLM2's and Gemma 3's); at least 0..1, else a :class:`PromptError`."""
    out: list[int] = []
    for n in range(limit):
        try:
            out.append(answer_token(tokenizer, prompt, str(n)))
        except PromptError:
            break
    if len(out) < 2:
        raise PromptError(f"Fewer than two numbers are single tokens after {prompt[-30:]!r}: there is no number line "
                          "to decompose")
    return out


def number_unembedding(model: Model, tokens: Sequence[int]) -> Float[Tensor, "d_model number"]:
    """The unembedding columns of ``tokens`` (times the final norm's weight where it is not folded), float32 on the
    CPU: what a normalised END vector is multiplied by to give those tokens' logits."""
    W_U = model.W_U.detach().float().cpu()[:, list(tokens)]
    w = getattr(model.ln_final, "w", None)
    return W_U * w.detach().float().cpu()[:, None] if w is not None else W_U


@torch.no_grad()
def direct_number_effects(model: Model, pairs: Sequence[PromptPair], components: Sequence[Component],
                          tokens: Sequence[int], batch_size: int = 32) -> Float[Tensor, "component pair number"]:
    """Each component's direct effect at END on the logit of each token of ``tokens`` (the number line), on the
    reference prompts: its END output, centred where the final norm centres, divided by the final norm's scale of the
    whole stream, times :func:`number_unembedding`. Models that normalise each sublayer's output (Gemma 2/3) have no
    such split and are refused in one line."""
    if model.backend.post_norms():  # asked of the backend: a Bridge's config does not say it (dla's check reads the config)
        raise ValueError(f"{model.cfg.model_name}: this model normalises each attention and MLP output before adding it "
                         "to the residual stream, so the stream is not a sum of per-component parts and a direct "
                         "effect is not defined; use patching (cc.sweep) instead")
    _check_linear(model)
    pairs, components = list(pairs), list(components)
    if not pairs or not components:
        raise ValueError("direct_number_effects needs at least one pair and one component")
    L = model.cfg.n_layers
    for c in components:
        if not 0 <= c.layer < L or (c.head is not None and not 0 <= c.head < model.cfg.n_heads):
            raise ValueError(f"{c} is outside this model ({L} layers of {model.cfg.n_heads} heads)")
    names = sorted({get_act_name(c.site, c.layer) for c in components}) + ["ln_final.hook_scale"]
    acts = end_activations(model, [p.reference_token_ids for p in pairs], names, batch_size)
    scale = acts["ln_final.hook_scale"].reshape(len(pairs), 1)
    U = number_unembedding(model, tokens)
    W_O = model.W_O.detach().float().cpu()
    center = model.cfg.normalization_type in ("LN", "LNPre")
    rows = []
    for c in components:
        a = acts[get_act_name(c.site, c.layer)]
        out = a[:, c.head] @ W_O[c.layer, c.head] if c.head is not None else a  # [pair, d_model]
        if center:
            out = out - out.mean(-1, keepdim=True)
        rows.append((out / scale) @ U)
    return torch.stack(rows)


def fourier_spectrum(signal: Float[Tensor, "... n"]) -> Float[Tensor, "... freq"]:
    """The energy of ``signal`` at each frequency ``k = 0 .. n // 2`` of the DFT over its last axis (period ``n / k``),
    each conjugate pair counted once with both halves, so the energies add up to ``(signal ** 2).sum(-1)``
    (Parseval). ``k = 0`` is the mean's share."""
    n = signal.shape[-1]
    if n < 2:
        raise ValueError(f"A spectrum needs a signal of at least 2 points, got {n}")
    X = torch.fft.rfft(signal.double(), dim=-1)
    weight = torch.full((X.shape[-1],), 2.0, dtype=torch.float64)
    weight[0] = 1.0
    if n % 2 == 0:
        weight[-1] = 1.0  # the Nyquist frequency has no conjugate twin
    return (X.abs() ** 2 * weight / n).float()


def periods(n: int) -> list[float]:
    """The period ``n / k`` of each frequency ``k = 1 .. n // 2`` (the mean, ``k = 0``, has none)."""
    return [n / k for k in range(1, n // 2 + 1)]


def energy_shares(energy: Float[Tensor, "... freq"]) -> Float[Tensor, "... period"]:
    """Each non-zero frequency's share of the energy the mean leaves (``k = 1 .. n // 2``; rows sum to 1, or are 0
    for a constant signal)."""
    e = energy[..., 1:]
    rest = e.sum(-1, keepdim=True)
    # a constant signal leaves only rounding error beside its mean: no period, not a spread over all of them
    flat = rest <= 1e-9 * energy.sum(-1, keepdim=True)
    return torch.where(flat, torch.zeros_like(e), e / rest.clamp_min(1e-30))


def chance_shares(n: int) -> Float[Tensor, " period"]:
    """Each period's expected share (:func:`energy_shares`) of white noise on ``n`` points: the chance level of a
    share on this number line. Computed through :func:`fourier_spectrum` itself: the expected energy of unit white
    noise at each frequency is the sum of the unit impulses' energies there (the points are uncorrelated), and for
    Gaussian noise the shares are Dirichlet-distributed, so their expectations are these ratios (each period's degrees
    of freedom, 2 or 1 at the Nyquist period, over the ``n - 1`` the mean leaves)."""
    if n < 2:
        raise ValueError(f"A number line needs at least 2 points, got {n}")
    return energy_shares(fourier_spectrum(torch.eye(n, dtype=torch.float64)).double().sum(0)).float()


def trend_shares(n: int) -> Float[Tensor, " period"]:
    """Each period's share of a straight line over ``n`` points (``0, 1, ..., n - 1``; any slope and offset give the
    same shares): what a pure magnitude trend puts on each period, the baseline a "period-n" share is read against."""
    if n < 2:
        raise ValueError(f"A number line needs at least 2 points, got {n}")
    return energy_shares(fourier_spectrum(torch.arange(n, dtype=torch.float64))).float()


@dataclass
class NumberSpectra:
    """The Fourier view of some components: ``effects[component, pair, number]`` (direct effect on each number token's
    logit at END, logits), ``energy[component, freq]`` (:func:`fourier_spectrum` of each pair's signal, mean over
    pairs: Zhou et al. average the spectrum over examples), ``numbers``: the number line (0..n-1)."""

    components: list[Component]
    numbers: list[int]
    tokens: list[int]
    effects: Float[Tensor, "component pair number"]
    energy: Float[Tensor, "component freq"]
    answers: list[int] = field(default_factory=list)  # each pair's answer on the number line (-1: not on it)

    @property
    def periods(self) -> list[float]:
        return periods(len(self.numbers))

    def shares(self) -> Float[Tensor, "component period"]:
        """Each period's share of each component's energy (the mean left out)."""
        return energy_shares(self.energy)

    def dominant(self, share: float = 0.5) -> dict[str, list[float]]:
        """Per component, the fewest periods (largest energy first) that carry at least ``share`` of its energy."""
        out = {}
        for c, row in zip(self.components, self.shares()):
            idx = order(row, 1)
            n = int((row[idx].cumsum(0) < share).sum()) + 1
            out[str(c)] = [self.periods[int(i)] for i in idx[:n]]
        return out

    def pair_energy(self) -> Float[Tensor, "component pair freq"]:
        return fourier_spectrum(self.effects)

    def ramp_share(self) -> Float[Tensor, " component"]:
        """The share of each component's energy (the mean left out) that a straight line over the number line
        explains: on a line as short as 0..9 a monotone trend (magnitude, "larger numbers up") lands mostly on the
        longest period, so this tells a trend from a true period-10 wave."""
        n = len(self.numbers)
        t = torch.arange(n, dtype=torch.float64)
        ramp = (t - t.mean()) / (t - t.mean()).norm()
        x = self.effects.double() - self.effects.double().mean(-1, keepdim=True)
        along = (x @ ramp) ** 2  # [component, pair]
        return (along.mean(1) / (x ** 2).sum(-1).mean(1).clamp_min(1e-30)).float()

    def kind_share_intervals(self, n_boot: int = 1000, level: float = 0.95, seed: int = 0
                             ) -> dict[str, tuple[Tensor, Tensor, Tensor]]:
        """For the heads and for the MLPs: the mean over those components of each period's share, with a percentile
        bootstrap interval over pairs (pairs resampled, spectra re-averaged): ``{kind: (share, low, high)}``, each
        ``[period]``."""
        from circuits.patching.core.uncertainty import percentile_interval, resample_pairs

        e = self.pair_energy()  # [component, pair, freq]
        idx = resample_pairs(e.shape[1], n_boot, seed)  # [boot, pair]
        boot = energy_shares(e[:, idx].mean(2))  # [component, boot, period]
        out = {}
        for kind in ("head", "mlp"):
            rows = [i for i, c in enumerate(self.components) if c.kind == kind]
            if rows:
                low, high = percentile_interval(boot[rows].mean(0), level)
                out[kind] = (self.shares()[rows].mean(0), low, high)
        return out

    def chance(self) -> Float[Tensor, " period"]:
        """:func:`chance_shares` on this view's number line."""
        return chance_shares(len(self.numbers))

    def trend(self) -> Float[Tensor, " period"]:
        """:func:`trend_shares` on this view's number line."""
        return trend_shares(len(self.numbers))

    def component_share_intervals(self, n_boot: int = 1000, level: float = 0.95, seed: int = 0
                                  ) -> dict[str, tuple[Tensor, Tensor, Tensor]]:
        """For the heads and for the MLPs: the mean over those components of each period's share, with a percentile
        bootstrap interval over the components (the heads, or the MLPs, resampled with replacement; each component's
        shares as measured on all pairs): how far "the key heads put X% on period p" holds across heads rather than
        across pairs. ``{kind: (share, low, high)}``, each ``[period]``; a kind of one component gets a point
        interval."""
        from circuits.patching.core.uncertainty import percentile_interval, resample_pairs

        shares = self.shares().double()
        out = {}
        for i, kind in enumerate(("head", "mlp")):
            rows = [j for j, c in enumerate(self.components) if c.kind == kind]
            if rows:
                boot = shares[rows][resample_pairs(len(rows), n_boot, seed + i)].mean(1)  # [boot, period]
                low, high = percentile_interval(boot, level)
                out[kind] = (shares[rows].mean(0).float(), low.float(), high.float())
        return out

    def kind_difference(self, n_boot: int = 1000, level: float = 0.95, seed: int = 0
                        ) -> tuple[Tensor, Tensor, Tensor, list[float]] | None:
        """The MLPs' mean share minus the heads' at each period, with a percentile bootstrap interval and a two-sided
        bootstrap p-value over the components (heads and MLPs resampled apart): whether "MLPs carry more of period p
        than heads" holds across the components. ``(difference, low, high, p)`` each per period; None without both
        kinds."""
        from circuits.patching.core.uncertainty import bootstrap_p, percentile_interval, resample_pairs

        shares = self.shares().double()
        heads = [j for j, c in enumerate(self.components) if c.kind == "head"]
        mlps = [j for j, c in enumerate(self.components) if c.kind == "mlp"]
        if not heads or not mlps:
            return None
        h = shares[heads][resample_pairs(len(heads), n_boot, seed)].mean(1)
        m = shares[mlps][resample_pairs(len(mlps), n_boot, seed + 1)].mean(1)
        low, high = percentile_interval(m - h, level)
        diff = shares[mlps].mean(0) - shares[heads].mean(0)
        return diff.float(), low.float(), high.float(), [bootstrap_p(d) for d in (m - h).T]

    def aligned(self) -> Float[Tensor, "component offset"]:
        """Each component's direct effect, centred over the numbers, at ``(number - answer) mod n`` (offset 0: the
        pair's answer), mean over the pairs whose answer is on the number line: whether it raises the answer, and
        the numbers a period away from it (offsets 5 for period 5, 2, 4, 6, 8 for period 2)."""
        rows = [i for i, a in enumerate(self.answers) if a >= 0]
        x = self.effects - self.effects.mean(-1, keepdim=True)
        if not rows:
            return torch.full((x.shape[0], x.shape[2]), float("nan"))
        return torch.stack([x[:, i].roll(-self.answers[i], -1) for i in rows], 1).mean(1)

    def mean_share(self) -> Float[Tensor, " component"]:
        """The mean's share of each component's whole energy: how much of its effect lifts every number alike."""
        return self.energy[:, 0] / self.energy.sum(-1).clamp_min(1e-30)


def number_spectra(model: Model, pairs: Sequence[PromptPair], components: Sequence[Component],
                   numbers: int | None = None, batch_size: int = 32) -> NumberSpectra:
    """The Fourier view of ``components`` on ``pairs``: the number line found from the first pair's prompt (the first
    ``numbers`` of it when given), each component's direct effects on it, and their spectra."""
    pairs = list(pairs)
    if not pairs:
        raise ValueError("number_spectra needs at least one prompt pair")
    tokens = number_tokens(model.tokenizer, pairs[0].reference)
    if numbers is not None:
        if not 2 <= numbers <= len(tokens):
            raise ValueError(f"numbers must lie in 2..{len(tokens)} (the single-token numbers here), got {numbers}")
        tokens = tokens[:numbers]
    effects = direct_number_effects(model, pairs, components, tokens, batch_size)
    answers = [tokens.index(p.answer_token_id) if p.answer_token_id in tokens else -1 for p in pairs]
    return NumberSpectra(list(components), list(range(len(tokens))), tokens, effects,
                         fourier_spectrum(effects).mean(1), answers)


fourier = number_spectra  # cc.fourier

__all__ = ["NumberSpectra", "chance_shares", "fourier", "direct_number_effects", "energy_shares", "fourier_spectrum",
           "number_spectra", "number_tokens", "number_unembedding", "periods", "trend_shares"]
