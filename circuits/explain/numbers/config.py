"""What decides ``circuits numbers`` (saved as its ``config.json``). Imports no torch."""

from __future__ import annotations

from dataclasses import dataclass

from circuits.config import count, option
from circuits.data.pair_config import WHOLE_ANSWER, answer_position
from circuits.identify.config import FromIdentify
from circuits.types import DEFAULT_METRIC, METRIC_NAMES


@dataclass(frozen=True)
class NumbersConfig(FromIdentify):
    """The identify run whose key heads and MLPs are read (``heads_from``, or run first), how many of each, the number
    line, and the two-digit problems of the digit-position part.

    How the key heads and MLPs compute the answer's number (issue 32). Their direct effect at END
    on every single-token number's logit, decomposed into Fourier components over the number line (Zhou et al. 2024:
    energy share by period, the dominant periods); and, on addition, the model's accuracy on two-digit sums and, where
    it handles them, which neurons of the key MLPs move the answer's units digit and which its tens digit, by patching
    one operand digit at a time (Baeumel et al. 2025).

    Writes, atomically, into ``--out``: ``summary.json`` (shares by period per component, dominant periods, heads vs MLPs,
    two-digit accuracy, each neuron's label and score), ``numbers.pt`` (direct effects per pair, energies, digit effects
    per problem), ``figure.html`` (number line and spectrum), ``digits.html`` (the digit map, where neurons were
    labelled), ``config.json`` and ``circuits.json``.

    ``--answer-position k`` (identify's flag, or the ``--heads-from`` result's): the identify pairs are read at the
    answer's token ``k`` (teacher-forced, :func:`circuits.data.answers.at_answer_position`), so the key components,
    their direct effects and the neurons' ranking are those at END + k; the two-digit problems read both answer digits
    whatever it is. ``whole`` is refused: the Fourier view reads one answer token.
    """

    n_heads: int = count(8, minimum=0, per_model="heads", help="key heads read through the Fourier view (the identify result's top heads; "
                                                "0: none)")
    n_mlps: int = count(4, minimum=0, per_model="mlps", help="key MLPs read through the Fourier view (the identify result's top MLPs; "
                                              "0: none)")
    numbers: int = count(0, minimum=0, help="length of the number line 0..n-1 (0: every number that is one token; 10 on "
                                  "SmolLM2 and Gemma 3, which write numbers digit by digit)")
    digits: bool = option(True, help="measure two-digit addition and, where the model handles it, label the key "
                                     "MLPs' top neurons by the answer digit they move")
    n_problems: int = count(64, help="two-digit addition problems (A + B = with a two-digit sum)")
    digit_floor: float = option(0.8, minimum=0, maximum=1, help="the accuracy on those problems below which no neuron is labelled "
                                          "(a model that cannot add them has no digit circuit to read; 0: always)")
    digit_mlps: int = count(2, per_model="mlps", help="key MLPs whose neurons are labelled")
    top_neurons: int = count(16, help="neurons per key MLP, the top by exact END effect on the identify pairs")
    metric: str = option(DEFAULT_METRIC, choices=METRIC_NAMES, help="what ranks the neurons (patched as --mode says)")

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.n_heads + self.n_mlps == 0:
            raise ValueError("n_heads and n_mlps are both 0: the Fourier view has no component to read")
        if answer_position(self.answer_position) == WHOLE_ANSWER:
            raise ValueError("--answer-position whole: circuits numbers reads one answer token (the direct effects at "
                             "END + k); accepted: 0, 1, ... (with --heads-from, an identify result made at one answer "
                             "position)")
        if self.numbers != 0 and self.numbers < 2:
            raise ValueError(f"numbers must be 0 (every single-token number) or at least 2, got {self.numbers}")
