"""Shared plumbing for the figure scripts: command-line parsing of a config dataclass, saving
``results/<name>/{config.json, data.json}``, and the key-head sweep (cached per model, task, size
and seed in ``results/_effects/``, so later figures reuse Figure 2's sweep)."""

from __future__ import annotations

import argparse
import dataclasses
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import torch

from circuits.models import load_model
from circuits.patching import sweep
from circuits.prompts import PairBatch, PairConfig, PromptPair, build_pairs
from circuits.results import atomic_dir, write_json

RESULTS = Path("results")


def parse_config(config_cls: type, argv: list[str] | None = None) -> tuple[Any, argparse.Namespace]:
    """A config from the command line: one ``--field`` per dataclass field, plus ``--replot``."""
    parser = argparse.ArgumentParser(description=config_cls.__doc__)
    for f in dataclasses.fields(config_cls):
        default = f.default
        flag = "--" + f.name.replace("_", "-")
        if isinstance(default, bool):
            parser.add_argument(flag, type=lambda s: s.lower() in ("1", "true", "yes"), default=default)
        elif isinstance(default, tuple):
            parser.add_argument(flag, type=str, default=",".join(map(str, default)), help="comma-separated")
        else:
            parser.add_argument(flag, type=type(default) if default is not None else str, default=default)
    parser.add_argument("--replot", action="store_true", help="redraw the figure from saved data, no model")
    args = parser.parse_args(argv)
    values = {}
    for f in dataclasses.fields(config_cls):
        v = getattr(args, f.name)
        if isinstance(f.default, tuple):
            kind = type(f.default[0]) if f.default else str
            v = tuple(kind(x) for x in str(v).split(",") if x != "")
        values[f.name] = v
    return config_cls(**values), args


def run(config_cls: type, main: Callable, plot: Callable, argv: list[str] | None = None) -> None:
    config, args = parse_config(config_cls, argv)
    if args.replot:
        print(plot(Path(config.out)))
    else:
        main(config)


def save(out: str | Path, config: Any, data: dict, files: dict[str, str] | None = None) -> Path:
    """Replace ``out`` atomically with ``config.json``, ``data.json`` and ``files`` (name -> text): an
    interrupted run leaves the previous result, never a half-written one."""
    with atomic_dir(out) as tmp:
        write_json(tmp / "data.json", data)
        for name, text in (files or {}).items():
            (tmp / name).write_text(text, encoding="utf-8")
        write_json(tmp / "config.json", dataclasses.asdict(config))
    return Path(out)


def load(out: str | Path) -> dict:
    return json.loads((Path(out) / "data.json").read_text())


class Timer:
    def __init__(self) -> None:
        self.t0 = time.time()

    def __call__(self, what: str) -> None:
        print(f"[{time.time() - self.t0:6.1f}s] {what}", flush=True)


@dataclass(frozen=True)
class KeyHeadConfig:
    """The fields every key-head figure shares: the model, and the task, pairs and seed its key heads come from."""

    model: str = "smollm2"
    task: str = "addition"  # where the key heads are found
    n_pairs: int = 32
    seed: int = 0


def key_heads_for(config: Any, top: int | None = None, task: str | None = None, tag: str = "", **pair_kw: Any):
    """Model, pair set, path-patching effects (cached) and the ``top`` key heads for ``config``'s task."""
    task = task or config.task
    model, ps = model_and_pairs(config.model, task, config.n_pairs, config.seed, **pair_kw)
    eff = head_effects(model, config.model, task, ps.pairs, config.seed, tag=tag)
    return model, ps, eff, key_heads(eff, top=top)


def model_and_pairs(model_name: str, task: str, n_pairs: int, seed: int, **kw: Any):
    model = load_model(model_name)
    pairset = build_pairs(model, PairConfig(task=task, n_pairs=n_pairs, seed=seed, **kw))
    return model, pairset


def pad_id(model) -> int:
    t = model.tokenizer
    return t.pad_token_id if t is not None and t.pad_token_id is not None else 0


def head_effects(model, model_name: str, task: str, pairs: list[PromptPair], seed: int, tag: str = "") -> dict:
    """Path-patching effects (relative logit, the paper's metric) of every head and MLP, cached on disk."""
    key = f"{Path(model_name).name}-{task}-{len(pairs)}-{seed}{tag}"
    path = RESULTS / "_effects" / f"{key}.json"
    if path.exists():
        return json.loads(path.read_text())
    batch = PairBatch.from_pairs(pairs, pad_id(model), device=model.cfg.device)
    res = sweep(model, batch, "path", progress=False)
    heads, mlps = res.effects("relative_logit")
    frac_h, frac_m = res.effects("fraction")
    b = res.baseline
    data = {
        "task": task, "n_pairs": len(pairs),
        "head_effects": heads.tolist(), "mlp_effects": mlps.tolist(),
        "head_fraction": frac_h.tolist(), "mlp_fraction": frac_m.tolist(),
        "full_effect": float(((b.cf_logit - b.logit) / b.logit).mean()),
    }
    write_json(path, data)
    return data


def key_heads(effects: dict, top: int | None = None, threshold: float | None = None) -> list[tuple[int, int]]:
    """Heads by effect, most negative first; ``threshold`` (e.g. -0.05) keeps those below it, ``top`` the first ``top``."""
    h = torch.tensor(effects["head_effects"])
    H = h.shape[1]
    order = torch.argsort(h.flatten(), stable=True)
    heads = [(int(i) // H, int(i) % H) for i in order]
    if threshold is not None:
        heads = [x for x in heads if h[x] < threshold]
    return heads[:top] if top is not None else heads
