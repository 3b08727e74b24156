"""Where a job's key heads come from: an identify result on disk (``--heads-from``) or an identify run made first.

The step 1b and step 2 commands (``circuits knockout``, ``transfer``, ``attention``, ``attention-views``, ``lens``)
take a :class:`~circuits.identify.config.FromIdentify` config. :func:`resolved` gives it the identify fields of the
result it names, so the saved result records the identify run its heads came from; :func:`source_result` is that
result (loaded, or made now in memory); :func:`pairs_of` the prompt pairs of any operation, built as identify builds
them (so they equal an identify result's pairs for the same config)."""

from __future__ import annotations

from pathlib import Path
from collections.abc import Callable
from typing import TypeVar

from circuits.config import check_model_ranges
from circuits.data.pairs import PromptPair, build_pairs
from circuits.identify.config import FromIdentify
from circuits.identify.result import IdentifyResult, load_identify
from circuits.models.backend import Model
from circuits.models.fingerprint import same_weights, weights_fingerprint
from circuits.models.loading import load_model
from circuits.results import Result

F = TypeVar("F", bound=FromIdentify)


class WeightsChangedWarning(UserWarning):
    """An identify result's heads taken for a model whose weights differ from those it was identified on."""

R = TypeVar("R", bound=Result)


def resolved(config: F) -> F:
    """``config`` with the identify fields of the result in ``config.heads_from`` (unchanged without one): the model,
    task, pairs, seed, key rule, ... of the run the heads come from."""
    return config.with_identify(load_identify(config.heads_from).config) if config.heads_from else config


def model_for(config: FromIdentify, model: Model | None = None) -> Model:
    """``model``, or the config's model loaded; the config's bounds that depend on the model's size (``--ks`` at most
    its heads, :func:`~circuits.config.check_model_ranges`) checked on it before any work."""
    model = model if model is not None else load_model(config.model, dtype=config.dtype)
    check_model_ranges(config, model.cfg.n_layers, model.cfg.n_heads)
    return model


def source_result(config: FromIdentify, model: Model, *, progress: bool = True) -> IdentifyResult:
    """The identify result the heads come from: the one saved in ``config.heads_from``, or made now from the config's
    identify fields (in memory, not saved)."""
    if config.heads_from:
        from circuits.data.pairs import check_token_ids

        made = load_identify(config.heads_from)
        check_token_ids(made.pairs, model.cfg.d_vocab, Path(config.heads_from) / "pairs.jsonl", model.cfg.n_ctx)
        now = weights_fingerprint(model)
        if same_weights(made.weights, now) is False:
            import warnings

            warnings.warn(f"--heads-from {config.heads_from} was identified on other weights than the model loaded now "
                          f"({config.model}: fingerprint {now}, {made.weights} there): its weights changed since "
                          "identify (fine-tuned, or another checkpoint saved under the same name), so its ranking may "
                          "not hold; run circuits identify on this model again", WeightsChangedWarning, stacklevel=2)
        return made
    import warnings

    from circuits.identify.job import identify
    from circuits.identify.validity import ValidityWarning, refuse_untrusted

    made = identify(model, config=config.identify_config(), progress=progress, warn=False, refuse=False)
    refuse_untrusted(made.validity(), config.force, "the identify run behind these key heads")
    if made.validity().lines():  # forced, or past a soft threshold only: said once, then the job goes on
        warnings.warn("the identify run behind these key heads: " + "; ".join(made.validity().lines()), ValidityWarning,
                      stacklevel=2)
    return made


def run_from_identify(config: F, out: str | Path, compute: Callable[[Model, IdentifyResult, F], R], *,
                      model: Model | None = None, progress: bool = True,
                      write: Callable[[R, str | Path], Path] | None = None) -> R:
    """A step 1b or step 2 job: ``config`` :func:`resolved`, the model (``model``, or the config's loaded), the
    identify result its heads come from (:func:`source_result`), and ``compute(model, made, config)`` saved in ``out``
    by ``write`` (default: with its figure, :func:`save`)."""
    config = resolved(config)
    model = model_for(config, model)
    result = compute(model, source_result(config, model, progress=progress), config)
    (write or save)(result, out)
    return result


def pairs_of(config: FromIdentify, task: str, model: Model, made: IdentifyResult | None = None) -> list[PromptPair]:
    """The prompt pairs of ``task``: ``made``'s when it is that task's identify result and the config asks for its
    pairs (not its own: :meth:`~circuits.identify.config.FromIdentify.own_pairs`), else built from the config's pair
    fields as identify builds them (pair building is deterministic in the config: the same pairs)."""
    if made is not None and made.config.task == task and not config.own_pairs(made.config):
        return list(made.pairs)
    return build_pairs(model, config.identify_config().for_task(task).pair_config(), progress=False).pairs


def save(result: Result, out: str | Path) -> Path:
    """``result`` and its figure (``figure.html``), in ``out``: how the step 1b and step 2 jobs save."""
    from circuits.distributed import is_main
    from circuits.viz.figures import write_figure

    folder = result.save(out)
    if is_main():
        write_figure(result.figure(), Path(out) / "figure.html")
    return folder
