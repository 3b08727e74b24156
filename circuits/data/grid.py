"""The operand grid: one prompt for every operand pair ``a x b`` a template takes, with the paper's few-shot prefix.

Nikankin et al. (ICLR 2025, Section 4) read a neuron by its activation over *every* operand pair, not over a sample
of prompt pairs: :func:`operand_grid` renders the template for each ``(a, b)`` in ``[lo, hi]^2`` whose answer is an
integer (:func:`~circuits.data.templates.compute_answer`), after the template's three solved examples (drawn once per
template, so the prefix is shared token for token and runs once, as in :func:`~circuits.data.pairs.build_pairs`).

Each cell is a :class:`~circuits.data.pairs.PromptPair` whose counterfactual *is* its reference (the grid is only
read and knocked out, never patched): means over the grid are then the ablation executor's means of the
``"reference"`` prompts, per template and length. The answer token is the first token of the answer, which is the
whole answer for a tokenizer with one token per number and the leading digit for one that splits digits (SmolLM2,
Gemma 3: the END position of ``7 + 5 =`` predicts ``1``, the ``2`` comes one position later).

Imports no model code; a tokenizer is all it needs.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from jaxtyping import Bool, Int
from torch import Tensor

from circuits.data.pairs import (PromptError, PromptPair, _sample_fill, answer_tokens, encode, few_shot_prefixes,
                                 first_answer_token, prefix_length_of, render, token_positions)
from circuits.data.templates import Template, compute_answer, templates_for


@dataclass
class OperandGrid:
    """Prompts over the operand grid: ``prompts[i]`` asks ``a[i] op b[i]`` (its template ``template_ids[i]``).

    ``values`` are the operands' range ``lo..hi``; cells without an integer answer (subtraction below zero, division
    with a remainder) have no prompt, and :meth:`mask` says which cells exist."""

    operation: str
    values: tuple[int, ...]
    prompts: list[PromptPair]

    def __len__(self) -> int:
        return len(self.prompts)

    @property
    def a(self) -> Int[Tensor, " prompt"]:
        return torch.tensor([p.operands[0] for p in self.prompts])

    @property
    def b(self) -> Int[Tensor, " prompt"]:
        return torch.tensor([p.operands[1] for p in self.prompts])

    @property
    def result(self) -> Int[Tensor, " prompt"]:
        return torch.tensor([p.operands[2] for p in self.prompts])

    def cells(self) -> tuple[Int[Tensor, " prompt"], Int[Tensor, " prompt"]]:
        """Each prompt's cell ``(row of a, column of b)`` in the ``[a, b]`` grid."""
        lo = self.values[0]
        return self.a - lo, self.b - lo

    def mask(self) -> Bool[Tensor, "a b"]:
        n = len(self.values)
        m = torch.zeros(n, n, dtype=torch.bool)
        m[self.cells()] = True
        return m

    def to_grid(self, per_prompt: Tensor) -> Tensor:
        """``[prompt, ...]`` values as ``[a, b, ...]`` cells, averaged over the templates of a cell (NaN: no prompt)."""
        n = len(self.values)
        rows, cols = self.cells()
        flat = rows * n + cols
        x = per_prompt.float()
        total = torch.zeros(n * n, *x.shape[1:]).index_add_(0, flat, x)
        count = torch.zeros(n * n).index_add_(0, flat, torch.ones(len(flat)))
        out = total / count.reshape(-1, *[1] * (x.ndim - 1))
        out[count == 0] = float("nan")
        return out.reshape(n, n, *x.shape[1:])

    def answers_grid(self) -> Int[Tensor, "a b"]:
        """The answer token of each cell (of its first template; -1 where no prompt)."""
        n = len(self.values)
        out = torch.full((n, n), -1, dtype=torch.long)
        rows, cols = self.cells()
        for r, c, p in reversed(list(zip(rows.tolist(), cols.tolist(), self.prompts))):
            out[r, c] = p.answer_token_id
        return out


def grid_prompt(template: Template, a: int, b: int, tokenizer: Any, prefix: str, rng: random.Random) -> PromptPair:
    """One cell's prompt: the prefix, the template filled with ``a`` and ``b``, and the first token of its answer (a
    space before the answer, or, for tokenizers that glue spaces to words, inside it)."""
    c = compute_answer(template.operation, a, b)
    if c is None:
        raise PromptError(f"{a} and {b} have no integer {template.operation} result.")
    fill = _sample_fill(template, a, b, rng)
    body, spans = render(template, fill)
    options = [(template.answer_sep, str(c))]
    if template.answer_sep == " ":
        options.append(("", " " + str(c)))
    last: Exception | None = None
    for sep, answer in options:
        text = prefix + body + sep
        try:
            tok = first_answer_token(tokenizer, text, answer)
        except PromptError as err:
            last = err
            continue
        ids = tuple(encode(tokenizer, text))
        shifted = {r: [(s + len(prefix), e + len(prefix)) for s, e in v] for r, v in spans.items()}
        return PromptPair(text, text, answer, tok, ids, ids, template.id, template.operation, (a, b, c),
                          token_positions(tokenizer, text, shifted), prefix_length_of(tokenizer, prefix, ids))
    raise PromptError(f"Template {template.id!r} ({a}, {b}): {last}")


def operand_grid(tokenizer: Any, operation: str, lo: int = 0, hi: int = 9, *, templates: Sequence[str] = (),
                 few_shot: bool = True, seed: int = 0) -> OperandGrid:
    """Every ``(a, b)`` in ``[lo, hi]^2`` with an integer answer, for each of ``templates`` (template ids such as
    ``addition/0``; default: the operation's first, the equation ``{A} + {B} =``).

    Args:
        few_shot: the template's three solved examples before each question (drawn once per template from ``seed``).
    """
    if not 0 <= lo <= hi:
        raise ValueError(f"The operand range must satisfy 0 <= lo <= hi, got {lo}..{hi}")
    if hi - lo + 1 > 100:
        raise ValueError(f"The operand grid {lo}..{hi} has {(hi - lo + 1) ** 2} cells; take at most 100 values")
    known = {t.id: t for t in templates_for(operation)}
    if operation not in ("addition", "subtraction", "multiplication", "division"):
        raise ValueError(f"The operand grid needs one operation (addition, subtraction, multiplication, division), "
                         f"got {operation!r}")
    chosen = list(templates) or [next(iter(known))]
    unknown = [t for t in chosen if t not in known]
    if unknown:
        raise ValueError(f"Unknown template {unknown[0]!r} for {operation}; accepted: {', '.join(known)}")
    rng = random.Random(seed)
    prompts: list[PromptPair] = []
    for tid in chosen:
        t = known[tid]
        prefix = few_shot_prefixes(t, tokenizer, rng)[0] if few_shot else ""
        for a in range(lo, hi + 1):
            for b in range(lo, hi + 1):
                if compute_answer(t.operation, a, b) is None:
                    continue
                prompts.append(grid_prompt(t, a, b, tokenizer, prefix, rng))
    if not prompts:
        raise ValueError(f"No operand pair in {lo}..{hi} has an integer {operation} result")
    return OperandGrid(operation, tuple(range(lo, hi + 1)), prompts)


def grid_at_answer_position(grid: OperandGrid, k: int, tokenizer: Any) -> OperandGrid:
    """``grid`` read at its answers' token ``k`` (issue 42): each cell whose answer has more than ``k`` tokens, its
    prompt teacher-forced with the answer's first ``k`` (:func:`circuits.data.answers.force_answer`, END moved to END
    + k, the answer token its ``k``-th); cells with shorter answers have no prompt (:meth:`OperandGrid.mask`). On a
    tokenizer that writes digits one by one, ``k = 1`` keeps the cells with a two-digit result, read at its second
    digit. ``k = 0``: ``grid`` itself. No cell left is one ``ValueError`` line."""
    from dataclasses import replace

    from circuits.data.answers import force_answer

    if k == 0:
        return grid
    kept = []
    for p in grid.prompts:
        ids = answer_tokens(tokenizer, p.reference, p.answer)
        if len(ids) > k:
            kept.append(force_answer(replace(p, answer_token_ids=tuple(ids)), k, tokenizer))
    if not kept:
        raise ValueError(f"--answer-position {k}: no cell of the operand grid {grid.values[0]}..{grid.values[-1]} has "
                         f"an answer of more than {k} token{'s' if k != 1 else ''}; take larger --operands or an "
                         "earlier position")
    return OperandGrid(grid.operation, grid.values, kept)
