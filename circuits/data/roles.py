"""Token roles of a prompt: where its operands, operator and ``=`` sit (issue 40).

A pair built from a template knows its roles from the template's slots (:func:`circuits.data.pairs.render`). A line
of a ``--pairs-file`` gives them as character spans of its ``prompt``, or has them derived here when its prompt's last
line is one of the templates (:func:`template_spans`); the pair then holds them as token positions
(:attr:`PromptPair.roles`), saved in a result's ``pairs.jsonl`` and read back with it.

The roles:

* ``A`` and ``B``: the first and the second operand;
* ``operator``: the word or symbol that carries the calculation (``+``, ``plus``, ``sum``);
* ``equals``: the words after the last operand or operator that ask for the answer (``=``, ``equals to``, ``is``,
  ``? A:``).

A pairs-file line's ``"roles"`` maps each of these names to ``[start, end]``: character offsets into ``prompt``, end
excluded, as Python slices them (``prompt[start:end]`` is the role's text). Every role is optional; a role's span must
lie inside the prompt and cover at least one token.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from circuits.data.templates import Template, all_templates

ROLES = ("A", "B", "operator")  # the roles a template's slots mark (``{A}``, ``{B}``, ``{OP}``)
ROLE_FIELDS = (*ROLES, "equals")  # every role a pair may hold
_SLOT = re.compile(r"(\{[A-Z0-9]+\})")
_GROUP = {"A": "A", "B": "B", "OP": "operator"}

Spans = dict[str, list[tuple[int, int]]]  # role -> character spans (start, end excluded)


def equals_span(text: str, spans: Spans, end: int | None = None) -> tuple[int, int] | None:
    """The ``equals`` span: the text after the last role span up to ``end`` (default: the text's end), without the
    spaces around it; None when nothing is left."""
    last = max((e for v in spans.values() for _, e in v), default=None)
    if last is None:
        return None
    end = len(text) if end is None else end
    rest = text[last:end]
    start = last + len(rest) - len(rest.lstrip())
    stop = last + len(rest.rstrip())
    return (start, stop) if stop > start else None


def _pattern(template: Template) -> re.Pattern[str]:
    """``template`` as a regular expression over a prompt's last line: operands as numbers, ``{OP}`` as the template's
    own word or symbol (any word for an object template), the other slots as any text."""
    parts = []
    for piece in _SLOT.split(template.text):
        m = _SLOT.fullmatch(piece)
        if not m:
            parts.append(re.escape(piece))
            continue
        name = piece[1:-1]
        if name in ("A", "B"):
            parts.append(rf"(?P<{name}>\d+)")
        elif name == "OP":
            parts.append(r"(?P<OP>\w+)" if template.op_kind == "object" else f"(?P<OP>{re.escape(template.op)})")
        else:
            parts.append(r"[^\n]+?")  # within the last line, never across the few-shot lines
    return re.compile(r"(?:^|(?<=\s))(" + "".join(parts) + r")[ \t]?\Z")  # at the end, from a word's start


_PATTERNS: list[tuple[Template, re.Pattern[str]]] | None = None


def template_spans(prompt: str) -> tuple[str, Spans] | None:
    """The id of the template whose form ends the prompt (from a word's start: ``so 9 + 9 = `` has
    ``{A} {OP} {B} =``'s), and its role spans in ``prompt`` (``equals`` included where the template has words after
    its last role); None when no template matches."""
    global _PATTERNS
    if _PATTERNS is None:
        _PATTERNS = [(t, _pattern(t)) for t in all_templates()]
    for template, pattern in _PATTERNS:
        m = pattern.search(prompt)
        if m is None:
            continue
        spans: Spans = {_GROUP[g]: [m.span(g)] for g in ("A", "B", "OP")}
        eq = equals_span(prompt, spans, m.end(1))
        if eq is not None:
            spans["equals"] = [eq]
        return template.id, spans
    return None


def line_spans(value: Any, prompt: str, where: str) -> Spans:
    """The ``"roles"`` field of a pairs-file line, checked: an object mapping role names to ``[start, end]``
    character offsets inside ``prompt``; anything else is one ``ValueError`` naming ``where`` (the file and line)."""
    accepted = ('accepted: "roles": {"A": [start, end], "operator": [start, end], "B": [start, end], "equals": '
                "[start, end]}, character offsets into the prompt (end excluded), each role optional")
    if not isinstance(value, dict):
        raise ValueError(f"{where}: roles must be an object, got {str(value)[:60]}; {accepted}")
    spans: Spans = {}
    for role, span in value.items():
        if role not in ROLE_FIELDS:
            raise ValueError(f"{where}: unknown role {role!r} (roles: {', '.join(ROLE_FIELDS)}); {accepted}")
        if (not isinstance(span, list) or len(span) != 2 or any(type(x) is not int for x in span)):
            raise ValueError(f"{where}: roles.{role} must be [start, end] (two integers), got {str(span)[:60]}; "
                             f"{accepted}")
        start, end = span
        if not 0 <= start < end <= len(prompt):
            raise ValueError(f"{where}: roles.{role} {span} is not a span inside the prompt of {len(prompt)} "
                             f"characters (0 <= start < end <= {len(prompt)}); {accepted}")
        spans[role] = [(start, end)]
    return spans


def check_positions(roles: Any, n_tokens: int, where: str | Path) -> None:
    """Token-position roles as a saved ``pairs.jsonl`` holds them, checked: role names as above, each a list of
    positions inside the reference prompt of ``n_tokens`` tokens; else one ``ValueError`` naming ``where``."""
    if not isinstance(roles, dict):
        raise ValueError(f"{where}: roles must be an object of role -> token positions, got {str(roles)[:60]}")
    for role, pos in roles.items():
        if role not in ROLE_FIELDS:
            raise ValueError(f"{where}: unknown role {role!r} (roles: {', '.join(ROLE_FIELDS)})")
        if not isinstance(pos, list) or any(type(x) is not int or not 0 <= x < n_tokens for x in pos):
            raise ValueError(f"{where}: roles.{role} must be token positions 0..{n_tokens - 1} of the reference "
                             f"prompt, got {str(pos)[:60]}")


def pairs_file_lines(path: str | Path, n_pairs: int | None = None, *, label: bool = False
                     ) -> list[tuple[int, dict[str, Any], str, Spans]]:
    """The first ``n_pairs`` lines of a pairs file (``--pairs-file``), checked as far as no tokenizer is needed: each
    an object with string ``prompt``, ``counterfactual`` and ``answer`` (or ``answers: [...]``, its first taken),
    its ``roles`` (:func:`line_spans`) or the template spans its prompt matches, and with ``label``
    (``--second-logit label``) its ``counterfactual_answer``. Returns ``(line, row, answer, spans)`` per line; a bad
    line is one ``ValueError`` naming the file and line. Imports no torch: the command line calls it before the model
    loads (a bad line in a minute-long load was found only after it), and :func:`~circuits.data.pairs.read_pairs_file`
    builds the pairs from what it returns."""
    from circuits.io import read_jsonl

    rows = read_jsonl(path)
    if not rows:
        raise ValueError(f"--pairs-file {path} holds no pairs (one JSON object a line: prompt, counterfactual, answer)")
    out = []
    for i, row in enumerate(rows[: n_pairs or None], 1):
        answers = row.get("answers") if isinstance(row, dict) else None
        answer = row.get("answer", answers[0] if isinstance(answers, list) and answers else None) \
            if isinstance(row, dict) else None
        if not isinstance(row, dict) or not all(isinstance(x, str) for x in (row.get("prompt"), row.get("counterfactual"),
                                                                              answer)):
            raise ValueError(f"--pairs-file {path}, line {i}: expected an object with string fields prompt, "
                             f"counterfactual and answer (or answers: [...]), got {str(row)[:120]}")
        where = f"--pairs-file {path}, line {i}"
        if "roles" in row:
            spans = line_spans(row["roles"], row["prompt"], where)
        else:
            found = template_spans(row["prompt"])
            spans = found[1] if found else {}
        if label:
            cf_answer = row.get("counterfactual_answer")
            if not isinstance(cf_answer, str) or not cf_answer:
                raise ValueError(f"{where}: --second-logit label needs each line's counterfactual_answer (the "
                                 f"counterfactual prompt's own answer, text), got {cf_answer!r}; or pass "
                                 "--second-logit top")
        out.append((i, row, answer, spans))
    return out
