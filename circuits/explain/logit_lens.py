"""What the MLPs read and write, seen through the unembedding (Section 4.2, 5.2; Figure 6).

At the END position of each prompt, for every layer ``l``:

- ``MLP_in[l]`` is the residual stream entering the MLP (``hook_resid_mid``) and ``MLP_out[l]`` the
  stream after the MLP has added its output (``hook_resid_post``), as the paper defines them
  ("the MLP receives its input from the residual stream (MLP_in), subsequently adding its output
  back into that stream (MLP_out)"); so ``MLP_out - MLP_in`` is the MLP's own output.
- Figure 6a: ``cos(MLP_in, W_U[A])`` and ``cos(MLP_in, W_U[B])``.
- Figure 6b: ``cos(MLP_out - MLP_in, W_U[C])`` against the mean of the same cosine over the other
  number tokens.
- Figure 6c: the number tokens closest (cosine) to ``MLP_out - MLP_in`` per layer, for one prompt.

``W_U[t]`` is column ``t`` of ``model.W_U``: with the final norm folded (how :mod:`circuits.models`
loads), that is the unembedding the model applies after normalising, i.e. the raw unembedding row
scaled by the final norm's weight. ``A``, ``B`` are the operand tokens at the template's role
positions; ``C`` is the answer's first token.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from jaxtyping import Float
from torch import Tensor
from circuits.models.backend import Model
from circuits.models.backend import act_name as get_act_name

from circuits.data.pairs import PromptPair
from circuits.explain.dla import end_activations
from circuits.io import read_json, write_json
from circuits.patching.core.uncertainty import mean_interval
from circuits.explain.config import LensConfig
from circuits.results import Result, number
from circuits.viz.notebook import ShowsFigure


def number_tokens(tokenizer: Any, max_number: int = 999) -> dict[int, str]:
    """Token id -> text for every integer 0..``max_number`` (with or without a leading space) that is one token."""
    out: dict[int, str] = {}
    for n in range(max_number + 1):
        for text in (str(n), " " + str(n)):
            ids = tokenizer(text, add_special_tokens=False).input_ids
            if len(ids) == 1:
                out.setdefault(ids[0], text)
    return out


def operand_tokens(pair: PromptPair) -> tuple[int, int]:
    """Token ids of operands A and B in the reference prompt (the last token of each role span)."""
    if not pair.roles.get("A") or not pair.roles.get("B"):
        raise ValueError(f"Pair {pair.reference[-60:]!r} has no A/B role positions; build it from a template, or give "
                         "\"roles\" in its pairs-file line (docs/identify.md#token-roles).")
    ids = pair.reference_token_ids
    return ids[pair.roles["A"][-1]], ids[pair.roles["B"][-1]]


@dataclass
class MLPLens:
    """Cosines per pair and layer (Figure 6a, 6b). All ``[pair, layer]``."""

    in_A: Float[Tensor, "pair layer"]
    in_B: Float[Tensor, "pair layer"]
    in_C: Float[Tensor, "pair layer"]
    delta_A: Float[Tensor, "pair layer"]
    delta_B: Float[Tensor, "pair layer"]
    delta_C: Float[Tensor, "pair layer"]
    delta_other: Float[Tensor, "pair layer"]  # mean over number tokens other than C

    def means(self) -> dict[str, list[float]]:
        return {k: v.mean(0).tolist() for k, v in self.__dict__.items()}

    def intervals(self, n_boot: int = 1000, level: float = 0.95, seed: int = 0) -> dict[str, list[list[float]]]:
        """Each series' percentile bootstrap interval over pairs, per layer: ``{series: [[low, high] per layer]}``
        (:func:`~circuits.patching.core.uncertainty.mean_interval`, the same resamples for every series)."""
        out = {}
        for k, v in self.__dict__.items():
            low, high = mean_interval(v, n_boot, level, seed)
            out[k] = torch.stack([low, high], -1).tolist()
        return out


@torch.no_grad()
def end_streams(
    model: Model, pairs: Sequence[PromptPair], batch_size: int = 32
) -> tuple[Float[Tensor, "pair layer d_model"], Float[Tensor, "pair layer d_model"]]:
    """``MLP_in`` (resid_mid) and ``MLP_out`` (resid_post) at END for every layer."""
    L = model.cfg.n_layers
    mid, post = [get_act_name("resid_mid", l) for l in range(L)], [get_act_name("resid_post", l) for l in range(L)]
    acts = end_activations(model, [p.reference_token_ids for p in pairs], mid + post, batch_size)
    return torch.stack([acts[n] for n in mid], 1), torch.stack([acts[n] for n in post], 1)


def _cos(x: Tensor, w: Tensor) -> Tensor:
    """Cosine of every ``x[pair, layer]`` with ``w[pair]``."""
    return F.cosine_similarity(x, w[:, None, :], dim=-1)


def mlp_lens(model: Model, pairs: Sequence[PromptPair], batch_size: int = 32) -> MLPLens:
    """Figure 6a/6b cosines for every pair and layer."""
    mlp_in, mlp_out = end_streams(model, pairs, batch_size)
    delta = mlp_out - mlp_in
    W_U = model.W_U.detach().float().cpu()  # [d_model, d_vocab]
    a_ids, b_ids = zip(*(operand_tokens(p) for p in pairs))
    c_ids = [p.answer_token_id for p in pairs]
    col = lambda ids: W_U[:, list(ids)].T  # noqa: E731  [pair, d_model]
    nums = torch.tensor(sorted(number_tokens(model.tokenizer, 99)))
    Wn = F.normalize(W_U[:, nums], dim=0)  # [d_model, n_num]
    cos_all = F.normalize(delta, dim=-1) @ Wn  # [pair, layer, n_num]
    other = torch.zeros(len(pairs), model.cfg.n_layers)
    for i, c in enumerate(c_ids):
        keep = nums != c
        other[i] = cos_all[i][:, keep].mean(-1)
    return MLPLens(
        in_A=_cos(mlp_in, col(a_ids)),
        in_B=_cos(mlp_in, col(b_ids)),
        in_C=_cos(mlp_in, col(c_ids)),
        delta_A=_cos(delta, col(a_ids)),
        delta_B=_cos(delta, col(b_ids)),
        delta_C=_cos(delta, col(c_ids)),
        delta_other=other,
    )


def top_number_tokens(
    model: Model, pair: PromptPair, k: int = 5, max_number: int = 99
) -> list[list[tuple[str, float]]]:
    """Figure 6c: per layer, the ``k`` number tokens with the highest cosine to ``MLP_out - MLP_in`` at END."""
    mlp_in, mlp_out = end_streams(model, [pair])
    delta = (mlp_out - mlp_in)[0]  # [layer, d_model]
    nums = number_tokens(model.tokenizer, max_number)
    ids = torch.tensor(sorted(nums))
    W = F.normalize(model.W_U.detach().float().cpu()[:, ids], dim=0)
    cos = F.normalize(delta, dim=-1) @ W  # [layer, n_num]
    top = cos.topk(min(k, len(ids)), dim=-1)
    return [[(nums[int(ids[j])], float(v)) for v, j in zip(top.values[l], top.indices[l])] for l in range(delta.shape[0])]


def writing_start(delta_C: Sequence[float], delta_other: Sequence[float], margin: float = 0.02) -> int | None:
    """First layer from which ``cos(MLP_out - MLP_in, W_U[C])`` stays above the other numbers by ``margin``
    in at least half of the remaining layers -- where the MLPs start writing the answer."""
    n = len(delta_C)
    for l in range(n):
        above = [delta_C[j] - delta_other[j] > margin for j in range(l, n)]
        if above[0] and sum(above) >= len(above) / 2:
            return l
    return None


CI_LEVEL = 0.95  # the coverage of the intervals over pairs a lens result saves


def logit_lens(model: Model, pairs: Sequence[PromptPair], example: PromptPair | None = None, *,
               k: int = 5, config: LensConfig | None = None) -> LogitLens:
    """Figure 6 on ``pairs``: the per-layer cosine means, and for ``example`` (default: the first pair) the top
    ``k`` number tokens each MLP adds."""
    example = example or pairs[0]
    lens = mlp_lens(model, pairs)
    return LogitLens(config if config is not None else LensConfig(), lens.means(), len(pairs),
                     example.reference[-40:], top_number_tokens(model, example, k=k),
                     intervals=lens.intervals(level=CI_LEVEL), ci_level=CI_LEVEL)


@dataclass(eq=False, repr=False)
class LogitLens(ShowsFigure, Result[LensConfig]):
    """Figure 6: per-layer means of the MLP logit-lens cosines (6a, 6b), the top number tokens each MLP adds for
    one example (6c), and where the MLPs start writing the answer."""

    kind = "lens"

    means: dict[str, list[float]]  # MLPLens.means()
    n_pairs: int
    example: str = ""
    top_tokens: list[list[tuple[str, float]]] = field(default_factory=list)
    # per series, [[low, high] per layer]: the bootstrap interval over pairs of each mean (empty: saved before them)
    intervals: dict[str, list[list[float]]] = field(default_factory=dict)
    ci_level: float = CI_LEVEL

    @property
    def writing_start(self) -> int | None:
        return writing_start(self.means["delta_C"], self.means["delta_other"])

    def peak(self, key: str) -> int:
        v = self.means[key]
        return int(max(range(len(v)), key=v.__getitem__))

    def figure(self):
        from circuits.viz.figures import lens_panels

        return lens_panels(self.means, f"MLP logit lens (Figure 6), {self.n_pairs} pairs", self.intervals,
                           self.n_pairs, self.ci_level)

    def _write(self, folder: Path) -> None:
        write_json(folder / "data.json", {
            "means": self.means, "n_pairs": self.n_pairs, "example": self.example, "top_tokens": self.top_tokens,
            "writing_start": self.writing_start, "peak_in_A": self.peak("in_A"), "peak_in_B": self.peak("in_B"),
            **({"intervals": self.intervals, "ci_level": self.ci_level} if self.intervals else {})})

    @classmethod
    def _read(cls, folder: Path, config: LensConfig) -> LogitLens:
        path = folder / "data.json"
        d = read_json(path)
        top = [[(t, number({"top_tokens": c}, "top_tokens", path)) for t, c in row] for row in d.get("top_tokens", [])]
        return cls(config, d["means"], number(d, "n_pairs", path, 0, int), d.get("example", ""), top,
                   d.get("intervals", {}), number(d, "ci_level", path, 0, float) if "ci_level" in d else CI_LEVEL)
