"""Prompt templates of the paper, as data (Appendix A, Figures 8 and 10; Appendix D, Table 3).

A template is a text with slots ``{A}`` and ``{B}`` (the operands) and ``{OP}`` (the word or symbol
that carries the calculation), a rule for the answer ``C``, and how to build its counterfactual:
the paper keeps the grammar and token positions and replaces the calculation words -- operator words
become one of ``COUNTERFACTUAL_WORDS`` and symbols one of ``COUNTERFACTUAL_SYMBOLS`` (Section 3,
Appendix A). Templates never end in the separator before the answer: the prompt builder decides it
from the tokenizer, so that the next token is the answer's first token.

Figure 8 as extracted lists "The addition of {A} and {B} equals to" twice for every operation; the
duplicate is taken to be the "is equal to" form shown in Figure 9 ("42 plus 34 is equal to").

Figure 10's templates have more slots (``<EVENT>``, ``<VERB>``, ``<NAME>``, ...), written here as
``{EVENT}``, ``{VERB}``, ``{NAME}``, ... and filled from the word lists below. Their counterfactuals
follow Figure 9: for object accumulation the second object, the asked object and the asked person
are swapped for others, so the question no longer asks for the total (``op_kind="object"``: ``{OP}``,
``{QOBJECT}`` and ``{QNAME}`` copy ``{OBJECT}`` and ``{NAME}`` in the reference and take other
values in the counterfactual); for time spans the unit
("years", "days", "hours") becomes a counterfactual word, so no duration is stated.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

Operation = Literal["addition", "subtraction", "multiplication", "division", "exponentiation"]
OPERATIONS: tuple[Operation, ...] = ("addition", "subtraction", "multiplication", "division")
# every task a job accepts: the four operations, all four, and the extra formats of Sections 5.1-5.2
TASKS = (*OPERATIONS, "all", "addition_extra", "exponentiation")
Form = Literal["equation", "statement", "question", "time_span", "accumulation"]
OpKind = Literal["symbol", "word", "object"]

COUNTERFACTUAL_WORDS = ("none", "nothing", "null", "nil", "void", "blank", "empty", "neither")
COUNTERFACTUAL_SYMBOLS = ("<", ">", "@", "#", "&", "|", "~", "$")

# Figure 10 word lists ("a curated list of common words"; footnote 4: the choice does not matter as
# long as the semantics are similar).
EVENTS = ("war", "conflict", "project", "festival", "meeting", "trip", "strike", "drought", "voyage", "reign")
TIME_VERBS = ("lasted", "spanned", "ran", "went on", "continued", "extended")
TIME_VERBS_FUTURE = ("last", "span", "run", "go on", "continue", "extend")
MONTHS = ("Jan.", "Feb.", "Mar.", "Apr.", "Jun.", "Jul.", "Aug.", "Sep.", "Oct.", "Nov.", "Dec.")
CENTURY_PREFIXES = tuple(str(y) for y in range(100, 200))  # <YYY> in 100..199
OBJECTS = ("apples", "oranges", "pears", "books", "pens", "coins", "cards", "stamps", "shells", "marbles",
           "cups", "tables", "balls", "cookies", "flowers")
GET_VERBS = ("gets", "obtains", "buys", "finds", "receives", "acquires", "picks", "collects")
GET_VERBS_PAST = ("got", "obtained", "bought", "found", "received", "acquired", "picked", "collected")
NAMES = (
    "Mary", "John", "James", "Linda", "Robert", "Susan", "Michael", "Karen", "David", "Lisa", "William",
    "Nancy", "Richard", "Betty", "Joseph", "Sandra", "Thomas", "Ashley", "Charles", "Emily", "Daniel",
    "Donna", "Matthew", "Michelle", "Anthony", "Carol", "Mark", "Amanda", "Paul", "Melissa", "Steven",
    "Deborah", "Andrew", "Laura", "Kenneth", "Rebecca", "Joshua", "Sharon", "Kevin", "Cynthia", "Brian",
    "Kathleen", "George", "Amy", "Edward", "Angela", "Ronald", "Shirley", "Timothy", "Anna", "Jason",
    "Ruth", "Jeffrey", "Brenda", "Ryan", "Pamela", "Jacob", "Nicole", "Gary", "Katherine", "Nicholas",
    "Virginia", "Eric", "Catherine", "Jonathan", "Christine", "Stephen", "Samantha", "Larry", "Debra",
    "Justin", "Janet", "Scott", "Rachel", "Brandon", "Carolyn", "Benjamin", "Emma", "Samuel", "Maria",
    "Frank", "Heather", "Gregory", "Diane", "Raymond", "Julie", "Alexander", "Joyce", "Patrick", "Evelyn",
    "Jack", "Frances", "Dennis", "Joan", "Jerry", "Christina", "Tyler", "Kelly", "Aaron", "Victoria",
)


@dataclass(frozen=True)
class Template:
    """One prompt template.

    ``text`` holds ``{A}``, ``{B}`` and ``{OP}`` (and for Figure 10 more slots); ``op`` is the
    reference word or symbol for ``{OP}``; ``op_kind`` picks the counterfactual pool.
    """

    id: str
    operation: Operation
    form: Form
    text: str
    op: str
    op_kind: OpKind
    # Extra slot name -> candidate fillers (Figure 10).
    slots: dict[str, tuple[str, ...]] = field(default_factory=dict)
    # Text between the prompt and the answer: a space, or nothing where the answer completes a
    # number ("to the year 172" -> "8").
    answer_sep: str = " "

    def __post_init__(self) -> None:
        for slot in ("{A}", "{B}", "{OP}"):
            if slot not in self.text:
                raise ValueError(
                    f"Template {self.id!r} lacks the placeholder {slot}: {self.text!r}. A template needs "
                    "{A} and {B} for the operands and {OP} for the word or symbol that carries the calculation."
                )


def _family(operation: Operation, sym: str, verb: str, noun: str, op_index: int) -> list[Template]:
    """The nine Figure 8 templates of one operation."""
    texts: list[tuple[Form, str, str, OpKind]] = [
        ("equation", "{A} {OP} {B} =", sym, "symbol"),
        ("statement", "{A} {OP} {B} equals to", verb, "word"),
        ("statement", "The {OP} of {A} and {B} is", noun, "word"),
        ("statement", "The {OP} of {A} and {B} equals to", noun, "word"),
        ("statement", "The {OP} of {A} and {B} is equal to", noun, "word"),
        ("question", "Q: How much is {A} {OP} {B}? A:", verb, "word"),
        ("question", "Q: What is {A} {OP} {B}? A:", verb, "word"),
        ("question", "Q: What is the result of {A} {OP} {B}? A:", verb, "word"),
        ("question", "Q: What is the {OP} of {A} and {B}? A:", noun if op_index != 0 else "sum", "word"),
    ]
    # Figure 8 uses "addition" in the statements and "sum" in the last question for addition.
    return [
        Template(id=f"{operation}/{i}", operation=operation, form=form, text=text, op=op, op_kind=kind)
        for i, (form, text, op, kind) in enumerate(texts)
    ]


FIGURE8: dict[Operation, list[Template]] = {
    "addition": _family("addition", "+", "plus", "addition", 0),
    "subtraction": _family("subtraction", "-", "minus", "difference", 1),
    "multiplication": _family("multiplication", "*", "times", "product", 2),
    "division": _family("division", "/", "over", "ratio", 3),
}

_TIME = {"EVENT": EVENTS, "VERB": TIME_VERBS, "YYY": CENTURY_PREFIXES, "MONTH": MONTHS}
_TIME_FUT = {"EVENT": EVENTS, "VERB": TIME_VERBS_FUTURE, "YYY": CENTURY_PREFIXES, "MONTH": MONTHS}
_ACC = {"NAME": NAMES, "NAME2": NAMES, "OBJECT": OBJECTS, "VERB": GET_VERBS}
_ACC_PAST = {"NAME": NAMES, "NAME2": NAMES, "OBJECT": OBJECTS, "VERB": GET_VERBS_PAST}

# Figure 10: the answer C = B + A follows the prompt directly ("... to the year 172" -> "8").
# {OP} is the duration unit in time spans and the second object in accumulation (see module doc).
FIGURE10: list[Template] = [
    Template("addition_extra/0", "addition", "time_span", "The {EVENT} {VERB} {A} {OP} from the year {YYY}{B} to the year {YYY}", "years", "word", _TIME, ""),
    Template("addition_extra/1", "addition", "time_span", "The {EVENT} {VERB} {A} {OP} from {YYY}{B} to {YYY}", "years", "word", _TIME, ""),
    Template("addition_extra/2", "addition", "time_span", "The {EVENT} {VERB} {A} {OP} from {MONTH} {B} to {MONTH}", "days", "word", _TIME),
    Template("addition_extra/3", "addition", "time_span", "The {EVENT} will {VERB} {A} {OP} from {MONTH} {B} to {MONTH}", "days", "word", _TIME_FUT),
    Template("addition_extra/4", "addition", "time_span", "The {EVENT} {VERB} {A} {OP} from {B} pm to", "hours", "word", _TIME),
    Template("addition_extra/5", "addition", "time_span", "The {EVENT} will {VERB} {A} {OP} from {B} pm to", "hours", "word", _TIME_FUT),
    Template("addition_extra/6", "addition", "time_span", "The {EVENT} {VERB} {A} {OP} from {B} am to", "hours", "word", _TIME),
    Template("addition_extra/7", "addition", "time_span", "The {EVENT} will {VERB} {A} {OP} from {B} am to", "hours", "word", _TIME_FUT),
    Template("addition_extra/8", "addition", "accumulation", "{NAME} has {A} {OBJECT}, then {NAME} {VERB} {B} {OP}. What's the total number of {QOBJECT} that {QNAME} has? The answer is", "", "object", _ACC),
    Template("addition_extra/9", "addition", "accumulation", "{NAME} {VERB} {A} {OBJECT}, and {NAME2} {VERB} {B} {OP}. What's the total number of {QOBJECT} that they {VERB}? The answer is", "", "object", _ACC_PAST),
    Template("addition_extra/10", "addition", "accumulation", "{NAME} has {A} {OBJECT}, and {NAME2} has {B} {OP}. What's the total number of {QOBJECT} that they have? The answer is", "", "object", _ACC),
    Template("addition_extra/11", "addition", "accumulation", "{NAME} {VERB} {A} {OBJECT} yesterday, and {NAME} {VERB} {B} {OP} today. What's the total number of {QOBJECT} that {QNAME} {VERB}? The answer is", "", "object", _ACC_PAST),
]

# Appendix D, Table 3.
EXPONENTIATION: list[Template] = [
    Template("exponentiation/0", "exponentiation", "equation", "{A} {OP} {B} =", "^", "symbol"),
    Template("exponentiation/1", "exponentiation", "statement", "{A} to the {OP} of {B} equals", "power", "word"),
]

# Few-shot examples per operation: (A, B) with a one-digit answer, rendered in the template's own form.
FEW_SHOT_OPERANDS: dict[Operation, tuple[tuple[int, int], ...]] = {
    "addition": ((1, 2), (4, 4), (5, 1)),
    "subtraction": ((5, 2), (9, 4), (7, 1)),
    "multiplication": ((2, 3), (4, 2), (1, 7)),
    "division": ((6, 2), (8, 1), (9, 3)),
    "exponentiation": ((2, 3), (3, 2), (1, 5)),
}


def templates_for(task: str) -> list[Template]:
    """Templates of a task: an operation, ``addition_extra`` (Figure 10), ``exponentiation``, ``all``, or one
    template's id (``addition/0``)."""
    if task in FIGURE8:
        return list(FIGURE8[task])  # type: ignore[index]
    if task == "addition_extra":
        return list(FIGURE10)
    if task == "exponentiation":
        return list(EXPONENTIATION)
    if task == "all":
        return [t for op in OPERATIONS for t in FIGURE8[op]]
    if "/" in task:
        one = [t for t in all_templates() if t.id == task]
        if one:
            return one
    raise ValueError(
        f"Unknown task {task!r}; accepted: {', '.join([*OPERATIONS, 'addition_extra', 'exponentiation', 'all'])} or a "
        "template id (e.g. addition/0)"
    )


def all_templates() -> list[Template]:
    return [*templates_for("all"), *FIGURE10, *EXPONENTIATION]


def compute_answer(operation: Operation, a: int, b: int) -> int | None:
    """The exact integer answer, or None when it is not a non-negative integer."""
    if operation == "addition":
        return a + b
    if operation == "subtraction":
        return a - b if a >= b else None
    if operation == "multiplication":
        return a * b
    if operation == "division":
        return a // b if b != 0 and a % b == 0 else None
    if operation == "exponentiation":
        return a**b
    raise ValueError(f"Unknown operation {operation!r}")
