"""Which neurons compute which digit of a two-digit sum (Baeumel et al. 2025, "Modular Arithmetic: Language Models
Solve Math Digit by Digit").

Baeumel et al. find, also in models that tokenize numbers digit by digit, separate groups of MLP neurons for the
units, tens and hundreds digits of the answer. The measurement here:

- :func:`digit_problems`: ``A + B = `` with two-digit operands and a two-digit sum after the few-shot prefix, the
  answer's two tokens (tens, then units) teacher-forced, so the tens digit is read at the prompt's last token and the
  units digit one token later. For each problem two counterfactuals change **one digit of one operand**: its units
  digit (the sum's tens digit kept: no carry changes) or its tens digit (the sum's units digit cannot change), with
  the reference answer's tokens appended too, so every position lines up.
- :func:`answer_accuracy`: greedy decoding of the answer's tokens, to say whether the model handles the problems.
- :func:`digit_effects`: each neuron's ``hook_post`` at every position replaced by its value on a counterfactual
  (activation patching, one neuron at a time); the change of the logit of the answer's units token at its position
  and of its tens token at its own, ``[neuron, changed digit, answer digit, problem]``. Rows of several neurons share
  one batched forward pass; tests compare it with one ``run_with_hooks`` per neuron.
- :func:`digit_labels`: a neuron moves the units digit when patching the operands' units digit moves the answer's
  units logit at least twice as much as patching their tens digit moves the answer's tens logit, and the reverse for
  tens; otherwise both, or none when its largest effect is under a share of the strongest neuron's.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import torch
from jaxtyping import Float, Int
from torch import Tensor
from tqdm.auto import tqdm

from circuits.data.pairs import PromptError, encode
from circuits.models.backend import Model, act_name
from circuits.patching.core.end_layers import end_logits, token_logits
from circuits.types import Neuron

Digit = Literal["units", "tens"]
DIGITS: tuple[Digit, ...] = ("units", "tens")
LABELS = ("units", "tens", "both", "none")


def sample_problems(n: int, seed: int = 0) -> list[tuple[int, int]]:
    """``n`` distinct ``(A, B)`` with two-digit operands and a two-digit sum (10 <= A, B and A + B <= 99)."""
    grid = [(a, b) for a in range(10, 90) for b in range(10, 100 - a)]
    if not 1 <= n <= len(grid):
        raise ValueError(f"n_problems must lie in 1..{len(grid)} (two-digit operands with a two-digit sum), got {n}")
    return random.Random(seed).sample(grid, n)


def change_digit(a: int, b: int, digit: Digit, rng: random.Random) -> tuple[int, int]:
    """``(A', B')``: one digit (``units`` or ``tens``) of one operand changed, the other digit of the sum kept (a units
    change keeps the sum's tens digit: no carry changes; a tens change cannot move its units) and the sum two digits."""
    s = a + b
    options = []
    for which in (0, 1):
        x, y = (a, b) if which == 0 else (b, a)
        for d in range(10):
            x2 = 10 * (x // 10) + d if digit == "units" else 10 * d + x % 10
            if x2 == x or x2 < 10 or not 10 <= x2 + y <= 99:
                continue
            if digit == "units" and (x2 + y) // 10 != s // 10:
                continue
            options.append((x2, y) if which == 0 else (y, x2))
    if not options:
        raise ValueError(f"{a} + {b}: no {digit} digit can change with the sum's other digit kept")
    return rng.choice(options)


@dataclass
class DigitProblems:
    """Two-digit problems as token rows of one length: ``reference[problem, pos]`` (prompt and the answer's tens
    token), ``counterfactual[digit]`` (the same with one operand digit changed), ``answer[problem, 2]`` (tens token,
    units token), read at ``tens_pos`` and ``tens_pos + 1``."""

    problems: list[tuple[int, int]]
    changed: dict[str, list[tuple[int, int]]]
    prefix: str
    reference: Int[Tensor, "problem pos"]
    counterfactual: dict[str, Int[Tensor, "problem pos"]]
    answer: Int[Tensor, "problem 2"]
    tens_pos: int

    def prompt(self, a: int, b: int) -> str:
        return f"{self.prefix}{a} + {b} = "


def digit_problems(tokenizer, problems: Sequence[tuple[int, int]], prefix: str, seed: int = 0) -> DigitProblems:
    """:class:`DigitProblems` of ``problems`` after ``prefix``; a tokenizer that does not write the sum as two digit
    tokens, or gives rows of unequal length, is refused in one line."""
    rng = random.Random(seed)
    changed = {d: [change_digit(a, b, d, rng) for a, b in problems] for d in DIGITS}

    def row(a: int, b: int, answer: int) -> tuple[list[int], list[int]]:
        prompt = f"{prefix}{a} + {b} = "
        ids, full = encode(tokenizer, prompt), encode(tokenizer, prompt + str(answer))
        if len(full) != len(ids) + 2 or full[: len(ids)] != ids:
            raise PromptError(f"{prompt!r} + {answer}: this tokenizer does not write a two-digit sum as two tokens after "
                              "the prompt; the digit-position analysis needs digit-by-digit numbers (SmolLM2, Gemma 3)")
        return ids + [full[len(ids)]], full[len(ids):]

    refs, answers = zip(*(row(a, b, a + b) for a, b in problems))
    # the counterfactual prompt followed by the reference answer's tens token, so every position lines up
    cfs = {d: [row(a2, b2, a + b)[0] for (a, b), (a2, b2) in zip(problems, changed[d])] for d in DIGITS}
    lengths = {len(r) for r in [*refs, *cfs["units"], *cfs["tens"]]}
    if len(lengths) != 1:
        raise PromptError(f"The digit problems tokenize to rows of {sorted(lengths)} tokens; they need one length")
    return DigitProblems(list(problems), {d: list(v) for d, v in changed.items()}, prefix, torch.tensor(refs),
                         {d: torch.tensor(v) for d, v in cfs.items()}, torch.tensor(answers), len(refs[0]) - 2)


@torch.no_grad()
def greedy_answers(model: Model, problems: DigitProblems, batch_size: int = 32) -> Int[Tensor, "problem 2"]:
    """The two tokens greedy decoding writes after each prompt (the model's own output, no teacher forcing)."""
    device = model.cfg.device
    out = []
    for s in range(0, len(problems.problems), batch_size):
        x = problems.reference[s : s + batch_size, :-1].to(device)
        got = []
        for _ in range(2):
            nxt = end_logits(model, model.backend.final_residual(x)[:, -1]).argmax(-1)  # the last position only
            got.append(nxt)
            x = torch.cat([x, nxt[:, None]], 1)
        out.append(torch.stack(got, 1).cpu())
    return torch.cat(out)


def answer_accuracy(model: Model, problems: DigitProblems, batch_size: int = 32) -> Float[Tensor, " problem"]:
    """1 where greedy decoding after the prompt writes the answer's two tokens, else 0."""
    return (greedy_answers(model, problems, batch_size) == problems.answer).all(1).float()


def _answer_logits(model: Model, final: Tensor, problems: DigitProblems, rows: int) -> Tensor:
    """``[row, 2]``: the tens token's logit at ``tens_pos`` and the units token's one token later, for ``rows``
    rows cycling through the problems."""
    P = len(problems.problems)
    answer = problems.answer.to(final.device).repeat(rows // P, 1)
    tens = token_logits(model, final[None, :, problems.tens_pos], answer[:, 0])[0]
    units = token_logits(model, final[None, :, problems.tens_pos + 1], answer[:, 1])[0]
    return torch.stack([units, tens], -1)  # the order of DIGITS


def _posts(model: Model, tokens: Tensor, layers: Sequence[int]) -> dict[int, Tensor]:
    got: dict[int, Tensor] = {}

    def grab(l: int):
        def hook(act: Tensor, hook) -> None:
            got[l] = act.detach()
        return hook

    model.run_with_hooks(tokens, fwd_hooks=[(act_name("post", l), grab(l)) for l in layers], stop_at_layer=max(layers) + 1)
    return got


@torch.no_grad()
def digit_effects(model: Model, problems: DigitProblems, neurons: Sequence[Neuron], *, rows: int = 256,
                  progress: bool = False) -> Float[Tensor, "neuron digit answer problem"]:
    """For each neuron, each operand digit changed (``DIGITS``: units, tens) and each answer digit read (``DIGITS``),
    the patched minus the reference logit of that answer digit's token, per problem: the neuron's ``hook_post`` at
    every position taken from the counterfactual run. ``rows``: problems times neurons in one forward pass."""
    neurons = list(neurons)
    if not neurons:
        raise ValueError("digit_effects needs at least one neuron")
    for n in neurons:
        if not 0 <= n.layer < model.cfg.n_layers or not 0 <= n.index < model.cfg.d_mlp:
            raise ValueError(f"{n} is outside this model ({model.cfg.n_layers} layers of {model.cfg.d_mlp} neurons)")
    device = model.cfg.device
    P = len(problems.problems)
    ref = problems.reference.to(device)
    clean = _answer_logits(model, model.backend.final_residual(ref), problems, P)  # [problem, answer digit]
    layers = sorted({n.layer for n in neurons})
    out = torch.zeros(len(neurons), len(DIGITS), len(DIGITS), P)
    per = max(1, rows // P)
    chunks = [(d, s) for d in range(len(DIGITS)) for s in range(0, len(neurons), per)]
    posts: dict[int, dict[int, Tensor]] = {}
    for d, s in tqdm(chunks, desc="digit patching", disable=not progress):
        if d not in posts:  # one counterfactual run per changed digit, kept for its chunks
            posts = {d: _posts(model, problems.counterfactual[DIGITS[d]].to(device), layers)}
        cf = posts[d]
        part = neurons[s : s + per]
        k = len(part)
        row_of = torch.arange(k * P, device=device)
        hooks = []
        for l in layers:
            sel = [j for j, n in enumerate(part) if n.layer == l]
            if not sel:
                continue
            r = torch.cat([row_of[j * P : (j + 1) * P] for j in sel])
            idx = torch.tensor([part[j].index for j in sel for _ in range(P)], device=device)
            value = cf[l].repeat(k, 1, 1)[r, :, idx]

            def patch(act: Tensor, hook, r=r, idx=idx, value=value) -> Tensor:
                act[r, :, idx] = value.to(act.dtype)
                return act
            hooks.append((act_name("post", l), patch))
        with model.hooks(fwd_hooks=hooks):
            final = model.backend.final_residual(ref.repeat(k, 1))
        got = _answer_logits(model, final, problems, k * P) - clean.repeat(k, 1)  # [k * problem, answer digit]
        out[s : s + k, d] = got.reshape(k, P, len(DIGITS)).permute(0, 2, 1).float().cpu()
    return out


def digit_scores(effects: Float[Tensor, "neuron digit answer problem"]) -> tuple[Tensor, Tensor, Tensor]:
    """``(units, tens, score)`` per neuron: the mean absolute change of the answer's units logit when the operands'
    units digit changes, of its tens logit when their tens digit changes, and ``(units - tens) / (units + tens)`` in
    [-1, 1] (+1: units only, -1: tens only)."""
    mean = effects.mean(-1).abs()
    units, tens = mean[:, 0, 0], mean[:, 1, 1]
    return units, tens, (units - tens) / (units + tens).clamp_min(1e-12)


def digit_labels(effects: Float[Tensor, "neuron digit answer problem"], floor: float = 0.1) -> list[str]:
    """Each neuron's label (``LABELS``): units or tens where one effect is at least twice the other (score beyond
    +-1/3), both otherwise, none where its larger effect is under ``floor`` times the strongest neuron's."""
    units, tens, score = digit_scores(effects)
    top = float(torch.maximum(units, tens).max()) if len(units) else 0.0
    out = []
    for u, t, s in zip(units.tolist(), tens.tolist(), score.tolist()):
        if max(u, t) < floor * top or top == 0:
            out.append("none")
        else:
            out.append("units" if s >= 1 / 3 else "tens" if s <= -1 / 3 else "both")
    return out


@dataclass
class DigitMap:
    """:func:`digit_map`'s answer: the problems, whether greedy decoding got each right, and per neuron its effects
    (:func:`digit_effects`), ``units``/``tens``/``score`` (:func:`digit_scores`) and label (:func:`digit_labels`)."""

    problems: DigitProblems
    accuracy: Float[Tensor, " problem"]
    neurons: list[Neuron]
    effects: Float[Tensor, "neuron digit answer problem"]

    def labels(self) -> list[str]:
        return digit_labels(self.effects)

    def __repr__(self) -> str:
        labels = self.labels()
        counts = ", ".join(f"{lab} {labels.count(lab)}" for lab in LABELS)
        return (f"DigitMap({len(self.problems.problems)} two-digit sums, accuracy {float(self.accuracy.mean()):.0%}; "
                f"{len(self.neurons)} neurons: {counts})")


def default_prefix() -> str:
    """The addition few-shot examples as equations (``1 + 2 = 3\n...``), the prefix identify gives SmolLM2."""
    from circuits.data.templates import FEW_SHOT_OPERANDS

    return "".join(f"{a} + {b} = {a + b}\n" for a, b in FEW_SHOT_OPERANDS["addition"])


def digit_map(model: Model, neurons: Sequence[Neuron], n_problems: int = 64, *, prefix: str | None = None,
              seed: int = 0, progress: bool = True) -> DigitMap:
    """``cc.digits``: ``n_problems`` two-digit sums after ``prefix`` (default :func:`default_prefix`), the model's
    accuracy on them, and each neuron's digit effects and label. Read the labels only where the accuracy is high: a
    model that cannot add the problems has no digit circuit to find."""
    problems = digit_problems(model.tokenizer, sample_problems(n_problems, seed), default_prefix() if prefix is None
                              else prefix, seed)
    return DigitMap(problems, answer_accuracy(model, problems), list(neurons),
                    digit_effects(model, problems, neurons, progress=progress))


digits = digit_map  # cc.digits

__all__ = ["DIGITS", "LABELS", "answer_accuracy", "change_digit", "default_prefix", "digit_effects", "digit_labels",
           "digit_map", "digit_problems", "digit_scores", "DigitMap", "DigitProblems", "digits", "greedy_answers",
           "sample_problems"]
