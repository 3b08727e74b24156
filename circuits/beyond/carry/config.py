"""What decides a carry study (saved as its ``config.json``). Imports no torch."""

from __future__ import annotations

from dataclasses import dataclass

from circuits.identify.validity import force_option
from circuits.config import Config, count, option
from circuits.data.source import dtype_option, model_option
from circuits.types import DTYPE_NAMES, MODES

# Three solved sums before each question: with this prefix SmolLM2 writes both tokens of 40 of the 45 two-digit sums
# of the 10 x 10 grid (teacher-forced; 34 with "2 + 3 = 5\n4 + 8 = 12\n", 30-31 with two other three-sum prefixes).
PREFIX = "3 + 5 = 8\n7 + 9 = 16\n4 + 8 = 12\n"


def _prefix(text: str) -> str:
    return text.replace("\\n", "\n")


@dataclass(frozen=True)
class CarryConfig(Config):
    """The carry study: single-digit sums ``a + b = `` (a, b in 0..9) after solved examples, read at END (the first
    answer token: the carry "1" of a two-digit sum) and at END + 1 (its units digit, the first token teacher-forced).

    Measured, each with its null: (1) the top components at the two positions (heads and MLPs, exact patching of each
    against an operand counterfactual whose sum has one digit): their Jaccard index with a bootstrap interval, against
    random sets and split halves; and the circuit found at one position scored at the other (MIB's CMD, ranked on one
    half of the pairs and scored on the other), against the position's own circuit and a random one; (4) the carry
    direction (difference of means of the END residual, carry vs no carry, on half the grid, at the layer where it
    separates best there): how often adding it to a no-carry prompt (subtracting it from a carry prompt) at END flips
    the first answer token on the other half, against random directions of the same norm; (3) the top components'
    direct effect on the digits 0..9 at each position: the energy at periods 10 and 5 beyond the straight trend, END +
    1 minus END, against white noise's share (refused in one line of the result on models with post-norms); (2) the
    top neurons of each position's key MLPs classified over the grid by ``circuits heuristics``' classifier: the share
    whose rule is a range of a + b (a threshold) and the share whose rule is (a + b) mod 10, against random neurons of
    the same MLPs (:mod:`circuits.beyond.carry.neurons`).

    Writes, atomically, into ``--out``: ``summary.json`` (every measurement with its null and interval),
    ``carry.pt`` (per-pair effects at both positions, the curves, the directions' separation, the classified neurons'
    grid activations), ``pairs.jsonl``,
    ``config.json`` and ``circuits.json``.
    """

    model: str = model_option()
    dtype: str = dtype_option()
    prefix: str = option(PREFIX, parse=_prefix, help="solved examples before every question (\\n between them)")
    mode: str = option("path", choices=MODES, help="path patching (the paper's) or activation patching")
    top_k: int = count(10, help="components compared at the two positions (the top by absolute effect)")
    n_boot: int = count(1000, help="bootstrap resamples of the pairs for the intervals")
    n_splits: int = count(200, help="random halves of the pairs for the split-half reference")
    n_random: int = count(20, help="random directions of the carry direction's norm (its null)")
    neuron_mlps: int = count(2, minimum=0, per_model="mlps",
                             help="measurement 2: key MLPs at each position (the top by absolute mean effect there) "
                                  "whose neurons are classified (0: not measured)")
    neurons_per_mlp: int = count(20, help="measurement 2: top neurons of each key MLP (by their exact effect at that "
                                          "position) classified over the grid")
    null_neurons: int = count(20, help="measurement 2: random neurons of each key MLP (outside the top ones) "
                                       "classified by the same test: the null of the shares")
    direction_layer: int = option(-1, minimum=-1, maximum=10_000, per_model="layer",
                                  help="the layer whose residual the carry direction is taken from and patched into "
                                       "(-1: the one where it separates the classes best on the fit half)")
    filter_correct: bool = option(True, help="keep only the sums the model answers (both tokens, teacher-forced)")
    seed: int = option(0, minimum=0, help="seed of the counterfactual operands, the halves, the bootstrap and the "
                                          "random directions and rankings")
    memory_mb: float = option(1024, above=0, maximum=10**8, help="working-memory budget of the exact engines (MB)")
    force: bool = force_option()

    def __post_init__(self) -> None:
        if self.dtype not in DTYPE_NAMES:
            raise ValueError(f"Unknown dtype {self.dtype!r}; accepted: {', '.join(DTYPE_NAMES)}")
        if self.mode not in MODES:
            raise ValueError(f"Unknown mode {self.mode!r}; accepted: {', '.join(MODES)}")
        if self.prefix and not self.prefix.endswith("\n"):
            raise ValueError(f"--prefix {self.prefix[-20:]!r}: end it with a newline (\\n), so the question starts "
                             "its own line")
