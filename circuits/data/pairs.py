"""Reference / counterfactual prompt pairs (Section 3, Appendix A).

A :class:`PromptPair` is one reference prompt X_r, its counterfactual X_c (same grammar, same token
length, calculation words replaced), the answer's first token, the exact token ids fed to the model
and the token positions of each role (operands, operator) found from the template, not guessed from
strings. :func:`build_pairs` samples pairs from templates with a seed, keeps only pairs whose
operands and answer are single tokens, checks equal token lengths (resampling the counterfactual word
otherwise), runs the model, reports the accuracy and answer probability before filtering, and keeps
the pairs the model answers correctly. :func:`make_pair` builds a pair from your own texts.
"""

from __future__ import annotations

import hashlib
import html
import random
import re
import warnings
from pathlib import Path
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Literal, Union

import torch
from jaxtyping import Bool, Float, Int
from tqdm.auto import tqdm
from torch import Tensor
from circuits.models.backend import Model

from circuits.data.templates import (
    COUNTERFACTUAL_SYMBOLS,
    COUNTERFACTUAL_WORDS,
    FEW_SHOT_OPERANDS,
    NAMES,
    OBJECTS,
    Template,
    compute_answer,
    templates_for,
)
from circuits.data.pair_config import CounterfactualKind, FewShot, PairConfig, PrefixPolicy  # noqa: F401  (light)
from circuits.data.roles import ROLES, check_positions, equals_span, pairs_file_lines
from circuits.io import read_jsonl, write_jsonl
from circuits.models.forward import EndRecord, end_residual_batches, end_residuals, pad_token_id, unembed_end
from circuits.timing import stage

_SLOT = re.compile(r"(\{[A-Z0-9]+\})")
# Tied slots copy their source in the reference and take another value in the counterfactual.
_TIED = {"QOBJECT": ("OBJECT", OBJECTS), "QNAME": ("NAME", NAMES)}
# Models below this size get a few-shot prefix by default (SmolLM2-135M: 17% zero-shot, 97% with one).
FEW_SHOT_AUTO_MAX_PARAMS = 1_000_000_000


class PromptError(ValueError):
    """A template, prompt or answer that cannot make a valid pair."""


class FewerPairsWarning(UserWarning):
    """Fewer pairs than asked for (the message says how many and why); the work goes on with those."""


class RepeatedPairsWarning(UserWarning):
    """A pairs file repeats a pair (the same prompt, counterfactual and answer tokens): each repeat counts again in
    every mean and interval, as if it were another pair; the message names the lines. The work goes on."""


@dataclass(frozen=True)
class PromptPair:
    """One reference/counterfactual pair.

    ``roles`` maps ``A``, ``B``, ``operator`` to token positions in the reference (the
    counterfactual has the same positions); positions count from the first token fed to the model.
    """

    reference: str
    counterfactual: str
    answer: str
    answer_token_id: int
    reference_token_ids: tuple[int, ...]
    counterfactual_token_ids: tuple[int, ...]
    template_id: str = "custom"
    operation: str = "custom"
    operands: tuple[int, ...] = ()
    roles: dict[str, tuple[int, ...]] = field(default_factory=dict)
    prefix_length: int = 0  # tokens of the few-shot prefix (0 without one)
    # The counterfactual prompt's own answer ("" where it asks for none: the paper's operator counterfactual)
    counterfactual_answer: str = ""
    # Every token of an answer of several (its first is ``answer_token_id``); empty for a one-token answer, so a
    # one-token pair and its saved line are what they were before answers of several tokens (issue 42)
    answer_token_ids: tuple[int, ...] = ()
    # The counterfactual's own answer token (its label), the second token of the logit difference when the pairs are
    # built with ``second_logit="label"`` (MIB's arithmetic metric); -1: none, the counterfactual run's top token is
    # taken instead (:func:`second_answers`)
    counterfactual_answer_token_id: int = -1

    @property
    def answer_ids(self) -> tuple[int, ...]:
        """The answer's token ids, one or several (``answer_token_ids``, or ``(answer_token_id,)``)."""
        return self.answer_token_ids or (self.answer_token_id,)

    @property
    def end(self) -> int:
        """Index of the END (last) token."""
        return len(self.reference_token_ids) - 1

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["reference_token_ids"] = list(self.reference_token_ids)
        d["counterfactual_token_ids"] = list(self.counterfactual_token_ids)
        d["operands"] = list(self.operands)
        d["roles"] = {k: list(v) for k, v in self.roles.items()}
        if self.answer_token_ids:
            d["answer_token_ids"] = list(self.answer_token_ids)
        else:  # a one-token pair's line as before answers of several tokens
            del d["answer_token_ids"]
        if self.counterfactual_answer_token_id < 0:  # a pair without a label: its line as before issue 43
            del d["counterfactual_answer_token_id"]
        return d

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> PromptPair:
        d = dict(d)
        d["reference_token_ids"] = tuple(d["reference_token_ids"])
        d["counterfactual_token_ids"] = tuple(d["counterfactual_token_ids"])
        d["operands"] = tuple(d.get("operands", ()))
        d["roles"] = {k: tuple(v) for k, v in d.get("roles", {}).items()}
        d["answer_token_ids"] = tuple(d.get("answer_token_ids", ()))
        return cls(**d)


@dataclass(frozen=True)
class PairBatch:
    """Pairs as right-padded tensors. Positions after ``end[i]`` are padding; the model is causal,
    so they never change what happens at or before ``end[i]``."""

    reference: Int[Tensor, "batch pos"]
    counterfactual: Int[Tensor, "batch pos"]
    end: Int[Tensor, " batch"]
    answer: Int[Tensor, " batch"]
    # The counterfactual's own answer token per pair (PromptPair.counterfactual_answer_token_id), -1 where a pair has
    # none; None: no pair has one (the counterfactual run's top token is the second token everywhere)
    cf_label: Int[Tensor, " batch"] | None = None

    @classmethod
    def from_pairs(cls, pairs: list[PromptPair], pad_token_id: int = 0, device: str | torch.device = "cpu") -> PairBatch:
        """Right-padded tensors of ``pairs``; empty prompts, unequal lengths and identical pairs are refused."""
        if not pairs:
            raise PromptError("No prompt pairs given.")
        for i, p in enumerate(pairs):
            if not p.reference_token_ids:
                raise PromptError(f"Pair {i} has an empty reference prompt.")
            if len(p.reference_token_ids) != len(p.counterfactual_token_ids):
                raise PromptError(f"Pair {i}: reference and counterfactual have different token lengths "
                                  f"({len(p.reference_token_ids)} vs {len(p.counterfactual_token_ids)}).")
            if p.reference_token_ids == p.counterfactual_token_ids:
                raise PromptError(f"Pair {i}: the counterfactual equals the reference ({p.reference[-60:]!r}), so "
                                  "patching would change nothing. Accepted: a counterfactual that removes the calculation.")
        width = max(len(p.reference_token_ids) for p in pairs)
        ref = torch.full((len(pairs), width), pad_token_id, dtype=torch.long)
        cf = torch.full((len(pairs), width), pad_token_id, dtype=torch.long)
        for i, p in enumerate(pairs):
            ref[i, : len(p.reference_token_ids)] = torch.tensor(p.reference_token_ids)
            cf[i, : len(p.counterfactual_token_ids)] = torch.tensor(p.counterfactual_token_ids)
        end = torch.tensor([p.end for p in pairs], dtype=torch.long)
        answer = torch.tensor([p.answer_token_id for p in pairs], dtype=torch.long)
        labels = [p.counterfactual_answer_token_id for p in pairs]
        cf_label = torch.tensor(labels, dtype=torch.long).to(device) if max(labels) >= 0 else None
        return cls(ref.to(device), cf.to(device), end.to(device), answer.to(device), cf_label)

    def __len__(self) -> int:
        return self.reference.shape[0]

    def select(self, idx: Tensor | slice) -> PairBatch:
        return PairBatch(self.reference[idx], self.counterfactual[idx], self.end[idx], self.answer[idx],
                         None if self.cf_label is None else self.cf_label[idx])

    def to(self, device: str | torch.device) -> PairBatch:
        return PairBatch(self.reference.to(device), self.counterfactual.to(device), self.end.to(device), self.answer.to(device),
                         None if self.cf_label is None else self.cf_label.to(device))


def second_answers(cf_label: Int[Tensor, " pair"] | None, cf_logits: Float[Tensor, "pair d_vocab"]) -> Int[Tensor, " pair"]:
    """The second token of each pair's logit difference (``logit(answer) - logit(second)``): the counterfactual's own
    label where the pair has one (``cf_label`` >= 0: pairs built with ``second_logit="label"``, as MIB's arithmetic
    tasks take ``random_counterfactual``'s label), else the top token of the counterfactual run's END logits
    ``cf_logits`` (the toolkit's ``second_logit="top"``)."""
    top = cf_logits.argmax(-1)
    if cf_label is None:
        return top
    label = cf_label.to(top.device)
    return torch.where(label >= 0, label, top)


# --- tokenization -----------------------------------------------------------------------------


def encode(tokenizer: Any, text: str) -> list[int]:
    """Token ids exactly as the model's own tokenizer makes them (BOS included if it adds one)."""
    return list(tokenizer(text).input_ids)


def prefix_length_of(tokenizer: Any, prefix: str, token_ids: Sequence[int]) -> int:
    """Tokens of ``prefix`` at the start of ``token_ids``, or 0 when the prefix merged with what follows it
    (no clean token boundary, so nothing can be shared)."""
    if not prefix:
        return 0
    pre = encode(tokenizer, prefix)
    return len(pre) if list(token_ids[: len(pre)]) == pre else 0


def answer_token(tokenizer: Any, prompt: str, answer: str) -> int:
    """The single token that continues ``prompt`` with ``answer``, or a :class:`PromptError`.

    The answer counts as one token when tokenizing ``prompt + answer`` gives the prompt's tokens
    followed by exactly one more.
    """
    base = encode(tokenizer, prompt)
    full = encode(tokenizer, prompt + answer)
    if len(full) == len(base) + 1 and full[: len(base)] == base:
        return full[-1]
    pieces = tokenizer.convert_ids_to_tokens(full[len(base) - 1 :]) if len(full) > len(base) - 1 else []
    raise PromptError(
        f"The answer {answer!r} after the prompt {prompt[-40:]!r} is not a single token for this tokenizer "
        f"(it tokenizes as {pieces}). Accepted: an answer that adds exactly one token to the prompt; for "
        "digit-splitting tokenizers use one-digit answers, and end the prompt where the next token is the answer "
        "(for SmolLM2, after a space)."
    )


def answer_tokens(tokenizer: Any, prompt: str, answer: str) -> tuple[int, ...]:
    """Every token that continues ``prompt`` with ``answer`` (one or several), or a :class:`PromptError`: the tokens
    of ``prompt + answer`` must be the prompt's followed by at least one more, so the answer's tokens are the ones the
    model writes after the prompt (issue 42)."""
    base = encode(tokenizer, prompt)
    full = encode(tokenizer, prompt + answer)
    if len(full) > len(base) and full[: len(base)] == base:
        return tuple(full[len(base):])
    pieces = tokenizer.convert_ids_to_tokens(full[max(len(base) - 1, 0):])
    raise PromptError(
        f"The answer {answer!r} after the prompt {prompt[-40:]!r} does not continue the prompt's tokens (the prompt's "
        f"last token merges with it: {pieces}). Accepted: a prompt that ends where the answer's first token starts "
        "(for SmolLM2, after a space).")


def first_answer_token(tokenizer: Any, prompt: str, answer: str) -> int:
    """The first token the model must produce after ``prompt`` to write ``answer`` (which may take several)."""
    base = encode(tokenizer, prompt)
    full = encode(tokenizer, prompt + answer)
    if len(full) <= len(base) or full[: len(base)] != base:
        raise PromptError(f"The answer {answer!r} does not continue the prompt's tokens cleanly.")
    return full[len(base)]


def make_pair(
    tokenizer: Any,
    reference: str,
    counterfactual: str,
    answer: str,
    *,
    template_id: str = "custom",
    operation: str = "custom",
    operands: tuple[int, ...] = (),
    roles: dict[str, tuple[int, ...]] | None = None,
    prefix_length: int = 0,
    allow_identical: bool = False,
    max_answer_tokens: int | None = None,
) -> PromptPair:
    """A pair from your own texts, checked: neither prompt is empty, they differ (unless ``allow_identical``, for
    prompts that are only scored, never patched), the answer continues the reference's tokens, and both have equal
    token length. The answer may take several tokens ("12" for a tokenizer that splits digits): ``answer_token_id``
    is its first, ``answer_token_ids`` all of them (kept only when several); the patching engines read the first
    at END, and identify's ``--answer-position`` a later one (issue 42). ``max_answer_tokens=1`` refuses an answer
    of several tokens, as every pair was refused before (the templates' pairs keep to it)."""
    for name, value in (("reference", reference), ("counterfactual", counterfactual), ("answer", answer)):
        if not isinstance(value, str):
            example = f" (e.g. {str(value)!r} for {value!r})" if isinstance(value, (int, float)) else ""
            raise PromptError(f"The {name} must be text (str), got {type(value).__name__} {value!r}. Accepted: the "
                              f"{name} as a string{example}.")
    if not answer:
        raise PromptError("Empty answer. Accepted: the text that continues the reference as one token, e.g. '7'.")
    if not reference.strip() or not counterfactual.strip():
        raise PromptError("Empty prompt: the reference and the counterfactual must each have text before the answer.")
    if reference == counterfactual and not allow_identical:
        raise PromptError(f"The counterfactual equals the reference ({reference[-60:]!r}): patching would change nothing. "
                          "Accepted: a counterfactual that removes the calculation, e.g. the operator replaced.")
    if max_answer_tokens == 1:
        ids: tuple[int, ...] = (answer_token(tokenizer, reference, answer),)
    else:
        ids = answer_tokens(tokenizer, reference, answer)
        if max_answer_tokens is not None and len(ids) > max_answer_tokens:
            raise PromptError(f"The answer {answer!r} takes {len(ids)} tokens; accepted: at most {max_answer_tokens}.")
    ref_ids = encode(tokenizer, reference)
    cf_ids = encode(tokenizer, counterfactual)
    if len(ref_ids) != len(cf_ids):
        raise PromptError(
            f"Reference and counterfactual have different token lengths ({len(ref_ids)} vs {len(cf_ids)}): "
            f"{reference!r} / {counterfactual!r}. Accepted: counterfactuals that keep every token position."
        )
    return PromptPair(
        reference=reference,
        counterfactual=counterfactual,
        answer=answer,
        answer_token_id=ids[0],
        reference_token_ids=tuple(ref_ids),
        counterfactual_token_ids=tuple(cf_ids),
        template_id=template_id,
        operation=operation,
        operands=operands,
        roles=roles or {},
        prefix_length=prefix_length,
        answer_token_ids=ids if len(ids) > 1 else (),
    )


def token_positions(tokenizer: Any, text: str, spans: dict[str, list[tuple[int, int]]]) -> dict[str, tuple[int, ...]]:
    """Token positions overlapping each role's character spans (offsets from the tokenizer)."""
    enc = tokenizer(text, return_offsets_mapping=True)
    offsets = enc["offset_mapping"]
    out: dict[str, tuple[int, ...]] = {}
    for role, role_spans in spans.items():
        pos = []
        for i, (s, e) in enumerate(offsets):
            if e <= s:  # special tokens have empty spans
                continue
            if any(s < re_ and rs < e for rs, re_ in role_spans):
                pos.append(i)
        out[role] = tuple(pos)
    return out


# --- rendering templates ----------------------------------------------------------------------


def render(template: Template, fill: dict[str, str]) -> tuple[str, dict[str, list[tuple[int, int]]]]:
    """Fill a template; return the text and the character spans of the role slots (and of ``equals``, the words after
    the last of them: :mod:`circuits.data.roles`)."""
    text = ""
    spans: dict[str, list[tuple[int, int]]] = {r: [] for r in ROLES}
    for piece in _SLOT.split(template.text):
        m = _SLOT.fullmatch(piece)
        if not m:
            text += piece
            continue
        name = piece[1:-1]
        if name not in fill:
            raise PromptError(f"Template {template.id!r} has slot {piece} with no value; filled: {sorted(fill)}")
        value = fill[name]
        role = {"A": "A", "B": "B", "OP": "operator"}.get(name)
        if role:
            spans[role].append((len(text), len(text) + len(value)))
        text += value
    eq = equals_span(text, spans)  # "=", "equals to", "? A:": what asks for the answer after the last role
    if eq is not None:
        spans["equals"] = [eq]
    return text, spans


def _sample_fill(template: Template, a: int, b: int, rng: random.Random) -> dict[str, str]:
    fill = {"A": str(a), "B": str(b)}
    for name, pool in template.slots.items():
        fill[name] = rng.choice(pool)
    if template.op_kind == "object":
        fill["OP"] = fill["OBJECT"]
    else:
        fill["OP"] = template.op
    for name, (source, _) in _TIED.items():
        if "{" + name + "}" in template.text:
            fill[name] = fill[source]
    return fill


def _counterfactual_fill(template: Template, fill: dict[str, str], rng: random.Random) -> dict[str, str]:
    cf = dict(fill)
    if template.op_kind == "symbol":
        cf["OP"] = rng.choice(COUNTERFACTUAL_SYMBOLS)
    elif template.op_kind == "word":
        cf["OP"] = rng.choice(COUNTERFACTUAL_WORDS)
    else:
        cf["OP"] = rng.choice([o for o in OBJECTS if o != fill["OBJECT"]])
    for name, (source, pool) in _TIED.items():
        if name in cf:
            cf[name] = rng.choice([v for v in pool if v not in (fill[source], cf["OP"])])
    return cf


def _operand_counterfactual_fill(template: Template, fill: dict[str, str], rng: random.Random,
                                 choices: Sequence[tuple[int, int]]) -> tuple[dict[str, str], int]:
    """The operand counterfactual: one operand changed (``choices``: the operand pairs allowed), every other word kept; the
    filled slots and the counterfactual's answer."""
    a, b = rng.choice(list(choices))
    cf = dict(fill, A=str(a), B=str(b))
    return cf, compute_answer(template.operation, a, b)  # type: ignore[return-value]


def _random_counterfactual_fill(template: Template, rng: random.Random,
                                choices: Sequence[tuple[int, int]]) -> tuple[dict[str, str], int]:
    """The random counterfactual, MIB's arithmetic kind (``random_counterfactual`` in MIB's ``dataset.py``): another
    problem of the same operation, here in the same template -- both operands drawn from ``choices`` (the operand
    pairs whose answer differs from the reference's) and the template's words (names, objects) drawn anew; the
    filled slots and its answer."""
    a, b = rng.choice(list(choices))
    return _sample_fill(template, a, b, rng), compute_answer(template.operation, a, b)  # type: ignore[return-value]


def operand_counterfactuals(template: Template, a: int, b: int, allowed: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    """The operand pairs of ``allowed`` that differ from ``(a, b)`` in one operand and give another answer."""
    c = compute_answer(template.operation, a, b)
    return [(x, y) for x, y in allowed if (x == a) != (y == b) and compute_answer(template.operation, x, y) not in (None, c)]


def random_counterfactuals(template: Template, a: int, b: int, allowed: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    """The operand pairs of ``allowed`` whose answer differs from ``(a, b)``'s: the random counterfactual's problems
    (a problem with the reference's own answer would give a logit difference of 0 under every circuit)."""
    c = compute_answer(template.operation, a, b)
    return [(x, y) for x, y in allowed if compute_answer(template.operation, x, y) not in (None, c)]


COUNTERFACTUAL_CHOICES = {"operand": operand_counterfactuals, "random": random_counterfactuals}


def few_shot_prefix(template: Template, rng: random.Random, counterfactual: bool = False) -> str:
    """Three solved examples in the template's own form, one per line (the operation is shown)."""
    lines = []
    for a, b in FEW_SHOT_OPERANDS[template.operation]:
        fill = _sample_fill(template, a, b, rng)
        if counterfactual:
            fill = _counterfactual_fill(template, fill, rng)
        text, _ = render(template, fill)
        lines.append(f"{text}{template.answer_sep}{compute_answer(template.operation, a, b)}\n")
    return "".join(lines)


def few_shot_prefixes(template: Template, tokenizer: Any, rng: random.Random, prefix_policy: PrefixPolicy = "keep",
                      tries: int = 20) -> tuple[str, str]:
    """The reference and counterfactual few-shot prefixes of a template (:func:`few_shot_prefix`), of equal token
    length: the counterfactual's is the reference's (``"keep"``) or counterfactual examples (``"counterfactual"``,
    redrawn until the lengths match). :func:`build_pairs` draws them once per template, so every candidate of a
    template shares its prefix and the prefix runs once (:func:`circuits.models.forward.end_residuals`)."""
    prefix = few_shot_prefix(template, rng)
    if prefix_policy == "keep":
        return prefix, prefix
    n = len(encode(tokenizer, prefix))
    for _ in range(tries):
        cf_prefix = few_shot_prefix(template, rng, counterfactual=True)
        if len(encode(tokenizer, cf_prefix)) == n:
            return prefix, cf_prefix
    raise PromptError(f"Template {template.id!r}: no counterfactual few-shot prefix of the reference prefix's token "
                      f"length after {tries} tries.")


def render_pair(
    template: Template,
    a: int,
    b: int,
    tokenizer: Any,
    rng: random.Random,
    *,
    few_shot: bool = True,
    prefix_policy: PrefixPolicy = "keep",
    prefixes: tuple[str, str] | None = None,
    counterfactual: CounterfactualKind = "operator",
    operands: Sequence[tuple[int, int]] | None = None,
    label: bool = False,
    tries: int = 20,
) -> PromptPair:
    """One pair from a template and operands; resamples words until the token lengths match.

    ``prefixes``: the reference and counterfactual few-shot prefixes to use (from :func:`few_shot_prefixes`, equal
    token lengths); without them, and with ``few_shot``, they are drawn from ``rng`` for this pair.
    ``counterfactual``: the paper's (``"operator"``: the calculation word replaced), ``"operand"`` (one operand
    changed, every word kept) or ``"random"`` (another problem of the same template: both operands and the words
    drawn anew, MIB's ``random_counterfactual``); the counterfactual's operands are drawn from ``operands``, the
    template's single-token operand pairs (:func:`candidate_operands`; default: 1-9 for this tokenizer), so that its
    answer differs from the reference's. ``label``: also record the counterfactual's own answer token
    (``counterfactual_answer_token_id``, the second logit of MIB's metric; operand and random kinds only)."""
    c = compute_answer(template.operation, a, b)
    if c is None:
        raise PromptError(f"{a} and {b} have no integer {template.operation} result.")
    if label and counterfactual == "operator":
        raise PromptError("The operator counterfactual asks for no number, so it has no label to take as the second "
                          "logit; accepted: counterfactual 'operand' or 'random' with the label")
    cf_choices: list[tuple[int, int]] = []
    if counterfactual in COUNTERFACTUAL_CHOICES:
        cf_choices = COUNTERFACTUAL_CHOICES[counterfactual](template, a, b, operands if operands is not None
                                                            else candidate_operands(template, tokenizer, 1, 9))
        if not cf_choices:
            raise PromptError(f"{template.id} ({a}, {b}): no {counterfactual} counterfactual has another answer.")
        if prefix_policy == "counterfactual":
            raise PromptError(f"The {counterfactual} counterfactual keeps the reference's few-shot prefix "
                              "(prefix_policy 'keep').")
    if not few_shot:
        prefix = cf_prefix = ""
    else:
        prefix, cf_prefix = prefixes if prefixes is not None else few_shot_prefixes(template, tokenizer, rng, prefix_policy)
    last: Exception | None = None
    for _ in range(tries):
        fill = _sample_fill(template, a, b, rng)
        cf_answer = ""
        if counterfactual == "operand":
            cf_fill, cf_c = _operand_counterfactual_fill(template, fill, rng, cf_choices)
            cf_answer = str(cf_c)
        elif counterfactual == "random":
            cf_fill, cf_c = _random_counterfactual_fill(template, rng, cf_choices)
            cf_answer = str(cf_c)
        else:
            cf_fill = _counterfactual_fill(template, fill, rng)
        ref_body, spans = render(template, fill)
        cf_body, _ = render(template, cf_fill)
        # A space before the answer, or (tokenizers that glue spaces to words) a space inside it.
        options = [(template.answer_sep, str(c))]
        if template.answer_sep == " ":
            options.append(("", " " + str(c)))
        pair = None
        errors = []
        for sep, answer in options:
            try:
                pair = make_pair(tokenizer, prefix + ref_body + sep, cf_prefix + cf_body + sep, answer,
                                 template_id=template.id, operation=template.operation, operands=(a, b, c),
                                 max_answer_tokens=1)
                break
            except PromptError as err:
                errors.append(err)
        if pair is None:
            last = errors[0]
            if all("single token" in str(e) for e in errors):
                raise last
            continue
        cf_id = -1
        if label:  # the counterfactual's answer as its own prompt continues it, written as the reference's answer is
            try:
                cf_id = answer_token(tokenizer, pair.counterfactual, cf_answer if answer == str(c) else " " + cf_answer)
            except PromptError as err:
                last = err
                continue
        shifted = {r: [(s + len(prefix), e + len(prefix)) for s, e in v] for r, v in spans.items()}
        roles = token_positions(tokenizer, pair.reference, shifted)
        return replace(pair, roles=roles, prefix_length=prefix_length_of(tokenizer, prefix, pair.reference_token_ids),
                       counterfactual_answer=cf_answer, counterfactual_answer_token_id=cf_id)
    raise PromptError(f"Template {template.id!r}: no counterfactual of equal token length after {tries} tries ({last}).")


# --- sampling and filtering -------------------------------------------------------------------


def _ids(value: Any) -> list[Any]:
    return list(value) if isinstance(value, (list, tuple)) else [value]


def read_pairs(path: str | Path) -> list[PromptPair]:
    """The pairs of a ``pairs.jsonl`` file (one :meth:`PromptPair.to_json` a line), as results save them; a line
    whose token ids are not non-negative integers is one ``ValueError`` naming the file, line and field (a negative
    id would index the vocabulary from its end, silently)."""
    pairs = []
    for i, row in enumerate(read_jsonl(path), 1):
        if not isinstance(row, dict):
            raise ValueError(f"{path}, line {i}: expected a pair object, got {str(row)[:80]}")
        for key in ("answer_token_id", "reference_token_ids", "counterfactual_token_ids", "answer_token_ids"):
            if key == "answer_token_ids" and key not in row:  # a one-token pair (every line before issue 42)
                continue
            bad = [x for x in _ids(row.get(key)) if type(x) is not int or x < 0]
            if key not in row or bad:
                raise ValueError(f"{path}, line {i}: {key} must be {'a token id' if key[-1] == 'd' else 'token ids'} "
                                 f"(integers >= 0), got {str(row.get(key))[:80]}")
        if "roles" in row:  # token positions inside the reference prompt (a bad one indexed past it, or from its end)
            check_positions(row["roles"], len(row["reference_token_ids"]), f"{path}, line {i}")
        try:
            pairs.append(PromptPair.from_json(row))
        except (TypeError, ValueError) as err:
            raise ValueError(f"{path}, line {i}: not a saved prompt pair ({err})") from None
    return pairs


def check_context(n_tokens: int, n_ctx: int | None, where: str) -> None:
    """Refuse a prompt of ``n_tokens`` longer than the model's context ``n_ctx`` (its position embeddings or rotary
    tables end there): one line naming ``where``, before the work (it was a "bug" line from inside the forward)."""
    if n_ctx is not None and n_tokens > n_ctx:
        raise PromptError(f"{where}: the prompt is {n_tokens} tokens, longer than the model's context of {n_ctx}; "
                          "shorten it (or its few-shot examples)")


def check_token_ids(pairs: Sequence[PromptPair], d_vocab: int, where: str | Path, n_ctx: int | None = None) -> None:
    """Refuse, before any work, pairs read from ``where`` whose token ids the model's vocabulary (``d_vocab``) lacks,
    or whose prompts are longer than its context (``n_ctx``): one line naming the file, the pair and the field."""
    for i, p in enumerate(pairs, 1):
        check_context(len(p.reference_token_ids), n_ctx, f"{where}, pair {i}")
        for key in ("answer_token_id", "reference_token_ids", "counterfactual_token_ids", "answer_token_ids",
                    "counterfactual_answer_token_id"):
            high = max(_ids(getattr(p, key)), default=0)
            if high >= d_vocab:
                raise ValueError(f"{where}, pair {i}: {key} holds token id {high}, outside this model's vocabulary of "
                                 f"{d_vocab}; the pairs were made for another tokenizer, or edited")


def write_pairs(path: str | Path, pairs: Sequence[PromptPair]) -> None:
    """Write ``pairs`` as a ``pairs.jsonl`` file that :func:`read_pairs` reads back."""
    write_jsonl(path, [p.to_json() for p in pairs])


@dataclass
class PairSet:
    """Pairs kept, and what the model did on all candidates before filtering."""

    pairs: list[PromptPair]
    n_candidates: int
    accuracy: float  # on all candidates, before filtering
    mean_answer_prob: float  # on all candidates, before filtering
    counterfactual_accuracy: float  # on the kept pairs: how often X_c still yields the answer
    counterfactual_answer_prob: float
    per_template: dict[str, dict[str, float]]
    few_shot: bool
    # a --pairs-file as it was read: its absolute path, the SHA-256 of its bytes and the lines read (None: templates).
    # The result keeps the pairs themselves (pairs.jsonl); this says which file they came from, wherever it is read.
    pairs_file: dict[str, Any] | None = None

    def __repr__(self) -> str:
        """One line (never the token ids): ``<PairSet: 32 pairs of addition, accuracy before filtering 91%>``."""
        ops = sorted({p.operation for p in self.pairs})
        acc = f", accuracy before filtering {self.accuracy:.0%}" if self.accuracy is not None else ""
        return f"<PairSet: {len(self.pairs)} pairs of {', '.join(ops) or 'nothing'}{acc}>"

    def _repr_html_(self, n: int = 5) -> str:
        """In a notebook: a short table of the first ``n`` pairs, the end of each prompt (newlines kept) and its
        template."""
        cell = "<td style='text-align:left;white-space:pre-wrap'>{}</td>"
        rows = "".join(f"<tr>{cell.format(html.escape('…' + p.reference[-40:]))}"
                       f"{cell.format(html.escape('…' + p.counterfactual[-40:]))}<td>{html.escape(p.template_id)}</td></tr>"
                       for p in self.pairs[:n])
        more = f"<p>… and {len(self.pairs) - n} more</p>" if len(self.pairs) > n else ""
        return (f"<p><b>{html.escape(repr(self))}</b></p><table><thead><tr><th>reference (end)</th>"
                f"<th>counterfactual (end)</th><th>template</th></tr></thead><tbody>{rows}</tbody></table>{more}")

    def __len__(self) -> int:
        return len(self.pairs)

    def __iter__(self) -> Iterator[PromptPair]:
        return iter(self.pairs)

    def __getitem__(self, i: int) -> PromptPair:
        return self.pairs[i]

    def stats(self) -> dict[str, Any]:
        return {
            "n_candidates": self.n_candidates,
            "accuracy": self.accuracy,
            "mean_answer_prob": self.mean_answer_prob,
            "counterfactual_accuracy": self.counterfactual_accuracy,
            "counterfactual_answer_prob": self.counterfactual_answer_prob,
            "few_shot": self.few_shot,
            "per_template": self.per_template,
            **({"pairs_file": self.pairs_file} if self.pairs_file else {}),
        }


def use_few_shot(model: Model, few_shot: FewShot) -> bool:
    if few_shot == "auto":
        n_params = sum(p.numel() for p in model.parameters())
        return n_params < FEW_SHOT_AUTO_MAX_PARAMS
    return few_shot == "on"


@torch.no_grad()
def pair_logits(model: Model, pairs: list[PromptPair], which: Literal["reference", "counterfactual"] = "reference",
                batch_size: int = 64) -> Float[Tensor, "pair d_vocab"]:
    """END logits of each pair's reference or counterfactual prompt; a shared few-shot prefix runs once. Holds
    ``pairs x d_vocab`` numbers (100,000 pairs of a 49,152-token vocabulary: 19.7 GB): for a few pairs; what keeps only
    the top token and the answer's probability is :func:`pair_answer_scores`, a batch of logits at a time."""
    rows = [p.reference_token_ids if which == "reference" else p.counterfactual_token_ids for p in pairs]
    prefixes = [p.prefix_length for p in pairs]
    return unembed_end(model, end_residuals(model, rows, prefixes, batch_size=batch_size)).cpu()


@torch.no_grad()
def pair_answer_scores(model: Model, pairs: Sequence[PromptPair],
                       which: Literal["reference", "counterfactual"] = "reference",
                       answers: Sequence[int] | None = None, batch_size: int = 64, record: EndRecord | None = None,
                       ) -> tuple[Int[Tensor, " pair"], Float[Tensor, " pair"]]:
    """Each pair's top token at END of its reference or counterfactual prompt, and the probability of its answer
    there (``answers``: one token id a pair, default each pair's ``answer_token_id``): what :func:`pair_logits`
    followed by a softmax gives, one forward batch of logits at a time, so memory is ``batch_size x d_vocab`` plus
    two numbers a pair, whatever the number of pairs (a pairs file of any length). ``record``: keep the END
    activations it names for a later pass over the same prompts (:class:`~circuits.models.forward.EndRecord`)."""
    pairs = list(pairs)
    rows = [p.reference_token_ids if which == "reference" else p.counterfactual_token_ids for p in pairs]
    ans = torch.tensor(list(answers) if answers is not None else [p.answer_token_id for p in pairs], dtype=torch.long)
    top = torch.zeros(len(pairs), dtype=torch.long)
    prob = torch.zeros(len(pairs))
    for chunk, resid in end_residual_batches(model, rows, [p.prefix_length for p in pairs], batch_size=batch_size,
                                             row_hooks=record.row_hooks(rows) if record is not None else None):
        probs = unembed_end(model, resid).cpu().softmax(-1)
        idx = torch.tensor(chunk, dtype=torch.long)
        top[idx] = probs.argmax(-1)
        prob[idx] = probs[torch.arange(len(chunk)), ans[idx]]
    return top, prob


def candidate_operands(template: Template, tokenizer: Any, lo: int, hi: int) -> list[tuple[int, int]]:
    """Operand pairs whose operands and answer are each one token after the template's context."""
    space = len(encode(tokenizer, " "))
    single: dict[int, bool] = {}  # each number tokenized once, not once per operand pair it appears in

    def one_token(x: int) -> bool:
        if x not in single:
            single[x] = len(encode(tokenizer, " " + str(x))) == space + 1
        return single[x]

    ok = []
    for a in range(lo, hi + 1):
        for b in range(lo, hi + 1):
            c = compute_answer(template.operation, a, b)
            if c is not None and all(one_token(x) for x in (a, b, c)):
                ok.append((a, b))
    return ok


def build_pairs(model: Model, config: PairConfig | str | None = None, *, check_counterfactual: bool = True,
                progress: bool = True, record: EndRecord | None = None, **kwargs: Any) -> PairSet:
    """Sample pairs round-robin over the task's templates, run the model, keep the correct ones.

    ``config`` is a :class:`PairConfig`, or a task name with the other fields as keywords
    (``build_pairs(model, "addition", n_pairs=32)``). ``check_counterfactual=False`` skips running the kept pairs'
    counterfactual prompts (the "counterfactual keeps the answer" statistics are then NaN and absent per template):
    for a caller that runs them anyway, as the identify job's sweep does (:func:`counterfactual_stats`).
    ``progress``: a bar of the pairs kept (and the candidates run) while the model scores candidates.
    ``record``: the candidates' END activations it names, kept for the pairs kept (the identify job's sweep reads them
    instead of running the reference prompts again; :class:`~circuits.models.forward.EndRecord`).
    """
    if config is None or isinstance(config, str):
        config = PairConfig(**({"task": config} if config else {}), **kwargs)
    elif kwargs:
        config = replace(config, **kwargs)
    if config.pairs_file:  # your own pairs (read_pairs_file), not the task's templates
        return read_pairs_file(model, config.pairs_file, config.n_pairs, filter_correct=config.filter_correct,
                               label=config.second_logit == "label")
    tokenizer = model.tokenizer
    rng = random.Random(config.seed)
    few_shot = use_few_shot(model, config.few_shot)
    templates = templates_for(config.task)
    pools = {}
    allowed: dict[str, list[tuple[int, int]]] = {}  # a template's single-token operand pairs (operand counterfactuals)
    for t in templates:
        with stage("candidates"):
            ops = candidate_operands(t, tokenizer, *config.operand_range)
        allowed[t.id] = list(ops)
        if config.counterfactual in COUNTERFACTUAL_CHOICES:  # only operands some counterfactual gives another answer
            ops = [o for o in ops if COUNTERFACTUAL_CHOICES[config.counterfactual](t, *o, allowed[t.id])]
        rng.shuffle(ops)
        pools[t.id] = ops
    if not any(pools.values()):
        raise PromptError(
            f"No operands in {config.operand_range} give single-token operands and answers for task {config.task!r}."
        )
    # One few-shot prefix per template (its own form, drawn once): every candidate of a template shares it token for
    # token, so scoring runs it once per batch and only each question's own tokens per candidate.
    prefixes: dict[str, tuple[str, str]] = {}
    skipped: list[str] = []
    for t in templates:
        if few_shot and pools[t.id]:
            try:
                prefixes[t.id] = few_shot_prefixes(t, tokenizer, rng, config.prefix_policy)
            except PromptError as err:
                skipped.append(f"{t.id}: {err}")
                pools[t.id] = []
    # Round-robin over templates; each template cycles through its operand pairs.
    order: list[tuple[Template, tuple[int, int]]] = []
    depth = 0
    while len(order) < config.max_candidates and depth < max(len(v) for v in pools.values()) * 4:
        for t in templates:
            ops = pools[t.id]
            if ops:
                order.append((t, ops[depth % len(ops)]))
        depth += 1
    order = order[: config.max_candidates]

    kept: list[PromptPair] = []
    seen = correct = 0
    prob_sum = 0.0
    per_t: dict[str, list[float]] = {}
    start = 0
    bar = tqdm(total=config.n_pairs, desc=f"pairs ({config.task})", unit="pair", disable=not progress)
    while start < len(order) and len(kept) < config.n_pairs:
        # Size the next chunk from the accuracy so far, so low-accuracy tasks need few rounds.
        need = config.n_pairs - len(kept)
        rate = max(correct / seen, 0.05) if seen else 0.8
        size = int(min(256, max(16, need / rate * 1.2))) if config.filter_correct else need
        batch_pairs = []
        with stage("candidates"):
            for t, (a, b) in order[start : start + size]:
                try:
                    batch_pairs.append(render_pair(t, a, b, tokenizer, rng, few_shot=few_shot, prefixes=prefixes.get(t.id),
                                                   counterfactual=config.counterfactual, operands=allowed[t.id],
                                                   label=config.second_logit == "label"))
                except PromptError as err:
                    skipped.append(f"{t.id} ({a}, {b}): {err}")
        start += size
        if not batch_pairs:
            continue
        with stage("filtering"):
            top, p_ans = pair_answer_scores(model, batch_pairs, record=record)
        hit = top == torch.tensor([p.answer_token_id for p in batch_pairs])
        for i, pair in enumerate(batch_pairs):
            seen += 1
            correct += int(hit[i])
            prob_sum += float(p_ans[i])
            per_t.setdefault(pair.template_id, []).append(float(hit[i]))
            if (hit[i] or not config.filter_correct) and len(kept) < config.n_pairs:
                kept.append(pair)
                bar.update(1)
        bar.set_postfix_str(f"{seen} candidates run, {correct} correct", refresh=False)
    bar.close()
    if record is not None:
        record.keep_only([p.reference_token_ids for p in kept])
    if not seen:
        raise PromptError(f"No valid pair could be made for task {config.task!r}; first problem: {skipped[0]}")
    if not kept:
        raise PromptError(
            f"The model answered none of {seen} candidate prompts for task {config.task!r} correctly, so no pairs "
            "are left. Try a few-shot prefix (few_shot='on'), other templates, or filter_correct=False."
        )
    if len(kept) < config.n_pairs:
        warnings.warn(f"{len(kept)} of the {config.n_pairs} pairs asked for task {config.task!r}: the model answered "
                      f"{correct} of all {seen} candidate prompts correctly (operands {config.operand_range}, at most "
                      f"{config.max_candidates} candidates); going on with {len(kept)}", FewerPairsWarning, stacklevel=2)
    stats: dict[str, dict[str, float]] = {k: {"accuracy": sum(v) / len(v), "n": len(v)} for k, v in per_t.items()}
    cf_accuracy = cf_prob = float("nan")
    if check_counterfactual:  # on the pairs kept: does X_c still yield the answer?
        with stage("filtering"):
            cf_top, cf_p = pair_answer_scores(model, kept, "counterfactual")
        cf_hit = cf_top == torch.tensor([p.answer_token_id for p in kept])
        counterfactual_stats(kept, cf_hit, cf_p, stats)
        cf_accuracy, cf_prob = float(cf_hit.float().mean()), float(cf_p.mean())
    return PairSet(
        pairs=kept,
        n_candidates=seen,
        accuracy=correct / seen,
        mean_answer_prob=prob_sum / seen,
        counterfactual_accuracy=cf_accuracy,
        counterfactual_answer_prob=cf_prob,
        per_template=stats,
        few_shot=few_shot,
    )


def counterfactual_stats(pairs: Sequence[PromptPair], keeps_answer: Bool[Tensor, " pair"],
                         answer_prob: Float[Tensor, " pair"], per_template: dict[str, dict[str, float]]) -> None:
    """Add each template's "counterfactual keeps the answer" rate and mean answer probability to ``per_template``
    (``keeps_answer``/``answer_prob``: the counterfactual prompt's top token is the answer, and its probability)."""
    for tid, stats in per_template.items():
        idx = [i for i, p in enumerate(pairs) if p.template_id == tid]
        if idx:
            stats["counterfactual_accuracy"] = float(keeps_answer[idx].float().mean())
            stats["counterfactual_answer_prob"] = float(answer_prob[idx].mean())


Pairs = Union[Sequence[PromptPair], PairSet, PairBatch]


def as_batch(pairs: Pairs, model: Model) -> PairBatch:
    """Pairs as a right-padded batch on the model's device (a ``PairBatch`` is moved there)."""
    if isinstance(pairs, PairBatch):
        batch = pairs.to(model.cfg.device)
    else:
        batch = PairBatch.from_pairs(list(pairs), pad_token_id(model), device=model.cfg.device)
    check_context(batch.reference.shape[1], model.cfg.n_ctx, "a prompt pair")
    return batch


def read_pairs_file(model: Model, path: str | Path, n_pairs: int | None = None, *,
                    filter_correct: bool = False, label: bool = False, batch_size: int = 64) -> PairSet:
    """Your own prompt pairs (``--pairs-file``): a JSONL file, one ``{"prompt", "counterfactual", "answer"}`` object a
    line (``"answers": [...]`` instead of ``"answer"``: its first is the answer; ``"id"``: a name for the pair;
    ``"roles"``: the character spans of its operands, operator and ``=`` in ``prompt``, :mod:`circuits.data.roles`,
    derived from the template where the prompt's last line has a template's form and the line gives none), each
    made with :func:`~circuits.data.pairs.make_pair` (an answer of one token or several, prompts of equal token
    length) and scored by the model, so the result records its accuracy on them as on the templates' pairs. The first
    ``n_pairs`` lines are read; ``filter_correct`` keeps only those the model answers. ``label``
    (``--second-logit label``): every line also gives ``"counterfactual_answer"``, the counterfactual prompt's own
    answer, whose first token is the second token of ``logit_diff``. A bad line is one ``ValueError`` naming the file
    and line.

    An answer of several tokens is scored teacher-forced: the model answers a pair when its top token is the answer's
    at every answer position (the earlier answer tokens written after the prompt), and the answer probability is the
    product of those positions' probabilities; the counterfactual is forced with the same answer tokens (as
    :func:`~circuits.data.answers.at_answer_position` forces it). A one-token answer is scored as before. The model's
    logits are read ``batch_size`` pairs at a time and only each pair's top token and answer probability are kept,
    so memory does not grow with the file's length times the vocabulary."""
    pairs = []
    first_line: dict[tuple, int] = {}  # a pair's tokens -> the line it first appears on
    repeats: list[tuple[int, int]] = []
    # Each line checked without the tokenizer first (the command line did the same before the model loaded); token
    # roles (issue 40): the line's character spans, or the template its prompt's last line matches
    for i, row, answer, spans in pairs_file_lines(path, n_pairs, label=label):
        where = f"--pairs-file {path}, line {i}"
        try:
            pair = make_pair(model.tokenizer, row["prompt"], row["counterfactual"], answer,
                             template_id=str(row.get("id", f"file/{i}")))
            if label:
                cf_answer = row["counterfactual_answer"]
                pair = replace(pair, counterfactual_answer=cf_answer, counterfactual_answer_token_id=answer_tokens(
                    model.tokenizer, row["counterfactual"], cf_answer)[0])
        except (PromptError, ValueError) as err:
            raise ValueError(f"{where}: {err}") from None
        roles = token_positions(model.tokenizer, pair.reference, spans) if spans else {}
        empty = [r for r, v in roles.items() if not v]
        if empty:
            raise ValueError(f"{where}: roles.{empty[0]} {list(spans[empty[0]][0])} covers no token of the prompt "
                             f"({row['prompt'][slice(*spans[empty[0]][0])]!r}); give a span over the role's text")
        pairs.append(replace(pair, roles=roles))
        check_context(len(pairs[-1].reference_token_ids), model.cfg.n_ctx, f"--pairs-file {path}, line {i}")
        key = (tuple(pairs[-1].reference_token_ids), tuple(pairs[-1].counterfactual_token_ids), tuple(pairs[-1].answer_ids))
        if key in first_line:
            repeats.append((i, first_line[key]))
        first_line.setdefault(key, i)
    if repeats:
        said = ", ".join(f"line {i} repeats line {j}" for i, j in repeats[:3]) + (
            f" and {len(repeats) - 3} more" if len(repeats) > 3 else "")
        warnings.warn(f"--pairs-file {path}: {said} (the same prompt, counterfactual and answer): {len(repeats)} of "
                      f"{len(pairs)} pairs are repeats, and each counts again in every mean and interval as if it were "
                      "another pair; remove the repeats", RepeatedPairsWarning, stacklevel=2)
    hit, p_ans = _forced_scores(model, pairs, "reference", batch_size)
    cf_hit, cf_p = _forced_scores(model, pairs, "counterfactual", batch_size)
    kept = [p for p, h in zip(pairs, hit) if h or not filter_correct]
    if not kept:
        raise ValueError(f"the model answers none of the {len(pairs)} pairs of {path} correctly; pass "
                         "--no-filter-correct to patch them anyway")
    source = {"path": str(Path(path).expanduser().resolve()),
              "sha256": hashlib.sha256(Path(path).read_bytes()).hexdigest(), "lines_read": len(pairs)}
    return PairSet(pairs=kept, n_candidates=len(pairs), accuracy=float(hit.float().mean()),
                   mean_answer_prob=float(p_ans.mean()), counterfactual_accuracy=float(cf_hit.float().mean()),
                   counterfactual_answer_prob=float(cf_p.mean()), per_template={}, few_shot=False, pairs_file=source)


def _forced_scores(model: Model, pairs: list[PromptPair], which: Literal["reference", "counterfactual"],
                   batch_size: int = 64) -> tuple[Bool[Tensor, " pair"], Float[Tensor, " pair"]]:
    """Per pair: whether the prompt's top token is the answer's at every answer position, teacher-forced with the
    answer's earlier tokens, and the product of the answer tokens' probabilities (one position: END's, as before).
    Logits a batch at a time (:func:`pair_answer_scores`): a few numbers a pair are kept, never its logits."""
    hit: Tensor | None = None
    prob: Tensor | None = None
    for k in range(max(len(p.answer_ids) for p in pairs)):
        idx = [i for i, p in enumerate(pairs) if len(p.answer_ids) > k]
        forced = [replace(pairs[i], reference_token_ids=pairs[i].reference_token_ids + pairs[i].answer_ids[:k],
                          counterfactual_token_ids=pairs[i].counterfactual_token_ids + pairs[i].answer_ids[:k])
                  for i in idx] if k else pairs
        ids = [pairs[i].answer_ids[k] for i in idx]
        top, k_prob = pair_answer_scores(model, forced, which, ids, batch_size=batch_size)
        k_hit = top == torch.tensor(ids)
        if hit is None or prob is None:  # the first position covers every pair
            hit, prob = k_hit, k_prob
        else:
            hit[idx] &= k_hit
            prob[idx] *= k_prob
    assert hit is not None and prob is not None
    return hit, prob
