"""The knockout job (Figure 3, ``circuits knockout``): accuracy and answer probability after mean-ablating the first k
heads of an identify result's ranking, against k random heads (several seeds).

:func:`knockout_result` computes the result from an identify result (``experiments/fig3_knockout.py`` calls it on
its shared identify result); :func:`run` is the job's entry point: it takes the identify result from
``--heads-from`` (or makes it), computes, and saves into ``out``. The mechanism is
:func:`circuits.validate.knockout.knockout_curve`."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from circuits.data.pairs import PromptPair

from circuits.identify.result import IdentifyResult
from circuits.identify.source import model_for, resolved, save, source_result
from circuits.models.backend import Model
from circuits.validate.config import KnockoutConfig
from circuits.validate.knockout import KnockoutResult, knockout_curve


def knockout_result(model: Model, made: IdentifyResult, config: KnockoutConfig,
                    pairs: Sequence[PromptPair] | None = None) -> KnockoutResult:
    """Figure 3 on ``pairs`` (default: ``made``'s): ``made``'s ranking by its key rule's metric knocked out k heads at
    a time (``config.ks`` no longer than the ranking), against random orders (``config.seeds``)."""
    pairs = list(made.pairs if pairs is None else pairs)
    ranking = [h for h, _ in made.ranked(made.key_rule.metric)]
    curve = knockout_curve(model, pairs, ranking, [k for k in config.ks if k <= len(ranking)], config.seeds)
    return KnockoutResult(config, curve, config.task, len(pairs))


def run(config: KnockoutConfig, out: str | Path, *, model: Model | None = None,
        progress: bool = True) -> KnockoutResult:
    """The ``circuits knockout`` job: Figure 3 saved in ``out`` (``data.json``, ``figure.html``)."""
    config = resolved(config)
    model = model_for(config, model)
    result = knockout_result(model, source_result(config, model, progress=progress), config)
    save(result, out)
    return result
