"""Does choosing the circuit matter? The Precise SFT study (issue 39; Section 5.3's claims with controls and seeds).

``run(config, out)`` (``circuits sft-study``, ``experiments/sft_study.py``): from one base model, every arm of
:data:`~circuits.evaluation.study_config.ARMS` trains on the same tokenized data and steps and is scored on the same items
(:mod:`circuits.evaluation.study_items`):

1. ``precise``: Precise SFT of the key heads (the paper's; :func:`circuits.sft.train.finetune`);
2. ``random``: Precise SFT of as many heads drawn from the key heads' layer range outside the key set, one variant per
   draw (:func:`circuits.sft.arms.random_heads`);
3. ``precise_mlps``: the key heads plus the key MLPs, each MLP whole (``W_in``/``W_gate``/``W_out``);
4. ``lora``: LoRA through peft on the attention projections of every layer, at the rank whose trained count is
   nearest arm 1's (:mod:`circuits.sft.arms`: trained on the Hugging Face model, merged, loaded back);
5. ``full``: full SFT.

Each variant's lr is the one of ``config.lrs`` whose run with the first seed has the highest mean log-probability of
the validation answers; then it trains once per seed at that lr and is scored on the test items. The base model is
scored once. Training and evaluation seconds are measured apart.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import time
from pathlib import Path
from typing import Any

import torch

from circuits.config import check_model_ranges
from circuits.io import read_json, write_json
from circuits.sft import plan as hm
from circuits.sft.arms import lora_per_rank, lora_rank, merged_model, random_heads, train_lora
from circuits.sft.data import build_training_set, tokenize_examples
from circuits.evaluation.study_config import ARM_LABELS, LORA_TARGETS, StudyConfig
from circuits.evaluation.study_items import Item, score_items, study_items
from circuits.evaluation.study_result import SFTStudyResult
from circuits.types import Head


def key_components(config: StudyConfig) -> tuple[tuple[Head, ...], tuple[int, ...]]:
    """The key heads and key MLPs: as listed, else the top ``top_k`` / ``top_mlps`` of ``heads_from`` (a missing
    folder is one line, before any model loads)."""
    heads, mlps = config.key_heads, config.key_mlps
    if config.reads_heads_from():
        if not (Path(config.heads_from) / "config.json").is_file():
            raise ValueError(f"--heads-from {config.heads_from}: no identify result there; run `circuits identify "
                             "--task addition --out results/identify/addition` first, or list --key-heads and "
                             "--key-mlps")
        from circuits.sft.job import components_from

        found_heads, found_mlps = components_from(config.heads_from, config.top_k, config.top_mlps)
        heads = heads or tuple(found_heads)
        mlps = mlps or tuple(found_mlps)
    return tuple(heads), tuple(mlps)


def variants(config: StudyConfig, model: Any, heads: tuple[Head, ...], mlps: tuple[int, ...],
             per_rank: int | None) -> list[dict[str, Any]]:
    """One entry per arm (per draw for random heads): what it tunes and how many parameters that is."""
    count = lambda **kw: hm.count_tuned_parameters(model, hm.plan_tuning(model, **kw) if not kw.get("full")  # noqa: E731
                                                   else hm.full_plan(model))
    out: list[dict[str, Any]] = []
    precise_count = count(heads=heads)
    for arm in config.arms:
        base = {"arm": arm, "heads": [], "mlps": [], "draw": None, "lora_rank": None, "lr": None}
        if arm == "precise":
            out.append({**base, "name": ARM_LABELS[arm], "heads": [list(h) for h in heads],
                        "tuned_parameters": precise_count})
        elif arm == "random":
            for d in range(config.random_draws):
                drawn = random_heads(heads, model.cfg.n_heads, config.draw_seed, d)
                out.append({**base, "name": f"Precise SFT (random heads, draw {d})", "draw": d,
                            "heads": [list(h) for h in drawn], "tuned_parameters": count(heads=drawn)})
        elif arm == "precise_mlps":
            out.append({**base, "name": ARM_LABELS[arm], "heads": [list(h) for h in heads], "mlps": list(mlps),
                        "tuned_parameters": count(heads=heads, mlps=mlps)})
        elif arm == "lora":
            assert per_rank is not None
            r = lora_rank(precise_count, per_rank)
            out.append({**base, "name": ARM_LABELS[arm], "lora_rank": r, "tuned_parameters": r * per_rank,
                        "target_parameters": precise_count})
        else:
            out.append({**base, "name": ARM_LABELS[arm], "tuned_parameters": count(full=True)})
    return out


class _Trainer:
    """Trains a variant from the base weights and scores it; keeps the seconds of each part."""

    def __init__(self, config: StudyConfig, model: Any, data: dict[int, list]) -> None:
        self.config, self.model, self.data = config, model, data
        self.base = {n: p.detach().clone() for n, p in model.named_parameters()}
        self.device = next(model.parameters()).device
        self.seconds = {"train": 0.0, "eval": 0.0, "cpu_train": 0.0, "cpu_eval": 0.0}

    def restore(self) -> None:
        with torch.no_grad():
            for n, p in self.model.named_parameters():
                p.copy_(self.base[n])

    def score(self, model: Any, items: list[Item]) -> dict[str, list[float]]:
        t0, c0 = time.perf_counter(), time.process_time()
        scores = score_items(model, items, self.config.eval_batch_size)
        self.seconds["eval"] += time.perf_counter() - t0
        self.seconds["cpu_eval"] += time.process_time() - c0
        return scores

    def train(self, variant: dict[str, Any], lr: float, seed: int) -> tuple[Any, dict[str, Any]]:
        """The model trained as ``variant`` at ``lr`` with ``seed`` (the base model, trained in place, or a LoRA
        arm's merged model), and the run's training numbers."""
        self.restore()
        c0 = time.process_time()
        try:
            return self._train(variant, lr, seed)
        finally:  # (CPU seconds of the whole run: LoRA's merging and loading included)
            self.seconds["cpu_train"] += time.process_time() - c0

    def _train(self, variant: dict[str, Any], lr: float, seed: int) -> tuple[Any, dict[str, Any]]:
        from circuits.sft.train import finetune

        cfg = self.config
        if variant["arm"] == "lora":
            from circuits.models.forward import pad_token_id
            from circuits.models.sources import load_hf_reference

            run_cfg = cfg.run_config(lr=lr, seed=seed, full=True)
            peft_model, stats = train_lora(load_hf_reference(cfg.model), self.data[seed], run_cfg, variant["lora_rank"],
                                           LORA_TARGETS, pad_token_id(self.model))
            self.seconds["train"] += stats["train_seconds"]
            return merged_model(peft_model, self.model.tokenizer, cfg.train.dtype, self.device), stats
        heads = tuple(Head(*h) for h in variant["heads"])
        run_cfg = cfg.run_config(lr=lr, seed=seed, heads=heads, mlps=tuple(variant["mlps"]),
                                 full=variant["arm"] == "full")
        result = finetune(self.model, self.data[seed], run_cfg, None, progress=False)
        self.seconds["train"] += result.train_seconds
        return self.model, {"tuned_parameters": result.tuned_parameters, "losses": result.losses,
                            "train_seconds": result.train_seconds, "steps": result.steps, "samples": result.samples}


def _digest(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()[:20]


class _Runs:
    """Each finished run (trained and scored) kept in ``out/runs/`` under the hash of everything that makes it (the
    shared training config, what the variant tunes, lr, seed, and the items scored), so a stopped study resumes where
    it stopped and a changed config recomputes only the runs it changes."""

    def __init__(self, out: Path) -> None:
        self.folder = out / "runs"
        self.reused = 0

    def get(self, key: dict[str, Any], compute: Any) -> dict[str, Any]:
        path = self.folder / f"{_digest(key)}.json"
        if path.is_file():
            saved = read_json(path)
            if isinstance(saved, dict) and saved.get("key") == json.loads(json.dumps(key, default=str)):
                self.reused += 1
                return saved["value"]
        value = compute()
        write_json(path, {"key": key, "value": value})
        return value


def run(config: StudyConfig, out: str | Path, *, model: Any = None, progress: bool = True,
        share: tuple[int, int] | None = None) -> SFTStudyResult | None:
    """The study of ``config``, saved in ``out`` (see the module docstring); finished runs are kept in ``out/runs/``
    and reused by a rerun (:class:`_Runs`). With ``config.workers`` N > 1, N processes first run the variants dealt
    to them (``share=(i, N)``: variants i, i + N, ...; each writes its finished runs to ``out/runs/``, and returns
    nothing), then this process reads every run back and writes the result: the same runs, seeds and numbers as one
    process gives."""
    from circuits.sft.job import check_data

    t_start, c_start = time.perf_counter(), time.process_time()
    heads, mlps = key_components(config)
    check_data(config.train)
    if "lora" in config.arms:
        try:
            import peft  # noqa: F401
        except ImportError:
            from circuits.sft.arms import PEFT_MISSING

            raise ImportError(f"{PEFT_MISSING}; or leave lora out of --arms") from None
    if config.threads:
        torch.set_num_threads(config.threads)
    if model is None:
        from circuits.models.loading import load_model

        model = load_model(config.model, dtype=config.train.dtype)
    check_model_ranges(config, model.cfg.n_layers, model.cfg.n_heads)
    t = config.train
    examples = {s: build_training_set(t.sources, t.data_dir, t.n_arithmetic, t.limit_per_source, s)
                for s in config.seeds}
    data = {s: tokenize_examples(model.tokenizer, ex, t.max_length) for s, ex in examples.items()}
    train_prompts = {e.prompt for ex in examples.values() for e in ex}
    test, val = study_items(config.per_form, config.two_digit, config.val_per_form, train_prompts, config.mmlu,
                            config.commonsenseqa, config.shots, t.data_dir)
    per_rank = None
    if "lora" in config.arms:
        from circuits.models.sources import load_hf_reference

        per_rank = lora_per_rank(load_hf_reference(config.model), LORA_TARGETS)
    arms = variants(config, model, heads, mlps, per_rank)
    trainer = _Trainer(config, model, data)

    def say(text: str) -> None:
        if progress:
            print(f"[sft-study {time.perf_counter() - t_start:5.0f}s] {text}", flush=True)

    cache = _Runs(Path(out))
    train_key = t.to_json()
    test_key, val_key = _digest([it.context for it in test]), _digest([it.context for it in val])

    def what(v: dict[str, Any]) -> dict[str, Any]:
        return {k: v[k] for k in ("arm", "heads", "mlps", "lora_rank")}

    base = cache.get({"base": True, "train": train_key, "items": test_key}, lambda: trainer.score(model, test))
    say(f"base model scored on {len(test)} test items")
    n_workers = min(config.workers, len(arms)) if share is None else 1
    if n_workers > 1:  # the workers' training and scoring seconds count as this study's
        for seconds in _run_workers(config, Path(out), n_workers):
            for k, v in seconds.items():
                trainer.seconds[k] += v
    mine_only = arms if share is None else arms[share[0]::share[1]]
    sweep, runs = [], []
    sweep_seed = config.seeds[0]
    for v in mine_only:
        t0 = time.perf_counter()
        for lr in config.lrs:
            def sweep_run(lr: float = lr) -> dict[str, Any]:
                scored_model, stats = trainer.train(v, lr, sweep_seed)
                s = trainer.score(scored_model, val)
                return {"val_logp": sum(s["logp"]) / len(val), "val_acc": sum(s["correct"]) / len(val),
                        "final_loss": stats["losses"][-1]}

            point = cache.get({"train": train_key, "variant": what(v), "lr": lr, "seed": sweep_seed, "items": val_key},
                              sweep_run)
            sweep.append({"variant": v["name"], "lr": lr, "seed": sweep_seed, **point})
            say(f"{v['name']} lr {lr:g}: validation log-prob {point['val_logp']:.3f}, accuracy {point['val_acc']:.3f}")
        mine = [s for s in sweep if s["variant"] == v["name"]]
        v["lr"] = max(mine, key=lambda s: (s["val_logp"], -s["lr"]))["lr"]
        v["sweep_seconds"] = time.perf_counter() - t0
        for seed in config.seeds:
            def test_run(seed: int = seed) -> dict[str, Any]:
                scored_model, stats = trainer.train(v, v["lr"], seed)
                s = trainer.score(scored_model, test)
                return {**s, **{k: stats[k] for k in ("tuned_parameters", "train_seconds", "steps", "samples",
                                                      "losses")}}

            done = cache.get({"train": train_key, "variant": what(v), "lr": v["lr"], "seed": seed, "items": test_key},
                             test_run)
            runs.append({"variant": v["name"], "seed": seed, "lr": v["lr"], **done})
            say(f"{v['name']} seed {seed}: test accuracy {sum(done['correct']) / len(test):.3f}")
    trainer.restore()
    if share is not None:
        return trainer.seconds  # type: ignore[return-value]  (a worker's seconds, for the study that started it)
    total = time.perf_counter() - t_start
    seconds = trainer.seconds
    timing = {"total": total, "train": seconds["train"], "eval": seconds["eval"],
              "other": total - seconds["train"] - seconds["eval"], "sweep": sum(v["sweep_seconds"] for v in arms),
              "cpu_total": time.process_time() - c_start, "cpu_train": seconds["cpu_train"],
              "cpu_eval": seconds["cpu_eval"], "reused_runs": float(cache.reused), "workers": float(n_workers)}
    result = SFTStudyResult(config, arms, runs, sweep, [it.task for it in test], base, timing, len(val))
    result.save(out)
    return result


def _worker(config: StudyConfig, out: Path, index: int, n: int, seconds: Any) -> None:
    seconds.put(run(config, out, progress=True, share=(index, n)))


def _run_workers(config: StudyConfig, out: Path, n: int) -> list[dict[str, float]]:
    """Runs :func:`run` on ``n`` shares of the variants in ``n`` spawned processes, each with ``config.threads``
    threads or an equal share of the cores, and returns each one's training and scoring seconds (wall and CPU); one
    that fails fails the study, naming it."""
    import multiprocessing
    import os

    threads = config.threads or max(1, len(os.sched_getaffinity(0)) // n)
    cfg = config.replace(threads=threads, workers=1)
    ctx = multiprocessing.get_context("spawn")
    seconds = ctx.Queue()
    procs = [ctx.Process(target=_worker, args=(cfg, out, i, n, seconds), name=f"sft-study worker {i}", daemon=True)
             for i in range(n)]
    for p in procs:
        p.start()
    try:
        for p in procs:
            p.join()
    finally:
        for p in procs:
            if p.is_alive():
                p.terminate()
                p.join()
    failed = [p.name for p in procs if p.exitcode != 0]
    if failed:
        raise RuntimeError(f"{', '.join(failed)} of the study failed (exit codes "
                           f"{', '.join(str(p.exitcode) for p in procs if p.exitcode != 0)}); its output is above; "
                           f"finished runs are kept in {out / 'runs'} and reused by a rerun")
    return [seconds.get(timeout=60) for _ in procs]  # (a few numbers each: already in the pipe when they exited)


def printout(args: argparse.Namespace, config: StudyConfig, result: SFTStudyResult, seconds: float) -> None:
    print(result.markdown())
    print(result.time_line())
    print(f"-> {args.out}/table.md")
