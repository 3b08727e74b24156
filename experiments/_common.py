"""What every figure script shares: its command line, the model, and the key heads, all from the library.

Each script in ``experiments/`` has a frozen ``Config`` (a :class:`circuits.config.Config`), ``main(config,
model=None) -> Result`` that computes and saves the figure's typed result in ``config.out``, and
``plot(result) -> Path`` that draws ``figure.html`` from it; ``--replot`` redraws from the saved result
without a model. Key heads always come from an identify result (:class:`circuits.identify.IdentifyResult`)
made exactly as ``circuits identify`` makes it and shared through ``results/identify/<task>``, so the figures,
``circuits identify`` and ``make demo`` name the same heads for the same config; a run of another identify config
(other ``--pairs``, ``--seed``, ``--model``, ``--key-rule``, ``--mode``, ...) gets its own folder
(:meth:`KeyHeadConfig.identify_folder`) and never overwrites another's result.

A folder given as ``results/...`` (the defaults) is the repository's ``results/``, wherever a script is run from
(:func:`repo_path`); an absolute folder, or any other relative one, is taken as given.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import hashlib
import json
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from circuits._startup import private_torch_caches
from circuits.threads import configure_threads, prefer_passive_waiting

prefer_passive_waiting()  # before torch is imported (docs/speed.md)
private_torch_caches()  # torch's compile cache inside this process's temporary folder, not left in $TMPDIR

from circuits.config import Config, add_arguments, from_arguments, option  # noqa: E402
from circuits.distributed import init_from_env, is_main  # noqa: E402
from circuits.data.pairs import PromptPair, build_pairs  # noqa: E402
from circuits.data.templates import OPERATIONS  # noqa: E402
from circuits.identify import job as identify_job  # noqa: E402
from circuits.identify.config import IdentifyConfig  # noqa: E402
from circuits.identify.job import finished  # noqa: E402
from circuits.identify.result import IdentifyResult  # noqa: E402
from circuits.models import load_model  # noqa: E402
from circuits.results import Result, load_result  # noqa: E402


REPO = Path(__file__).resolve().parents[1]  # the checkout these scripts belong to


def repo_path(path: str | Path) -> Path:
    """Where a script's folder is: ``results/...`` (the defaults) under the repository's ``results/``, so a script run
    from another folder neither writes there nor meets another run's files there; any other path as given (a relative
    one from the current folder)."""
    p = Path(path)
    return REPO / p if not p.is_absolute() and p.parts[:1] == ("results",) else p


@functools.lru_cache(maxsize=2)
def model_for(name: str, dtype: str = "float32"):
    """One load per model (and dtype) and process, shared by every script run in it."""
    return load_model(name, dtype=dtype)


@dataclass(frozen=True)
class KeyHeadConfig(IdentifyConfig):
    """The fields of every key-head figure: the identify run its key heads come from (every field of
    :class:`~circuits.identify.config.IdentifyConfig`, with the same flags: ``--model``, ``--task``, ``--pairs``,
    ``--seed``, ``--key-rule``, ``--mode``, ...), and where identify results are shared."""

    identify_dir: str = option("results/identify", help="where identify results are shared (circuits identify --out; "
                                                        "results/...: the repository's, from any folder)")

    def identify_config(self, task: str | None = None) -> IdentifyConfig:
        """The identify run of ``task`` (default: this config's): this config's identify fields, less ``receivers``
        (the figures need no edges inside the identify result; ``fig_circuit.py`` measures its own)."""
        fields = {f.name: getattr(self, f.name) for f in dataclasses.fields(IdentifyConfig)}
        return IdentifyConfig(**{**fields, "task": task or self.task, "receivers": ""})

    def identify_folder(self, task: str | None = None) -> Path:
        """Where the identify result of ``task`` is (or goes), keyed by the whole identify config.

        ``<identify_dir>/<task>`` (``-counterfactual``, ``-seed<N>`` added for those), as ``circuits identify --task
        all --out <identify_dir>`` writes it, unless that folder holds a result of another config (other pairs, seed,
        model, key rule, mode, ...): then ``<task>-<hash>``, ``<hash>`` the first 8 hex digits of the SHA-256 of the
        identify config's JSON. A result is never overwritten by a run of another config. For ``all`` (the four
        operations and their pooled result, as one container) it is ``<container>/all``."""
        icfg = self.identify_config(task)
        root = repo_path(self.identify_dir)
        name = icfg.task if icfg.prefix_policy == "keep" else f"{icfg.task}-{icfg.prefix_policy}"
        name = name if icfg.seed == 0 else f"{name}-seed{icfg.seed}"  # seeds never share
        if icfg.task == "all":
            plain = root if name == "all" else root / name
            folders = {**{op: plain / op for op in OPERATIONS}, "all": plain / "all"}
            if all(holds_or_free(folders[t], icfg.for_task(t)) for t in folders):
                return plain / "all"
            return root / f"{name}-{config_hash(icfg)}" / "all"
        plain = root / name
        return plain if holds_or_free(plain, icfg) else root / f"{name}-{config_hash(icfg)}"


def config_hash(config: Config) -> str:
    """8 hex digits that name ``config`` (the SHA-256 of its JSON, keys sorted)."""
    return hashlib.sha256(json.dumps(config.to_json(), sort_keys=True).encode()).hexdigest()[:8]


def holds_or_free(folder: Path, config: IdentifyConfig) -> bool:
    """Whether ``folder`` holds the finished identify result of ``config``, or no config at all (free to write)."""
    return finished(folder, config) or not (folder / "config.json").is_file()


def identify_result(config: KeyHeadConfig, task: str | None = None, model: Any = None) -> IdentifyResult:
    """The identify result of ``config`` for ``task``: read from ``config.identify_folder(task)`` when it was made
    with the same config (``circuits identify --task all --out results/identify`` writes one per operation),
    else computed and saved there (``all``: the four operations and the pooled result, in one container)."""
    icfg = config.identify_config(task)
    folder = config.identify_folder(task)
    if not finished(folder, icfg):
        identify_job.run(icfg, folder.parent if icfg.task == "all" else folder,
                         model=model or model_for(config.model, config.dtype), progress=False)
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
    # identify's --receivers only where the script declares its own (fig_circuit.py): elsewhere it would do nothing
    own = "receivers" in config_cls.__dict__.get("__annotations__", {})
    skip = () if own or not issubclass(config_cls, KeyHeadConfig) else ("receivers",)
    # a command's --heads-from (circuits edges): a script takes its key heads from its shared identify results instead
    skip += ("heads_from",) if "heads_from" in {f.name for f in dataclasses.fields(config_cls)} else ()
    add_arguments(parser, config_cls, skip=skip)
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
