"""Which ranking gives the most faithful arithmetic circuit per unit of compute (issue 24), scored as MIB scores
circuit discovery: for every model and operation, each ranking of ``--rankings`` (exact path and activation patching
at END, exact patching at every position, the AtP* screen, GradDrop, EAP-IG) turned into circuits at MIB's sizes,
everything else ablated, f against size, CPR and CMD with bootstrap intervals, and the seconds each ranking took; at
node level with the circuit kept at END and at every position, and at edge level for EAP-IG (at END and at every
position, ``--edge-positions``' default).

Run: ``python experiments/faithfulness.py`` (SmolLM2, the four operations; ``--models smollm2,gemma3-270m`` adds Gemma
3 270M where it is installed); ``--pairs 8 --operations addition`` for a quick run; ``--replot`` redraws from the
saved results. Each model and operation is one ``circuits faithfulness`` result in ``<out>/<model>/<operation>``
(each finished ranking kept in its ``parts/``, so a stopped run resumes). The tables of docs/results.md come from
``published.json`` (experiments/_tables.py renders them).

``--workers 2`` runs the (model, operation) runs in two worker processes side by side (fresh interpreters, one torch
thread each, each taking the next run when it finishes one): on a 2-core machine the study's four operations take
about half the wall time. Every run writes the folder and parts one process of one thread would (a part depends on
its config, pairs and weights, in its last bits on the thread count too, not on which process made it), the parent
alone writes ``counterfactuals.json`` and the tables, and prints each ranking as it finishes; Ctrl-C or SIGTERM stops
the workers (each finished ranking stays in its ``parts/``: the same command resumes)."""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import queue
import re
import signal
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path

import _common as C
import _tables as T

from circuits.beyond.faithfulness.config import FaithfulnessConfig
from circuits.beyond.faithfulness.job import faithfulness, split_pairs
from circuits.beyond.faithfulness.result import PARTS, FaithfulnessResult
from circuits.config import Config as BaseConfig, count
from circuits.config import add_arguments, from_arguments, option
from circuits.data.pair_config import COUNTERFACTUAL_KINDS
from circuits.data.templates import OPERATIONS
from circuits.io import TEMPORARY, read_json, write_json
from circuits.patching.circuit_curves import cmd_margin_draws
from circuits.patching.core.uncertainty import bootstrap_p, holm, percentile_interval
from circuits.results import check_output
from circuits.viz.figures import write_figure
from torch import Tensor


@dataclass(frozen=True)
class Config(BaseConfig):
    faithfulness: FaithfulnessConfig = option(FaithfulnessConfig(n_pairs=16), skip=("model", "task", "pairs_from"),
                                              help="the run made for every model and operation")
    models: tuple[str, ...] = option(("smollm2",), help="models (gemma3-270m where installed)")
    operations: tuple[str, ...] = option(tuple(OPERATIONS), help="operations")
    out: str = option("results/faithfulness")
    workers: int = count(1, help="worker processes running the (model, operation) runs side by side, one torch "
                                  "thread each (2 on a 2-core machine); results and parts as one process makes them")

    def __post_init__(self) -> None:
        if self.workers < 1:
            raise ValueError(f"--workers must be 1 or more, got {self.workers}")
        for op in self.operations:
            if op not in OPERATIONS:
                raise ValueError(f"Unknown operation {op!r}; accepted: {', '.join(OPERATIONS)}")
        if not self.models:
            raise ValueError("Give at least one model")

    def run_config(self, model: str, op: str) -> FaithfulnessConfig:
        return self.faithfulness.replace(model=model, task=op)

    def folder(self, model: str, op: str) -> Path:
        return Path(self.out) / slug(model) / op

    def counterfactuals_path(self) -> Path:
        return Path(self.out) / COUNTERFACTUALS


# Per model and operation, each counterfactual kind's pairs: how many, and the share whose metric can move (the
# counterfactual prompt's top token is not the answer, so m(N) != m(empty) with the logit difference).
COUNTERFACTUALS = "counterfactuals.json"


def movable(model, cfg: FaithfulnessConfig) -> dict[str, dict[str, float]]:
    """Each counterfactual kind's pairs (built as ``cfg`` builds them, that kind swapped in): how many, and the share
    whose counterfactual prompt's top token is not the answer (what the metric's second logit is with
    ``--second-logit top``; with ``label`` every operand and random pair's metric can move, its label being another
    number)."""
    from circuits.data.pairs import build_pairs

    out = {}
    for kind in COUNTERFACTUAL_KINDS:
        ps = build_pairs(model, cfg.pair_config().replace(counterfactual=kind, second_logit="top"), progress=False)
        out[kind] = {"n_pairs": len(ps), "movable": 1.0 - ps.counterfactual_accuracy}
    return out


def has_edges(model) -> bool:
    """Whether EAP-IG's edges can be scored on ``model`` (asked of the edge engine: not where a norm follows the
    attention sum, Gemma 2/3)."""
    from circuits.patching.circuit_curves import check_edge_model

    try:
        check_edge_model(model)
    except ValueError:
        return False
    return True


STUDY_FILES = (COUNTERFACTUALS, T.PUBLISHED, "published.md")


def read_shares(path: Path) -> dict:
    """``counterfactuals.json`` as this script wrote it (``{"<model>/<op>": {kind: {"n_pairs": int, "movable":
    share}}}``), checked: anything else (a number now a string, a share outside 0..1) is a ValueError naming the
    file and the entry; {} where there is no file."""
    if not path.is_file():
        return {}
    data = read_json(path)
    if not isinstance(data, dict):
        raise ValueError(f"{path} is not an object of <model>/<operation> entries")
    for key, kinds in data.items():
        if not isinstance(kinds, dict):
            raise ValueError(f"{path}: {key!r} is not an object of counterfactual kinds")
        for kind, v in kinds.items():
            ok = (kind in COUNTERFACTUAL_KINDS and isinstance(v, dict)
                  and type(v.get("n_pairs")) is int and v["n_pairs"] >= 0
                  and type(v.get("movable")) in (int, float) and 0 <= v["movable"] <= 1)
            if not ok:
                raise ValueError(f"{path}: {key}/{kind} is {json.dumps(v)[:80]}, not {{\"n_pairs\": a count, "
                                 f"\"movable\": a share from 0 to 1}}; delete the file and rerun to recount")
    return data


def study_refusal(out: Path) -> str | None:
    """Why ``out`` cannot hold this study (None when it can): it may be new, empty, or hold only what a study writes
    (``counterfactuals.json``, ``published.json``/``.md``, and a folder per model holding a folder per operation,
    each of those checked as a faithfulness result when its run starts); a folder of anything else (a repository, a
    user's files) is refused before any work, as ``circuits``' own ``--out`` is."""
    out = Path(out)
    if out.exists() and not out.is_dir():
        return f"--out {out} is an existing file; the study writes a folder"
    if not out.is_dir():
        return None
    def leftover(p: Path) -> bool:  # what a killed write or a lock of circuits.io leaves (cleared by the next run)
        return p.is_file() and not p.is_symlink() and bool(TEMPORARY.match(p.name) or re.match(r"^\..+\.lock$", p.name))

    foreign = []
    for p in sorted(out.iterdir()):
        if p.is_symlink():
            foreign.append(p.name)
        elif leftover(p) or (p.is_file() and p.name in STUDY_FILES):
            continue
        elif not p.is_dir() or p.name.startswith(".") or any(not leftover(q) and (q.is_symlink() or not q.is_dir() or q.name not in OPERATIONS)
                                   for q in p.iterdir()):
            foreign.append(p.name + ("/" if p.is_dir() else ""))
    if foreign:
        shown = ", ".join(foreign[:5]) + (f" and {len(foreign) - 5} more" if len(foreign) > 5 else "")
        return (f"--out {out} holds {shown}, which this study did not write (it writes {', '.join(STUDY_FILES)} and "
                f"<model>/<operation>/ folders); choose a new or empty --out")
    return None


def slug(model: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", Path(model).name or str(model)).strip("-") or "model"


def run_one(config: Config, name: str, op: str, model, on_shares, on_ranking=None) -> FaithfulnessResult:
    """One model and operation: its pairs, each counterfactual kind's share whose metric can move (handed to
    ``on_shares(key, shares)`` when ``counterfactuals.json`` has none yet), every ranking scored and saved to its
    folder. ``on_ranking(ranking, seconds)``: called as each ranking finishes (its part written)."""
    cfg, folder = config.run_config(name, op), config.folder(name, op)
    if cfg.edges and "eap-ig" in cfg.rankings and not has_edges(model):
        print(f"{name} {op}: no edge level (its heads have no additive output of their own); nodes only", flush=True)
        cfg = cfg.replace(edges=False)
    check_output(folder, "faithfulness")
    pairs, scoring, stats = split_pairs(cfg, model)  # found on one split, scored on another (held_out, the default)
    shares_path = config.counterfactuals_path()
    shares = read_shares(shares_path)
    if f"{name}/{op}" not in shares:
        on_shares(f"{name}/{op}", movable(model, cfg))
    if on_ranking is not None:  # one ranking at a time (each its part), then the whole result from the parts
        for ranking in cfg.rankings:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                one = faithfulness(model, pairs, cfg.replace(rankings=(ranking,)), progress=False, parts=folder / PARTS,
                                   scoring_pairs=scoring, stats=stats)
            on_ranking(ranking, one.seconds[ranking])
    # the ranking pairs' validity checks, as circuits faithfulness runs them: refused past a hard threshold unless --force
    r = faithfulness(model, pairs, cfg, progress=False, parts=folder / PARTS, scoring_pairs=scoring, stats=stats)
    r.save(folder)
    return r


def _done_line(name: str, op: str, r: FaithfulnessResult) -> str:
    return f"{name} {op}: " + ", ".join(f"{k} {v:.0f} s" for k, v in r.seconds.items())


def main(config: Config, model=None) -> dict[tuple[str, str], FaithfulnessResult]:
    """``model``: a loaded model for the first of ``config.models`` (the others are loaded here; with ``workers``
    above 1 each worker loads its own)."""
    tasks = [(name, op) for name in config.models for op in config.operations]
    if config.workers > 1 and len(tasks) > 1:
        return main_workers(config, tasks)
    t = C.Timer()
    out: dict[tuple[str, str], FaithfulnessResult] = {}
    given = model

    def keep_shares(key: str, value: dict) -> None:
        path = config.counterfactuals_path()
        shares = read_json(path) if path.is_file() else {}
        shares[key] = value
        write_json(path, shares)

    for i, name in enumerate(config.models):
        model = given if i == 0 and given is not None else C.model_for(name, config.faithfulness.dtype)
        for op in config.operations:
            r = run_one(config, name, op, model, keep_shares)
            out[(name, op)] = r
            t(_done_line(name, op, r))
    return out


# --- --workers: the (model, operation) runs in worker processes ---------------------------------------------------


class WorkerError(RuntimeError):
    """A worker process failed (its error in one line) or ended without saying why."""


_TERMINATED: list[int] = []  # a SIGTERM arrived (the exit code says so: 143, Ctrl-C's is 130)


def _interrupt(signum, frame):  # noqa: ANN001, ANN202
    _TERMINATED.append(signum)
    raise KeyboardInterrupt


def _worker(config: Config, tasks, messages, wid: int) -> None:
    """A worker process (spawned: a fresh interpreter): one torch thread; takes (model, operation) runs from
    ``tasks`` until it reads ``None``, and reports on ``messages``. SIGTERM unwinds as Ctrl-C does (an atomic write
    in progress removes its temporary file); a finished ranking's part stays."""
    signal.signal(signal.SIGTERM, _interrupt)
    os.environ["CIRCUITS_THREADS"] = "1"
    try:
        C.configure_threads()
        models: dict[str, object] = {}
        while (task := tasks.get()) is not None:
            name, op = task
            messages.put(("start", wid, name, op))
            if name not in models:
                models[name] = C.model_for(name, config.faithfulness.dtype)
            r = run_one(config, name, op, models[name], lambda k, v: messages.put(("shares", k, v)),
                        lambda ranking, s: messages.put(("ranking", wid, name, op, ranking, s)))
            messages.put(("done", wid, name, op, _done_line(name, op, r)))
    except KeyboardInterrupt:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # the parent's stop, arriving while this one exits: no traceback
        messages.put(("stopped", wid))
        sys.exit(130)
    except Exception as err:  # noqa: BLE001  (said in one line by the parent)
        # The parent stops every worker on this message, this one too while it still flushes the queue on its way out:
        # that SIGTERM is ignored here, or its KeyboardInterrupt would print the error's chained tracebacks
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        line = (str(err).strip().splitlines() or [""])[0]
        messages.put(("error", wid, f"{type(err).__name__}: {line}"))
        sys.exit(1)
    messages.put(("exit", wid))


def main_workers(config: Config, tasks: list[tuple[str, str]]) -> dict[tuple[str, str], FaithfulnessResult]:
    """The runs of ``tasks`` in ``config.workers`` spawned worker processes (at most one per run); the parent
    writes ``counterfactuals.json`` and prints progress; a worker's error stops the others and is raised here as
    one line; Ctrl-C or SIGTERM stops every worker before this returns (KeyboardInterrupt)."""
    t = C.Timer()
    ctx = mp.get_context("spawn")  # fresh interpreters: no forked torch thread pools
    n = min(config.workers, len(tasks))
    todo, messages = ctx.Queue(), ctx.Queue()
    for task in tasks:
        todo.put(task)
    for _ in range(n):
        todo.put(None)
    previous = signal.signal(signal.SIGTERM, _interrupt) if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL \
        else None
    procs = [ctx.Process(target=_worker, args=(config, todo, messages, w + 1), name=f"faithfulness-worker-{w + 1}")
             for w in range(n)]
    t(f"{len(tasks)} runs in {n} worker processes, one thread each")
    try:
        # The workers ignore SIGINT (inherited through exec): a Ctrl-C reaches the parent, which stops them with SIGTERM
        interrupt = signal.signal(signal.SIGINT, signal.SIG_IGN)
        try:
            for p in procs:
                p.start()
        finally:
            signal.signal(signal.SIGINT, interrupt)
        exited: set[int] = set()
        while len(exited) < n:
            try:
                msg = messages.get(timeout=1.0)
            except queue.Empty:
                for w, p in enumerate(procs, 1):
                    if w not in exited and p.exitcode is not None:
                        if p.exitcode != 0:
                            raise WorkerError(f"worker {w} ended with exit code {p.exitcode}")
                        exited.add(w)
                continue
            kind = msg[0]
            if kind == "shares":
                path = config.counterfactuals_path()
                shares = read_json(path) if path.is_file() else {}
                shares[msg[1]] = msg[2]
                write_json(path, shares)
            elif kind == "start":
                t(f"worker {msg[1]}: {msg[2]} {msg[3]} started")
            elif kind == "ranking":
                t(f"worker {msg[1]}: {msg[2]} {msg[3]} {msg[4]} done ({msg[5]:.0f} s)")
            elif kind == "done":
                t(msg[4])
            elif kind == "error":
                raise WorkerError(f"worker {msg[1]}: {msg[2]}")
            elif kind == "stopped":
                raise KeyboardInterrupt
            elif kind == "exit":
                exited.add(msg[1])
        for p in procs:
            p.join()
    except BaseException:
        for p in procs:  # SIGTERM: each worker unwinds as from Ctrl-C
            if p.is_alive():
                p.terminate()
        for p in procs:
            if p.pid is not None:
                p.join(timeout=60)
                if p.is_alive():
                    p.kill()
                    p.join()
        raise
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
        todo.close()
        messages.close()
    return {task: FaithfulnessResult.load(config.folder(*task)) for task in tasks}


def load(config: Config) -> dict[tuple[str, str], FaithfulnessResult]:
    return {(m, op): FaithfulnessResult.load(config.folder(m, op)) for m in config.models for op in config.operations
            if (config.folder(m, op) / "circuits.json").is_file()}


ALPHA = 0.05  # the family-wise error rate of the winner-vs-runner-up comparisons a table makes (Holm)


def margins(results: dict[tuple[str, str], FaithfulnessResult], alpha: float = ALPHA) -> dict[str, dict[str, list]]:
    """Per run (``model/operation``) and setting: the ranking with the lowest CMD, the runner-up, how much lower (the
    paired bootstrap over the same pairs, :func:`~circuits.patching.circuit_curves.cmd_margin_draws`), and that
    margin's interval at the level Holm's correction gives it over every such comparison of the table
    (:func:`~circuits.patching.core.uncertainty.holm`, family-wise ``alpha``): ``[winner, runner-up, margin, low,
    high, p, level, apart]``; ``apart`` only where Holm rejects "no difference" and the corrected interval excludes
    0."""
    draws: dict[tuple[str, str], tuple[str, str, float, Tensor | None]] = {}
    for (m, op), r in results.items():
        for setting in r.settings:
            ranked = sorted((c.cmd, k) for k, by in r.curves.items() for s, c in by.items()
                            if s == setting and c.cmd == c.cmd)
            if len(ranked) > 1:
                a, b = r.curves[ranked[0][1]][setting], r.curves[ranked[1][1]][setting]
                diff, d = cmd_margin_draws(a, b, r.config.n_boot)
                draws[(f"{m}/{op}", setting)] = (ranked[0][1], ranked[1][1], diff, d)
    keys = list(draws)
    p = [bootstrap_p(draws[k][3]) if draws[k][3] is not None else float("nan") for k in keys]
    rejected, levels = holm(p, alpha)
    out: dict[str, dict[str, list]] = {}
    for k, pk, rej, level in zip(keys, p, rejected, levels):
        winner, nxt, diff, d = draws[k]
        lo = hi = float("nan")
        if d is not None:
            lo, hi = (float(v) for v in percentile_interval(d, level))
        out.setdefault(k[0], {})[k[1]] = [winner, nxt, diff, lo, hi, pk, level, bool(rej and (lo > 0 or hi < 0))]
    return out


def published(results: dict[tuple[str, str], FaithfulnessResult], shares: dict | None = None) -> dict:
    """The tables of docs/results.md these results give (experiments/_tables.py renders them); ``shares``: the
    counterfactual kinds' pairs whose metric can move (:data:`COUNTERFACTUALS`)."""
    first = next(iter(results.values()))
    rows = [{"model": m, "operation": op, "setting": row["setting"], "ranking": row["ranking"], "cpr": row["cpr"],
             "cmd": row["cmd"], "cmd_ci": list(row["cmd_ci"]) if row["cmd_ci"] else None, "cmd_gap": row["cmd_gap"],
             "ranking_seconds": row["ranking_seconds"], "curve_seconds": row["curve_seconds"],
             "ranking_cpu_seconds": row["ranking_cpu_seconds"], "curve_cpu_seconds": row["curve_cpu_seconds"]}
            for (m, op), r in results.items() for row in r.table()]
    data = {"n_pairs": {f"{m}/{op}": len(r.pairs) for (m, op), r in results.items()}, "metric": first.config.metric,
            "ablation": first.config.ablation, "sizes": list(first.config.sizes), "rankings": list(first.config.rankings),
            "counterfactual": first.config.counterfactual, "count": first.config.count, "ig_grid": first.config.ig_grid,
            "n_boot": first.config.n_boot, "rows": rows,
            "margins": margins(results), "alpha": ALPHA, "cpr_ranking": first.config.cpr_ranking,
            "held_out": first.config.held_out}
    tables = {"faithfulness": {"render": "faithfulness", "data": data},
              "faithfulness_seconds": {"render": "faithfulness_seconds", "data": data}}
    if shares:
        tables["faithfulness_counterfactuals"] = {"render": "faithfulness_counterfactuals",
                                                  "data": {"kinds": list(COUNTERFACTUAL_KINDS), "shares": shares}}
    return tables


def plot(results: dict[tuple[str, str], FaithfulnessResult], out: Path) -> Path:
    shares_path = Path(out) / COUNTERFACTUALS
    T.write_published(out, published(results, read_shares(shares_path) or None))
    for (m, op), r in results.items():
        for setting in r.settings:
            write_figure(r.figure(setting), Path(out) / slug(m) / op / f"figure-{setting.replace('@', '-')}.html")
    return Path(out) / T.PUBLISHED


def cli(argv: list[str] | None = None) -> Path:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(parser, Config)
    parser.add_argument("--replot", action="store_true", help="redraw the figures and tables from the saved results")
    args = parser.parse_args(argv)
    try:
        config = from_arguments(Config, args)
    except ValueError as e:
        parser.error(str(e))
    why = study_refusal(Path(config.out))
    if why is not None:
        parser.error(why)
    if not args.replot:
        C.configure_threads()
    try:
        read_shares(config.counterfactuals_path())  # before any work: a tampered file is named, not met later
    except ValueError as e:
        parser.error(str(e))
    results = load(config) if args.replot else main(config)
    if not results:
        parser.error(f"no saved faithfulness results under {config.out}; run without --replot first")
    path = plot(results, Path(config.out))
    print(path)
    return path


if __name__ == "__main__":
    if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:  # SIGTERM unwinds as Ctrl-C (parts written atomically)
        signal.signal(signal.SIGTERM, _interrupt)
    try:
        sys.exit(0 if cli() else 1)
    except KeyboardInterrupt:
        print("faithfulness: interrupted; each finished ranking is kept in its run's parts/, the same command resumes",
              file=sys.stderr)
        sys.exit(143 if _TERMINATED else 130)
    except WorkerError as err:  # a worker's error, in its one line
        print(f"faithfulness: {err}", file=sys.stderr)
        sys.exit(1)
