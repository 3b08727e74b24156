"""What every figure script shares: its command line, the model, and the key heads, all from the library.

Each script in ``experiments/`` has a frozen ``Config`` (a :class:`circuits.config.Config`), ``main(config,
model=None) -> Result`` that computes and saves the figure's typed result in ``config.out``, and
``plot(result) -> Path`` that draws ``figure.html`` from it; ``--replot`` redraws from the saved result
without a model. Key heads always come from an identify result (:class:`circuits.identify.IdentifyResult`)
made exactly as ``circuits identify`` makes it and shared through ``results/identify/<task>``, so the figures,
``circuits identify`` and ``make demo`` name the same heads for the same task and seed.
"""

from __future__ import annotations

import argparse
import functools
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from circuits.threads import configure_threads, prefer_passive_waiting

prefer_passive_waiting()  # before torch is imported (docs/speed.md)

from circuits.config import Config, add_arguments, from_arguments, option  # noqa: E402
from circuits.distributed import init_from_env, is_main  # noqa: E402
from circuits.data.pairs import PromptPair, build_pairs  # noqa: E402
from circuits.identify import IdentifyConfig, IdentifyResult, run_identify  # noqa: E402
from circuits.identify.job import finished  # noqa: E402
from circuits.models import load_model  # noqa: E402
from circuits.results import Result, load_result  # noqa: E402


@functools.lru_cache(maxsize=2)
def model_for(name: str):
    """One load per model and process, shared by every script run in it."""
    return load_model(name)


@dataclass(frozen=True)
class KeyHeadConfig(Config):
    """The fields of every key-head figure: the model, and the identify run its key heads come from."""

    model: str = option("smollm2", help="smollm2 or gemma3-270m (embedded), a .gguf file, a local Hugging Face folder or an official name")
    task: str = option("addition", help="the task whose identify result gives the key heads")
    n_pairs: int = option(64, help="prompt pairs of the identify run (as circuits identify --pairs)")
    seed: int = option(0)
    prefix_policy: str = option("keep", choices=("keep", "counterfactual"))
    filter_correct: bool = option(True, help="keep only pairs the model answers correctly")
    identify_dir: str = option("results/identify", help="where identify results are shared (circuits identify --out)")

    def identify_config(self, task: str | None = None) -> IdentifyConfig:
        return IdentifyConfig(model=self.model, task=task or self.task, n_pairs=self.n_pairs, seed=self.seed,
                              prefix_policy=self.prefix_policy, filter_correct=self.filter_correct)

    def identify_folder(self, task: str | None = None) -> Path:
        name = task or self.task
        name = name if self.prefix_policy == "keep" else f"{name}-{self.prefix_policy}"
        return Path(self.identify_dir) / (name if self.seed == 0 else f"{name}-seed{self.seed}")  # seeds never share


def identify_result(config: KeyHeadConfig, task: str | None = None, model: Any = None) -> IdentifyResult:
    """The identify result of ``config`` for ``task``: read from ``config.identify_folder(task)`` when it was made
    with the same config (``circuits identify --task all --out results/identify`` writes one per operation),
    else computed and saved there."""
    icfg = config.identify_config(task)
    folder = config.identify_folder(task)
    if not finished(folder, icfg):
        run_identify(icfg, folder, model=model or model_for(config.model), progress=False)
    return IdentifyResult.load(folder)


def pairs_for(config: KeyHeadConfig, task: str, model: Any) -> list[PromptPair]:
    """The pairs of ``task``: those of its identify result when there is one, else built the same way (pair
    building is deterministic in the config, so both give the same pairs)."""
    icfg = config.identify_config(task)
    folder = config.identify_folder(task)
    if finished(folder, icfg):
        return IdentifyResult.load(folder).pairs
    return build_pairs(model, icfg.pair_config()).pairs


class Timer:
    def __init__(self) -> None:
        self.t0 = time.time()

    def __call__(self, what: str) -> None:
        print(f"[{time.time() - self.t0:6.1f}s] {what}", flush=True)


def run(config_cls: type[Config], main: Callable[..., Result], plot: Callable[[Result, Path], Path],
        argv: list[str] | None = None) -> Path:
    """The command line of a figure script: one flag per config field, plus ``--replot``."""
    parser = argparse.ArgumentParser(description=sys.modules[main.__module__].__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(parser, config_cls)
    parser.add_argument("--replot", action="store_true", help="redraw the figure from the saved result, no model")
    args = parser.parse_args(argv)
    try:
        config = from_arguments(config_cls, args)
    except ValueError as e:  # a value the config refuses: one line, exit 2, as the command line does
        parser.error(str(e))
    out = Path(config.out)  # type: ignore[attr-defined]
    # Under torchrun the sweeps and knockout curves split their work across ranks; rank 0 writes (docs/scale.md).
    launch = init_from_env()
    try:
        if not args.replot:
            configure_threads()
        result = load_result(out) if args.replot else main(config)
        path = plot(result, out) if is_main() else out
    finally:
        if launch is not None:
            launch.close()
    if is_main():
        print(path)
    return path
