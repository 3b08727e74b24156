"""The model and the prompt pairs of a job, declared once.

:class:`PairSpec` holds the fields every job that patches prompt pairs shares: how pairs are built
(:class:`~circuits.data.pair_config.PairConfig`: task, pairs, seed, few-shot prefix, filtering) and the model, its
dtype and the memory budget; :class:`~circuits.identify.config.IdentifyConfig` and the configs of the
jobs beyond the paper derive from it, so each field has one flag name and one help text everywhere. :class:`PairSource`
adds ``--pairs-from``: the pairs (token ids and all) of a saved identify result, so a screen, a position sweep or a
neuron sweep can run on exactly the pairs whose key heads they extend. Pairs are read from that folder's
``pairs.jsonl`` and its ``config.json`` (the model), at the data level: no identify module is imported.

This module imports neither torch nor transformer_lens (the command line builds its flags from it).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from circuits.config import option
from circuits.data.pair_config import PairConfig
from circuits.data.templates import TASKS
from circuits.types import DTYPE_NAMES, METRIC_NAMES

if TYPE_CHECKING:
    from circuits.models.backend import Model

    from circuits.data.pairs import PromptPair

# What the model did on the candidates, as an identify result's summary.json keeps it.
PAIR_STAT_FIELDS = ("n_candidates", "accuracy", "mean_answer_prob", "few_shot", "per_template")


def model_option() -> Any:
    """The ``--model`` field, declared once for every config that patches a model it loads (:class:`PairSpec`'s, and a
    study's that builds its own prompts)."""
    return option("smollm2", help="smollm2 or gemma3-270m (embedded), a .gguf file, a local Hugging Face folder or an "
                                  "official name")


def dtype_option() -> Any:
    """The ``--dtype`` field beside :func:`model_option`."""
    return option("float32", choices=DTYPE_NAMES, help="dtype the model is loaded and run in")


@dataclass(frozen=True)
class PairSpec(PairConfig):
    """The model and how its prompt pairs are built (:class:`~circuits.data.pair_config.PairConfig`'s fields): what
    every patching job shares."""

    model: str = model_option()
    dtype: str = dtype_option()
    memory_mb: float = option(1024, above=0, maximum=10**8, help="working-memory budget of the exact engines (MB)")

    # Whether the job reads logit_diff's second token from the pairs' labels (--second-logit label): the faithfulness
    # job does; the others' validity checks read "the counterfactual keeps the answer" from the baseline's second
    # token, which with a label would always be another number, so they refuse it in one line.
    reads_label: ClassVar[bool] = False

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.second_logit == "label" and not self.reads_label:
            raise ValueError("--second-logit label is read by `circuits faithfulness` only: this job's checks of "
                             "whether the counterfactual keeps the answer read the counterfactual run's top token; "
                             "give --second-logit top (the default)")
        if self.task not in TASKS:
            raise ValueError(f"Unknown task {self.task!r}; accepted: {', '.join(TASKS)}")
        if self.dtype not in DTYPE_NAMES:
            raise ValueError(f"Unknown dtype {self.dtype!r}; accepted: {', '.join(DTYPE_NAMES)}")

    def pair_config(self, task: str | None = None) -> PairConfig:
        """How :func:`~circuits.data.pairs.build_pairs` builds this job's pairs (``task``: another operation; ``all``
        builds addition's, each operation being built on its own)."""
        task = task or self.task
        values = {f.name: getattr(self, f.name) for f in fields(PairConfig)}
        return PairConfig(**{**values, "task": "addition" if task == "all" else task})


@dataclass(frozen=True)
class PairSource(PairSpec):
    """The model and the prompt pairs of a job beyond heads at END: built, or taken from ``--pairs-from``."""

    pairs_from: str = option("", help="take the first --pairs pairs of this `circuits identify` result folder (its "
                                      "exact token ids) instead of building them")

    def load_pairs(self, model: Model) -> tuple[list[PromptPair], dict[str, Any]]:
        """The pairs and what the model did on the candidates."""
        if self.pairs_from:
            from circuits.data.pairs import check_token_ids

            pairs, stats = read_saved_pairs(self.pairs_from, self.model)
            pairs = with_second_logit(pairs, self.second_logit, self.pairs_from)
            check_token_ids(pairs, model.cfg.d_vocab, Path(self.pairs_from) / "pairs.jsonl", model.cfg.n_ctx)
            if len(pairs) < self.n_pairs:
                from circuits.data.pairs import FewerPairsWarning

                warnings.warn(f"{len(pairs)} of the {self.n_pairs} pairs asked: {self.pairs_from} holds only "
                              f"{len(pairs)}; going on with them", FewerPairsWarning, stacklevel=2)
            return pairs[: self.n_pairs], stats
        from circuits.data.pairs import build_pairs

        built = build_pairs(model, self.pair_config())
        return built.pairs, built.stats()


def read_saved_pairs(folder: str | Path, model: str | None = None) -> tuple[list[PromptPair], dict[str, Any]]:
    """The pairs a saved identify result was made on and the model's statistics on them, read back with the result's
    own ``load`` (:func:`circuits.results.load_result`); ``model``: refuse a result made with another model, in one
    line."""
    from circuits.results import ResultError, load_result

    folder = Path(folder)
    if not (folder / "pairs.jsonl").is_file():
        tasks = sorted(p.parent.name for p in folder.glob("*/pairs.jsonl")) if folder.is_dir() else []
        if tasks:
            raise ValueError(f"--pairs-from {folder} holds one identify result per task ({', '.join(tasks)}); pass one "
                             f"of them, e.g. {folder / tasks[0]}")
        raise ValueError(f"--pairs-from {folder} holds no pairs.jsonl; pass the output folder of `circuits identify` "
                         "(or rerun it)")
    try:
        result = load_result(folder)
    except ResultError as err:
        raise ValueError(f"--pairs-from {folder}: {err}") from None
    made_with = getattr(result.config, "model", None)
    if model is not None and made_with is not None and made_with != model:
        raise ValueError(f"--pairs-from {folder} was made with model {made_with!r}, not {model!r}; pass --model "
                         f"{made_with} or another folder")
    stats = getattr(result, "pair_stats", None) or {}
    return list(result.pairs), dict(stats)


def with_second_logit(pairs: list[PromptPair], second_logit: str, where: str | Path) -> list[PromptPair]:
    """Saved pairs read with ``--second-logit``: ``top`` drops their labels (the counterfactual run's top token is
    the second token); ``label`` keeps them and refuses, in one line naming ``where``, pairs saved without one (built
    with ``--second-logit top`` or the operator counterfactual)."""
    from dataclasses import replace

    if second_logit == "top":
        return [p if p.counterfactual_answer_token_id < 0 else replace(p, counterfactual_answer_token_id=-1) for p in pairs]
    missing = sum(p.counterfactual_answer_token_id < 0 for p in pairs)
    if missing:
        raise ValueError(f"--pairs-from {where}: {missing} of its {len(pairs)} pairs carry no counterfactual label "
                         "(built with --second-logit top or --counterfactual operator), so --second-logit label has "
                         "no second token for them; pass --second-logit top, or pairs built with --second-logit label")
    return pairs


def check_metric(name: str) -> None:
    """A built-in metric's name, else one line saying which are accepted (a job's config names one of these; a
    custom metric is a function passed to the Python API)."""
    if name not in METRIC_NAMES:
        raise ValueError(f"Unknown metric {name!r}; accepted: {', '.join(METRIC_NAMES)}")
