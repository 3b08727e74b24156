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

Training and evaluation are kept apart in ``out/runs/`` (:class:`_Runs`): a training run under the digest of what
makes it (the shared training config, what the variant tunes, lr, seed: nothing of the evaluation), with its numbers
(``train-<digest>.json``) and, per ``--save-weights``, what it trained (``train-<digest>.pt``: the delta of the
trained slices, :mod:`circuits.sft.delta`, or LoRA's adapters); an evaluation under the digest of (that training
digest, one group of items and how they are scored). A rerun with a new evaluation (more tasks, more items) scores
only the groups it lacks, on each run's saved weights put back onto the base model: nothing trains again, and the
groups it has are read back, their numbers unchanged. A run without saved weights (full SFT under ``tuned``) trains
again when it has something new to score.
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
from circuits.io import load_torch, read_json, save_torch, write_json
from circuits.sft import plan as hm
from circuits.sft.arms import lora_per_rank, lora_rank, merged_model, random_heads, train_lora, wrap_lora
from circuits.sft.data import build_training_set, tokenize_examples
from circuits.evaluation.study_config import ARM_LABELS, LORA_TARGETS, StudyConfig
from circuits.evaluation.study_items import Item, eval_tasks, general_items, score_items, study_items, words
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


LORA_FORMAT = "circuits-sft-study-lora-1"  # a LoRA run's saved adapters (train-<digest>.pt)


class _Trainer:
    """Trains a variant from the base weights and scores it; keeps the seconds of each part, and saves and puts back
    what a run trained (:meth:`save`, :meth:`load`)."""

    def __init__(self, config: StudyConfig, model: Any, data: dict[int, list]) -> None:
        self.config, self.model, self.data = config, model, data
        self.base = {n: p.detach().clone() for n, p in model.named_parameters()}
        self.device = next(model.parameters()).device
        self.seconds = {"train": 0.0, "eval": 0.0, "cpu_train": 0.0, "cpu_eval": 0.0}
        self.adapters: dict[str, torch.Tensor] | None = None  # the last LoRA run's trained adapters
        self.trained, self.loaded = 0, 0  # runs trained, runs put back from their saved weights

    def restore(self) -> None:
        with torch.no_grad():
            for n, p in self.model.named_parameters():
                p.copy_(self.base[n])

    def score(self, model: Any, items: list[Item]) -> dict[str, list[float]]:
        t0, c0 = time.perf_counter(), time.process_time()
        scores = score_items(model, items, self.config.eval_batch_size, self.config.max_gen_toks)
        self.seconds["eval"] += time.perf_counter() - t0
        self.seconds["cpu_eval"] += time.process_time() - c0
        return scores

    def _run_config(self, variant: dict[str, Any], lr: float, seed: int) -> Any:
        return self.config.run_config(lr=lr, seed=seed, heads=tuple(Head(*h) for h in variant["heads"]),
                                      mlps=tuple(variant["mlps"]), full=variant["arm"] == "full")

    def save(self, variant: dict[str, Any], model: Any, lr: float, seed: int, path: Path) -> None:
        """What the run just trained, into ``path``: LoRA's adapters (fp32, as trained), else the delta of the slices
        its plan tunes (:func:`circuits.sft.delta.extract_delta`: their values in fp32; full SFT: every tuned
        tensor)."""
        meta = {"model": self.config.model, "dtype": self.config.train.dtype, "variant": variant["name"], "lr": lr,
                "seed": seed}
        if variant["arm"] == "lora":
            assert self.adapters is not None
            save_torch({"format": LORA_FORMAT, "rank": variant["lora_rank"], "targets": list(LORA_TARGETS),
                        "tensors": self.adapters, "meta": meta}, path)
            return
        from circuits.sft.delta import extract_delta
        from circuits.sft.train import plan_for

        save_torch(extract_delta(model, plan_for(model, self._run_config(variant, lr, seed)), meta), path)

    def load(self, variant: dict[str, Any], path: Path) -> Any:
        """The model a run trained, from what :meth:`save` wrote: the delta put onto the base weights, or LoRA's
        adapters put into a fresh peft model of the base and merged. A truncated, foreign or mismatched file is one
        error naming it (:func:`circuits.io.load_torch`)."""
        again = "; delete it to train that run again"
        try:
            if variant["arm"] != "lora":
                from circuits.sft.delta import apply_delta, read_delta

                delta = read_delta(path, self.config.model)
                self.restore()
                return apply_delta(self.model, delta)
            saved = load_torch(path, "LoRA adapters")
            if not isinstance(saved, dict) or saved.get("format") != LORA_FORMAT or not isinstance(
                    saved.get("tensors"), dict) or saved.get("rank") != variant["lora_rank"]:
                raise ValueError(f"{path} is not the saved LoRA adapters of rank {variant['lora_rank']} (format "
                                 f"{saved.get('format') if isinstance(saved, dict) else type(saved).__name__!r})")
            return self._merged_lora(saved, path)
        except ValueError as err:
            raise ValueError(f"{err}{again}") from None

    def _merged_lora(self, saved: dict[str, Any], path: Path) -> Any:
        from peft import get_peft_model_state_dict, set_peft_model_state_dict

        from circuits.models.sources import load_hf_reference

        wrapped = wrap_lora(load_hf_reference(self.config.model), saved["rank"], tuple(saved["targets"]), 0)
        want = get_peft_model_state_dict(wrapped)
        tensors = saved["tensors"]
        bad = sorted(set(want) ^ set(tensors)) or [k for k in want if tensors[k].shape != want[k].shape]
        if bad:
            raise ValueError(f"{path}: the adapters do not fit this model ({bad[0]}); it was saved for another one")
        set_peft_model_state_dict(wrapped, tensors)
        return merged_model(wrapped, self.model.tokenizer, self.config.train.dtype, self.device)

    def train(self, variant: dict[str, Any], lr: float, seed: int) -> tuple[Any, dict[str, Any]]:
        """The model trained as ``variant`` at ``lr`` with ``seed`` (the base model, trained in place, or a LoRA
        arm's merged model), and the run's training numbers."""
        self.restore()
        self.trained += 1
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
            from peft import get_peft_model_state_dict

            self.adapters = {k: v.detach().clone().cpu() for k, v in get_peft_model_state_dict(peft_model).items()}
            return merged_model(peft_model, self.model.tokenizer, cfg.train.dtype, self.device), stats
        result = finetune(self.model, self.data[seed], self._run_config(variant, lr, seed), None, progress=False)
        self.seconds["train"] += result.train_seconds
        return self.model, {"tuned_parameters": result.tuned_parameters, "losses": result.losses,
                            "train_seconds": result.train_seconds, "steps": result.steps, "samples": result.samples}


def _digest(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()[:20]


def _group(item: Item) -> str:
    """The group an item is evaluated and kept in: its task, the held-out arithmetic forms together."""
    return item.task.split(":")[0]


class _Runs:
    """``out/runs/``: each training run under the digest of what makes it (:func:`train_key`: the shared training
    config, what the variant tunes, lr, seed), its numbers in ``train-<d>.json`` and what it trained in
    ``train-<d>.pt`` (per ``--save-weights``); each evaluation of a run on a group of items in ``eval-<d>.json`` under
    the digest of (the run's training digest, the group's items and how they are scored). A stopped study resumes
    where it stopped; a changed evaluation scores only what it adds, on the saved weights."""

    def __init__(self, out: Path, save_weights: str = "tuned") -> None:
        self.folder = out / "runs"
        self.save_weights = save_weights
        self.reused = 0  # evaluations (a run on one split) read back whole

    @staticmethod
    def _read(path: Path, key: dict[str, Any]) -> Any:
        if path.is_file():
            saved = read_json(path)
            if isinstance(saved, dict) and saved.get("key") == json.loads(json.dumps(key, default=str)):
                return saved["value"]
        return None

    def stats(self, key: dict[str, Any]) -> dict[str, Any] | None:
        return self._read(self.folder / f"train-{_digest(key)}.json", key)

    def put_stats(self, key: dict[str, Any], stats: dict[str, Any]) -> None:
        write_json(self.folder / f"train-{_digest(key)}.json", {"key": key, "value": stats})

    def weights(self, key: dict[str, Any]) -> Path:
        return self.folder / f"train-{_digest(key)}.pt"

    def keeps(self, variant: dict[str, Any]) -> bool:
        """Whether a run of ``variant`` saves what it trained."""
        return self.save_weights == "all" or (self.save_weights == "tuned" and variant["arm"] != "full")

    def evaluation(self, key: dict[str, Any]) -> dict[str, list[float]] | None:
        return self._read(self.folder / f"eval-{_digest(key)}.json", key)

    def put_evaluation(self, key: dict[str, Any], scores: dict[str, list[float]]) -> None:
        write_json(self.folder / f"eval-{_digest(key)}.json", {"key": key, "value": scores})


def run(config: StudyConfig, out: str | Path, *, model: Any = None, progress: bool = True,
        share: tuple[int, int] | None = None) -> SFTStudyResult | None:
    """The study of ``config``, saved in ``out`` (see the module docstring); finished runs are kept in ``out/runs/``
    and reused by a rerun (:class:`_Runs`). With ``config.workers`` N > 1, N processes first run the variants dealt
    to them (``share=(i, N)``: variants i, i + N, ...; each writes its finished runs to ``out/runs/``, and returns
    nothing), then this process reads every run back and writes the result: the same runs, seeds and numbers as one
    process gives."""
    from circuits.evaluation.config import EvalConfig
    from circuits.evaluation.tasks import check_data as check_eval_data
    from circuits.sft.job import check_data

    t_start, c_start = time.perf_counter(), time.process_time()
    heads, mlps = key_components(config)
    check_data(config.train)
    scored = eval_tasks(config.mmlu, config.commonsenseqa, config.perplexity, config.word_problems, config.word_tasks)
    if scored:  # every benchmark file the evaluation reads is there, before any model loads
        check_eval_data(EvalConfig(tasks=scored, data_dir=config.train.data_dir,
                                   math_shots=config.math_shots if config.word_problems else 0))
    # the word problems and perplexity documents (a count past what a benchmark holds: one line, before any model)
    general = general_items(config.perplexity, config.word_problems, config.word_tasks, config.math_shots,
                            config.train.data_dir)
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
                            config.commonsenseqa, config.shots, t.data_dir, general=general)
    per_rank = None
    if "lora" in config.arms:
        from circuits.models.sources import load_hf_reference

        per_rank = lora_per_rank(load_hf_reference(config.model), LORA_TARGETS)
    arms = variants(config, model, heads, mlps, per_rank)
    trainer = _Trainer(config, model, data)

    def say(text: str) -> None:
        if progress:
            print(f"[sft-study {time.perf_counter() - t_start:5.0f}s] {text}", flush=True)

    cache = _Runs(Path(out), config.save_weights)
    train_key = t.to_json()
    current: list[Any] = [None, None]  # the training digest whose model is in memory, and that model

    def what(v: dict[str, Any]) -> dict[str, Any]:
        return {k: v[k] for k in ("arm", "heads", "mlps", "lora_rank")}

    def group_keys(items: list[Item]) -> dict[str, dict[str, Any]]:
        """Per group of ``items``: its items and how they are scored (the evaluation half of an evaluation's key)."""
        groups: dict[str, list[Item]] = {}
        for it in items:
            groups.setdefault(_group(it), []).append(it)
        return {g: {"items": _digest([[it.task, it.context, list(it.choices), it.answer, it.kind] for it in part]),
                    **({"max_gen_toks": config.max_gen_toks} if any(it.kind == "generate" for it in part) else {})}
                for g, part in groups.items()}

    def model_for(v: dict[str, Any] | None, lr: float, seed: int, key: dict[str, Any],
                  stats: dict[str, Any] | None) -> tuple[Any, dict[str, Any] | None]:
        """The model of the training run ``key`` (``v`` None: the base model): in memory already, put back from its
        saved weights, or trained (saving its weights and numbers)."""
        digest = _digest(key)
        if current[0] == digest:
            return current[1], stats
        if v is None:
            trainer.restore()
            trained = model
        elif stats is not None and cache.weights(key).is_file():
            t0 = time.perf_counter()
            trained = trainer.load(v, cache.weights(key))
            trainer.loaded += 1
            say(f"{v['name']} lr {lr:g} seed {seed}: put back from {cache.weights(key).name} "
                f"({time.perf_counter() - t0:.1f} s)")
        else:
            trained, stats = trainer.train(v, lr, seed)
            if cache.keeps(v):
                trainer.save(v, trained, lr, seed, cache.weights(key))
                # scored as a resumed study scores it: put back from what was saved (base + saved delta is the
                # trained model to float rounding, not bit for bit; a kill between this run's save and its scores
                # gave a rerun other per-item log-probabilities, found by make test-kill at write step 8 of 33)
                trained = trainer.load(v, cache.weights(key))
            cache.put_stats(key, stats)
        current[:] = [digest, trained]
        return trained, stats

    def evaluated(v: dict[str, Any] | None, lr: float, seed: int,
                  items: list[Item]) -> tuple[dict[str, list[float]], dict[str, Any] | None]:
        """Per-item scores of training run (``v``, ``lr``, ``seed``) on ``items`` (groups already scored read back;
        the others scored in one pass) and the run's training numbers."""
        key = {"base": True, "train": train_key} if v is None else \
            {"train": train_key, "variant": what(v), "lr": lr, "seed": seed}
        groups = group_keys(items)
        ekeys = {g: {"trained": _digest(key), **gk} for g, gk in groups.items()}
        got = {g: cache.evaluation(k) for g, k in ekeys.items()}
        stats = None if v is None else cache.stats(key)
        missing = [g for g, s in got.items() if s is None]
        if missing or (v is not None and stats is None):
            scored_model, stats = model_for(v, lr, seed, key, stats)
            for g in missing:  # one pass per group: its batches are the same whichever other groups are missing
                # (a rerun that scored only the group a kill left unscored gave other log-probabilities, at float
                # rounding, than the straight run that scored both groups in one pass: make test-kill, step 8 of 33)
                got[g] = trainer.score(scored_model, [it for it in items if _group(it) == g])
                cache.put_evaluation(ekeys[g], got[g])
        else:
            cache.reused += 1
        seen = {g: 0 for g in groups}
        out: dict[str, list[float]] = {"correct": [], "logp": []}
        for it in items:
            g = _group(it)
            for name in out:
                out[name].append(got[g][name][seen[g]])
            seen[g] += 1
        return out, stats

    base, _ = evaluated(None, 0.0, 0, test)
    say(f"base model scored on {len(test)} test items")
    n_workers = min(config.workers, len(arms)) if share is None else 1
    if n_workers > 1:  # the workers' training and scoring seconds count as this study's
        for seconds in _run_workers(config, Path(out), n_workers):
            for k, v in seconds.items():
                trainer.seconds[k] = trainer.seconds.get(k, 0.0) + v
    mine_only = arms if share is None else arms[share[0]::share[1]]
    sweep, runs = [], []
    sweep_seed = config.seeds[0]
    accuracy_items = [k for k, it in enumerate(test) if it.kind != "text"]
    for v in mine_only:
        t0 = time.perf_counter()
        for lr in config.lrs:
            s, stats = evaluated(v, lr, sweep_seed, val)
            assert stats is not None
            point = {"val_logp": sum(s["logp"]) / len(val), "val_acc": sum(s["correct"]) / len(val),
                     "final_loss": stats["losses"][-1]}
            sweep.append({"variant": v["name"], "lr": lr, "seed": sweep_seed, **point})
            say(f"{v['name']} lr {lr:g}: validation log-prob {point['val_logp']:.3f}, accuracy {point['val_acc']:.3f}")
        mine = [s for s in sweep if s["variant"] == v["name"]]
        v["lr"] = max(mine, key=lambda s: (s["val_logp"], -s["lr"]))["lr"]
        v["sweep_seconds"] = time.perf_counter() - t0
        for seed in config.seeds:
            s, stats = evaluated(v, v["lr"], seed, test)
            assert stats is not None
            done = {**s, **{k: stats[k] for k in ("tuned_parameters", "train_seconds", "steps", "samples", "losses")}}
            runs.append({"variant": v["name"], "seed": seed, "lr": v["lr"], **done})
            say(f"{v['name']} seed {seed}: test accuracy "
                f"{sum(done['correct'][k] for k in accuracy_items) / max(len(accuracy_items), 1):.3f}")
    trainer.restore()
    if share is not None:  # a worker's seconds and counts, for the study that started it
        return {**trainer.seconds, "trained_runs": float(trainer.trained),  # type: ignore[return-value]
                "loaded_runs": float(trainer.loaded)}
    total = time.perf_counter() - t_start
    seconds = trainer.seconds
    timing = {"total": total, "train": seconds["train"], "eval": seconds["eval"],
              "sweep": sum(v["sweep_seconds"] for v in arms),
              "cpu_total": time.process_time() - c_start, "cpu_train": seconds["cpu_train"],
              "cpu_eval": seconds["cpu_eval"], "reused_runs": float(cache.reused), "workers": float(n_workers),
              "trained_runs": float(trainer.trained) + seconds.get("trained_runs", 0.0),
              "loaded_runs": float(trainer.loaded) + seconds.get("loaded_runs", 0.0)}
    if n_workers == 1:  # this process's wall time outside training and scoring; with workers, their seconds are
        timing["other"] = total - seconds["train"] - seconds["eval"]  # summed over them and pass the wall time
    result = SFTStudyResult(config, arms, runs, sweep, [it.task for it in test], base, timing, len(val),
                            words(test))
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
