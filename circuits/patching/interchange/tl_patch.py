"""Activation patching in TransformerLens's words: ``patch(model, clean, corrupted, metric, direction=...)``.

TransformerLens (and ARENA) call the run whose behaviour is studied *clean* and the run with the key detail changed
*corrupted*. This toolkit's :class:`~circuits.data.pairs.PromptPair` names them *reference* (clean) and
*counterfactual* (corrupted). Two directions (docs/for-transformerlens-users.md):

- **noising** (what :func:`~circuits.patching.engines.end_sweep.sweep` and the paper do): run the clean prompt and patch one
  component's END value from the corrupted run; a large change means the component is *necessary*.
- **denoising** (what ``transformer_lens.patching.get_act_patch_*`` do): run the corrupted prompt and patch one
  component's END value from the clean run; a large recovery means it is *sufficient*.

:func:`patch` is a thin, job-free call over the END engine: denoising is the same engine with the two prompts'
roles swapped. It patches at the last position only (END: the position whose next token is the answer), so it
equals ``transformer_lens.patching.get_act_patch_attn_head_out_by_pos`` and ``get_act_patch_mlp_out`` read at the
last position (``[:, -1]``), tested in ``tests/unit/test_tl_analyses.py``.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import torch
from jaxtyping import Float, Int
from torch import Tensor
from circuits.models.backend import Model

from circuits.data.pairs import PairBatch, Pairs, as_batch
from circuits.patching.engines.end_sweep import SweepResult, sweep
from circuits.patching.core.metrics import Metric, logits_metric
from circuits.types import Mode

Direction = Literal["noising", "denoising"]
DIRECTIONS: tuple[Direction, ...] = ("noising", "denoising")
Prompts = Int[Tensor, "batch pos"] | Sequence[str]
EndMetric = Callable[[Float[Tensor, "batch d_vocab"]], Float[Tensor, " batch"] | Float[Tensor, ""]]


@dataclass
class PatchResult:
    """The metric after patching each component, as ``transformer_lens.patching`` returns it.

    ``heads[layer, head]`` and ``mlps[layer]``: the metric on the patched run (the batch mean of a per-prompt metric,
    or the scalar a batch metric returns); ``clean`` and ``corrupted``: the metric on the unpatched runs. ``sweep``
    holds the per-prompt values (``sweep.custom["patch"]``: ``[layer, head, batch]`` and ``[layer, batch]``) and the
    answer logit readouts (:class:`~circuits.patching.engines.end_sweep.SweepResult`)."""

    direction: Direction
    mode: Mode
    heads: Float[Tensor, "layer head"]
    mlps: Float[Tensor, " layer"]
    clean: float
    corrupted: float
    sweep: SweepResult

    def normalized(self) -> tuple[Float[Tensor, "layer head"], Float[Tensor, " layer"]]:
        """``(patched - corrupted) / (clean - corrupted)``: 1 where a patch gives the clean value, 0 where it gives the
        corrupted one (ARENA's normalised metric; for noising, 1 is "no effect")."""
        span = self.clean - self.corrupted
        if abs(span) < 1e-12:
            raise ValueError(f"The metric is the same on the clean and corrupted runs ({self.clean:.4g}), so there is "
                             "nothing to normalise by; choose prompts or a metric that tell them apart")
        return (self.heads - self.corrupted) / span, (self.mlps - self.corrupted) / span

    def __repr__(self) -> str:
        L, H = self.heads.shape
        return (f"PatchResult({self.direction}, {self.mode}, {L} layers x {H} heads, batch {self.sweep.head_logit.shape[-1]}, "
                f"clean {self.clean:.4g}, corrupted {self.corrupted:.4g})")


def _tokens(model: Model, prompts: Prompts, what: str) -> Tensor:
    if isinstance(prompts, Tensor):
        if prompts.ndim != 2 or prompts.dtype not in (torch.long, torch.int, torch.int32, torch.int64):
            raise ValueError(f"{what}: token ids of shape [batch, pos] are accepted, got a {prompts.dtype} tensor of "
                             f"shape {tuple(prompts.shape)}")
        return prompts.long()
    if isinstance(prompts, str) or not all(isinstance(p, str) for p in prompts):
        raise ValueError(f"{what}: a [batch, pos] tensor of token ids or a list of prompt strings is accepted")
    return model.to_tokens(list(prompts))


def _batch(model: Model, clean: Prompts | Pairs, corrupted: Prompts | None,
           answers: Sequence[int] | Tensor | None) -> tuple[PairBatch, Tensor]:
    """The clean/corrupted runs as a right-padded batch (END = the last token, or each pair's END), answers
    included (default: the clean run's top token at END)."""
    if corrupted is None:  # prompt pairs: reference is clean, counterfactual corrupted
        if isinstance(clean, (Tensor, str)) or any(isinstance(p, str) for p in clean):  # type: ignore[union-attr]
            raise ValueError("corrupted prompts are needed with clean tokens or strings; accepted: patch(model, clean, "
                             "corrupted, ...) or patch(model, pairs, ...) with prompt pairs")
        batch = as_batch(clean, model)  # type: ignore[arg-type]
        return batch, batch.answer
    c, x = _tokens(model, clean, "clean"), _tokens(model, corrupted, "corrupted")  # type: ignore[arg-type]
    if c.shape != x.shape:
        raise ValueError(f"clean and corrupted prompts must have the same token shape [batch, pos] (END is the last "
                         f"position), got {tuple(c.shape)} and {tuple(x.shape)}")
    c, x = c.to(model.cfg.device), x.to(model.cfg.device)
    end = torch.full((len(c),), c.shape[1] - 1, dtype=torch.long, device=c.device)
    if answers is None:
        with torch.no_grad():
            answer = model(c)[:, -1].argmax(-1)
    else:
        answer = torch.as_tensor(answers, dtype=torch.long).reshape(-1).to(c.device)
        if len(answer) != len(c):
            raise ValueError(f"answers: one token id per prompt is accepted, got {len(answer)} for {len(c)} prompts")
    return PairBatch(c, x, end, answer), answer


def _per_prompt(fn: EndMetric, n: int) -> Callable[[Tensor], Tensor]:
    """``fn`` as the engine's per-prompt metric: a scalar (a metric of the whole batch) is repeated for each prompt,
    so the batch mean the result reports is that scalar."""

    def per_prompt(logits: Tensor) -> Tensor:
        value = torch.as_tensor(fn(logits)).float()
        if value.numel() == 1:
            return value.reshape(1).expand(n)
        if value.numel() != n:
            raise ValueError(f"The metric returned {value.numel()} values for {n} prompts; accepted: one value per "
                             "prompt or one scalar for the batch")
        return value.reshape(n)

    return per_prompt


@torch.no_grad()
def _end_logits(model: Model, tokens: Tensor, end: Tensor) -> Tensor:
    logits = model(tokens)
    return logits[torch.arange(len(tokens), device=logits.device), end.to(logits.device)].float()


def patch(
    model: Model,
    clean: Prompts | Pairs,
    corrupted: Prompts | None = None,
    metric: EndMetric | None = None,
    direction: Direction = "noising",
    *,
    answers: Sequence[int] | Int[Tensor, " batch"] | None = None,
    components: Sequence[Any] | None = None,
    mode: Mode = "activation",
    memory_mb: float = 1024,
    progress: bool = True,
) -> PatchResult:
    """Patch every attention head's output (``hook_z``) and every MLP's output at END, TransformerLens-style.

    Args:
        model: a ``HookedTransformer``.
        clean: clean prompts: token ids ``[batch, pos]`` or strings; or prompt pairs (then ``corrupted`` is None and
            each pair's reference is clean, its counterfactual corrupted).
        corrupted: corrupted prompts of the same token shape as ``clean`` (END is the last position of both).
        metric: a function of the END logits ``[batch, d_vocab]`` returning one value per prompt or one scalar (a
            ``transformer_lens.patching`` metric of ``logits`` is this function of ``logits[:, -1]``). Default: the
            answer's logit minus the corrupted run's answer's, per prompt.
        direction: ``"noising"`` (run clean, patch in corrupted values: what the sweep does) or ``"denoising"`` (run
            corrupted, patch in clean values: what ``transformer_lens.patching`` does).
        answers: answer token ids, one per prompt, for the default metric and the sweep's readouts (default: the
            clean run's top token at END; pairs bring their own).
        components: what to patch (default: every head and MLP), anything ``sweep(components=...)`` takes.
        mode: ``"activation"`` (everything downstream recomputes: TransformerLens's activation patching) or
            ``"path"`` (other heads frozen: the paper's path patching).
    """
    if direction not in DIRECTIONS:
        raise ValueError(f"Unknown direction {direction!r}; accepted: noising (run clean, patch in corrupted values) or "
                         "denoising (run corrupted, patch in clean values)")
    batch, answer = _batch(model, clean, corrupted, answers)
    clean_logits = _end_logits(model, batch.reference, batch.end)
    corrupted_logits = _end_logits(model, batch.counterfactual, batch.end)
    if metric is None:
        cf_top = corrupted_logits.argmax(-1)
        rows = torch.arange(len(answer), device=clean_logits.device)

        def metric(logits: Tensor) -> Tensor:  # logit difference: answer minus the corrupted run's answer
            return logits[rows.to(logits.device), answer.to(logits.device)] - logits[rows.to(logits.device), cf_top.to(logits.device)]

    per_prompt = _per_prompt(metric, len(answer))
    runs = batch if direction == "noising" else PairBatch(batch.counterfactual, batch.reference, batch.end, batch.answer)
    m: Metric = logits_metric(per_prompt, name="patch", sign=-1 if direction == "noising" else 1,
                              doc=f"the given metric of the END logits, {direction}")
    with warnings.catch_warnings():
        if direction == "denoising":  # the corrupted run is not meant to give the answer
            warnings.filterwarnings("ignore", message=".*does not rank the answer among its top")
        result = sweep(model, runs, mode, components=components, metrics=[m], memory_mb=memory_mb, progress=progress,
                       prob=False)
    heads, mlps = result.custom["patch"]
    return PatchResult(direction, mode, heads.mean(-1), mlps.mean(-1), float(per_prompt(clean_logits).mean()),
                       float(per_prompt(corrupted_logits).mean()), result)


__all__ = ["DIRECTIONS", "Direction", "PatchResult", "patch"]
