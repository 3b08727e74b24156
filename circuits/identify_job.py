"""``circuits identify``: build prompt pairs, sweep every head and MLP, pick the key components.

Writes, atomically, one folder per task: ``config.json``, ``summary.json``, ``pairs.jsonl`` and
``heads.html`` (the paper's Figure 2 for that task). ``--task all`` runs the four operations one by
one (each in its own sub-folder, skipped when already finished with the same config, so an
interrupted run resumes) and then a combined sweep over pairs drawn evenly from the four, in ``all/``.
"""

from __future__ import annotations

import argparse
import json
import random
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from transformer_lens import HookedTransformer

from circuits.key_components import DEFAULT_KEY_RULE, KeyRule, rank_heads
from circuits.models import load_model
from circuits.patching import IMPORTANT_SIGN, METRIC_DOC, METRICS, SweepResult, sweep
from circuits.plotting import head_heatmap, write_html
from circuits.prompts import PairBatch, PairConfig, PairSet, PromptPair, build_pairs
from circuits.results import atomic_dir, finished_with, read_json, write_json
from circuits.templates import OPERATIONS

TASKS = (*OPERATIONS, "all", "addition_extra", "exponentiation")


@dataclass(frozen=True)
class IdentifyConfig:
    """Everything that decides an identify result (saved as ``config.json``)."""

    model: str = "smollm2"
    task: str = "addition"
    mode: str = "path"
    n_pairs: int = 64
    key_rule: str = DEFAULT_KEY_RULE
    seed: int = 0
    few_shot: str = "auto"
    prefix_policy: str = "keep"
    dtype: str = "float32"
    memory_mb: float = 1024

    def __post_init__(self) -> None:
        if self.task not in TASKS:
            raise ValueError(f"Unknown task {self.task!r}; accepted: {', '.join(TASKS)}")
        if self.mode not in ("path", "activation"):
            raise ValueError(f"Unknown mode {self.mode!r}; accepted: path, activation")
        KeyRule.parse(self.key_rule)
        PairConfig(task="addition" if self.task == "all" else self.task, n_pairs=self.n_pairs, seed=self.seed,
                   few_shot=self.few_shot, prefix_policy=self.prefix_policy)  # type: ignore[arg-type]

    def for_task(self, task: str) -> IdentifyConfig:
        return IdentifyConfig(**{**asdict(self), "task": task})


def summarize(
    model: HookedTransformer, config: IdentifyConfig, pair_set: PairSet | None, pairs: list[PromptPair],
    result: SweepResult, seconds: float,
) -> dict[str, Any]:
    """The ``summary.json`` content."""
    rule = KeyRule.parse(config.key_rule)
    metrics = {}
    for metric in METRICS:
        heads, mlps = result.effects(metric)  # type: ignore[arg-type]
        metrics[metric] = {"head_effects": heads.tolist(), "mlp_effects": mlps.tolist(),
                           "meaning": METRIC_DOC[metric], "important_sign": IMPORTANT_SIGN[metric]}
    heads, mlps = result.effects(rule.metric)  # type: ignore[arg-type]
    key_heads = [[l, h, e] for (l, h), e in rule.select(heads)]
    key_mlps = [[l, e] for (l,), e in rule.select(mlps)]
    paper_heads, paper_mlps = result.effects("relative_logit")
    b = result.baseline
    n_heads_total = heads.numel()
    stats = pair_set.stats() if pair_set is not None else {}
    return {
        "model": config.model,
        "task": config.task,
        "mode": config.mode,
        "n_pairs": len(pairs),
        "accuracy": stats.get("accuracy"),
        "mean_answer_prob": stats.get("mean_answer_prob"),
        "n_candidates": stats.get("n_candidates"),
        "counterfactual_accuracy": float((b.cf_answer == b.answer).float().mean()),
        "counterfactual_answer_prob": float(b.cf_prob.mean()),
        "few_shot": stats.get("few_shot"),
        "per_template": stats.get("per_template"),
        "baseline": {
            "answer_logit": float(b.logit.mean()),
            "counterfactual_answer_logit": float(b.cf_logit.mean()),
            "full_effect_relative_logit": float(((b.cf_logit - b.logit) / b.logit).mean()),
            "answer_prob": float(b.prob.mean()),
            "counterfactual_answer_prob": float(b.cf_prob.mean()),
            "logit_diff": float(b.logit_diff.mean()),
        },
        "metric": "relative_logit",
        "head_effects": paper_heads.tolist(),
        "mlp_effects": paper_mlps.tolist(),
        "metrics": metrics,
        "key_rule": rule.to_json(),
        "key_heads": key_heads,
        "key_mlps": key_mlps,
        "fraction_key_heads": len(key_heads) / n_heads_total,
        "ranked_heads": [list(t) for t in rank_heads(heads, rule.metric)[:20]],
        "seconds": seconds,
        "config": asdict(config),
    }


def write_result(out: Path, config: IdentifyConfig, summary: dict, pairs: list[PromptPair], result: SweepResult) -> Path:
    """Write one task's folder atomically."""
    with atomic_dir(out) as tmp:
        write_json(tmp / "summary.json", summary)
        with open(tmp / "pairs.jsonl", "w") as f:
            for p in pairs:
                f.write(json.dumps(p.to_json()) + "\n")
        torch.save({k: getattr(result, k) for k in ("head_logit", "head_logit_diff", "head_prob", "mlp_logit",
                                                      "mlp_logit_diff", "mlp_prob")} | {"baseline": asdict(result.baseline)},
                   tmp / "sweep.pt")
        rule = KeyRule.parse(config.key_rule)
        fig = head_heatmap(
            torch.tensor(summary["head_effects"]), torch.tensor(summary["mlp_effects"]),
            title=(f"{config.task}: {config.mode} patching at END on {summary['model']} ({summary['n_pairs']} pairs); "
                   f"boxed: key heads by {rule}"),
            key_heads=[(l, h) for l, h, _ in summary["key_heads"]],
        )
        write_html(fig, tmp / "heads.html")
        write_json(tmp / "config.json", asdict(config))
    return out


def identify_pairs(
    model: HookedTransformer, config: IdentifyConfig, pairs: list[PromptPair], pair_set: PairSet | None = None,
    progress: bool = True,
) -> tuple[dict, SweepResult]:
    """Sweep ``pairs`` and summarize (no files written)."""
    start = time.perf_counter()
    pad = model.tokenizer.pad_token_id if model.tokenizer.pad_token_id is not None else 0
    batch = PairBatch.from_pairs(pairs, pad, device=model.cfg.device)
    result = sweep(model, batch, config.mode, memory_mb=config.memory_mb, progress=progress)  # type: ignore[arg-type]
    return summarize(model, config, pair_set, pairs, result, time.perf_counter() - start), result


def run_identify(config: IdentifyConfig, out: str | Path, model: HookedTransformer | None = None,
                 progress: bool = True) -> dict[str, Path]:
    """Run the job; returns the folder written for each task."""
    out = Path(out)
    tasks = list(OPERATIONS) if config.task == "all" else [config.task]
    folders = {t: (out / t if config.task == "all" else out) for t in tasks}
    done: dict[str, Path] = {}
    pairs_by_task: dict[str, list[PromptPair]] = {}
    for task in tasks:
        cfg = config.for_task(task)
        folder = folders[task]
        if finished_with(folder, asdict(cfg)):
            print(f"[{task}] already done with this config: {folder} (resumed)")
            pairs_by_task[task] = [PromptPair.from_json(json.loads(line)) for line in open(folder / "pairs.jsonl")]
            done[task] = folder
            continue
        model = model or load_model(config.model, dtype=config.dtype)
        t0 = time.perf_counter()
        pair_set = build_pairs(model, PairConfig(task=task, n_pairs=cfg.n_pairs, seed=cfg.seed, few_shot=cfg.few_shot,  # type: ignore[arg-type]
                                                 prefix_policy=cfg.prefix_policy))  # type: ignore[arg-type]
        summary, result = identify_pairs(model, cfg, pair_set.pairs, pair_set, progress)
        summary["seconds"] = time.perf_counter() - t0
        done[task] = write_result(folder, cfg, summary, pair_set.pairs, result)
        pairs_by_task[task] = pair_set.pairs
        _report(task, summary, folder)
    if config.task == "all":
        # Figure 2 pools the four operations: an even draw of pairs from each.
        folder = out / "all"
        if finished_with(folder, asdict(config)):
            print(f"[all] already done with this config: {folder} (resumed)")
        else:
            model = model or load_model(config.model, dtype=config.dtype)
            rng = random.Random(config.seed)
            per = max(1, config.n_pairs // len(tasks))
            pooled = [p for t in tasks for p in rng.sample(pairs_by_task[t], min(per, len(pairs_by_task[t])))]
            t0 = time.perf_counter()
            summary, result = identify_pairs(model, config, pooled, None, progress)
            sub = [read_json(folders[t] / "summary.json") for t in tasks]
            summary["accuracy"] = sum(s["accuracy"] for s in sub) / len(sub)
            summary["mean_answer_prob"] = sum(s["mean_answer_prob"] for s in sub) / len(sub)
            summary["per_task"] = {t: {k: s[k] for k in ("accuracy", "mean_answer_prob", "counterfactual_accuracy",
                                                         "counterfactual_answer_prob", "n_pairs")} for t, s in zip(tasks, sub)}
            summary["seconds"] = time.perf_counter() - t0
            write_result(folder, config, summary, pooled, result)
            _report("all", summary, folder)
        done["all"] = folder
    return done


def _report(task: str, summary: dict, folder: Path) -> None:
    heads = ", ".join(f"{l}.{h} ({e:+.3f})" for l, h, e in summary["key_heads"][:8])
    print(f"[{task}] {summary['n_pairs']} pairs, accuracy before filtering {summary['accuracy']:.0%}, "
          f"counterfactual keeps the answer {summary['counterfactual_accuracy']:.0%}; "
          f"{len(summary['key_heads'])} key heads by {summary['key_rule']['rule']}: {heads}; "
          f"{summary['seconds']:.0f} s -> {folder / 'heads.html'}")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("identify", help="find the key heads and MLPs by patching at END (Figure 2)",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    d = IdentifyConfig()
    p.add_argument("--model", default=d.model, help="smollm2, a .gguf file, a local HF folder or an official name")
    p.add_argument("--task", default=d.task, choices=TASKS)
    p.add_argument("--mode", default=d.mode, choices=("path", "activation"))
    p.add_argument("--pairs", type=int, default=d.n_pairs, dest="n_pairs", help="prompt pairs per task")
    p.add_argument("--key-rule", default=d.key_rule,
                   help="e.g. 'fraction>=0.05' (default), the paper's 'relative_logit<-0.05', or 'top10'")
    p.add_argument("--seed", type=int, default=d.seed)
    p.add_argument("--few-shot", default=d.few_shot, choices=("auto", "on", "off"))
    p.add_argument("--prefix-policy", default=d.prefix_policy, choices=("keep", "counterfactual"),
                   help="counterfactual prompts keep the reference's few-shot prefix, or get counterfactual examples")
    p.add_argument("--dtype", default=d.dtype, choices=("float32", "bfloat16", "float16"))
    p.add_argument("--memory-mb", type=float, default=d.memory_mb, help="working-memory budget of the sweep")
    p.add_argument("--out", required=True, help="output folder")
    p.set_defaults(func=_main)


def _main(args: argparse.Namespace) -> int:
    config = IdentifyConfig(model=args.model, task=args.task, mode=args.mode, n_pairs=args.n_pairs,
                            key_rule=args.key_rule, seed=args.seed, few_shot=args.few_shot,
                            prefix_policy=args.prefix_policy, dtype=args.dtype, memory_mb=args.memory_mb)
    folders = run_identify(config, args.out)
    print("Figures:")
    for task, folder in folders.items():
        print(f"  {task}: {folder / 'heads.html'}")
    return 0
