"""Seconds per stage of ``make demo`` (identify ``--task all --pairs 64`` on SmolLM2, then the report), in-process.

The stages are timed from outside the library, by wrapping the functions each stage calls (``load_model``;
``render_pair``/``candidate_operands`` for candidates; ``pair_logits``/``pair_answer_scores`` for filtering; ``sweep``; ``Result.save``;
``write_report``), so the same script times older code too, for a before/after ratio measured the same way
(docs/speed.md)::

    python benchmarks/pipeline_speed.py                                   # this checkout
    git worktree add /tmp/old 1b338b3
    PYTHONPATH=/tmp/old python benchmarks/pipeline_speed.py --json old.json  # the code before the speed work

Threads are set as the command line sets them (``circuits.threads`` where the code has it, torch's default
otherwise: benchmarks/_bench.py). The last line reads ``demo_s=<seconds>``.

The demo is ``make demo``'s three commands: identify, ``experiments/demo_method.py`` (its stages ``knockout``,
``attention`` and ``logit lens``: the functions it calls, wrapped the same way; ``--no-method`` leaves it out, as this
benchmark was before issue 44) and the report of both. Each stage also gets its process CPU seconds (both torch
threads), which a machine shared with other jobs inflates far less than wall time, and the run ends with the bytes
the demo wrote (``output_bytes``: its files' sizes, what ``du -sb`` adds up). ``--baseline DIR`` first runs this
script on the code in ``DIR`` (a ``git worktree`` or ``git archive`` of an older commit) in a subprocess, then on
this checkout, and prints both with their ratios: the comparison in one run, one load::

    python benchmarks/pipeline_speed.py --baseline /tmp/old    # ... cpu_ratio=.. output_mb=.. baseline_output_mb=..

``--figures`` then runs ``make figures`` (the scripts of the Makefile's ``FIGURES`` list, each as ``make`` runs
it, in its own process) on the demo's identify result, times each script, and ends with ``demo_s=.. figures_s=..``;
``--identify-dir results/identify`` skips the demo and times the figures on that result::

    python benchmarks/pipeline_speed.py --figures
    python benchmarks/pipeline_speed.py --figures --identify-dir results/identify   # the figures alone
"""

from __future__ import annotations

import argparse
import importlib
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import _bench  # first: passive OpenMP waiting before torch loads, where the code under test has circuits.threads

STAGES = ("load", "candidates", "filtering", "sweep", "write", "knockout", "attention", "logit lens", "report")


class Clock:
    """Exclusive wall and process CPU seconds per stage: time inside a nested stage counts for it alone."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self.cpu: dict[str, float] = {}
        self.open: list[list] = []  # [name, wall at entry or last resume, cpu at the same moment]

    def _charge(self, name: str, since: float, cpu_since: float, now: float, cpu_now: float) -> None:
        self.seconds[name] = self.seconds.get(name, 0.0) + now - since
        self.cpu[name] = self.cpu.get(name, 0.0) + cpu_now - cpu_since

    def wrap(self, owner: object, attr: str, name: str) -> None:
        fn = getattr(owner, attr)
        clock = self

        def timed(*args, **kwargs):
            now, cpu = time.perf_counter(), time.process_time()
            if clock.open:
                clock._charge(clock.open[-1][0], clock.open[-1][1], clock.open[-1][2], now, cpu)
            clock.open.append([name, now, cpu])
            try:
                return fn(*args, **kwargs)
            finally:
                now, cpu = time.perf_counter(), time.process_time()
                top = clock.open.pop()
                clock._charge(name, top[1], top[2], now, cpu)
                if clock.open:
                    clock.open[-1][1], clock.open[-1][2] = now, cpu

        setattr(owner, attr, timed)


def output_bytes(folder: Path) -> tuple[int, int]:
    """The sizes of the files under ``folder`` (``du -sb``) and the disk they take (``du -s``, in bytes)."""
    files = [p for p in folder.rglob("*") if p.is_file() and not p.is_symlink()]
    return sum(p.stat().st_size for p in files), sum(p.stat().st_blocks * 512 for p in files)


def run_baseline(code: Path, args: argparse.Namespace) -> dict:
    """This script on the code in ``code`` (its own process, ``PYTHONPATH=code``): its --json numbers."""
    import json
    import os

    if not (code / "circuits" / "__init__.py").is_file():
        raise SystemExit(f"--baseline {code}: no circuits package there; accepted: a checkout of an older commit "
                         "(git worktree add /tmp/old <commit>, or git archive <commit> | tar -x -C /tmp/old)")
    out = Path(tempfile.mkdtemp(prefix="pipeline-speed-baseline-"))
    cmd = [sys.executable, str(Path(__file__).resolve()), "--task", args.task, "--pairs", str(args.pairs), "--model",
           args.model, "--out", str(out / "demo"), "--json", str(out / "numbers.json")]
    cmd += ["--threads", str(args.threads)] * (args.threads is not None) + ["--no-method"] * args.no_method
    env = {**os.environ, "PYTHONPATH": str(code)}
    print(f"baseline: {code} ({' '.join(cmd[1:])})", flush=True)
    subprocess.run(cmd, check=True, env=env)
    return json.loads((out / "numbers.json").read_text())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--task", default="all")
    parser.add_argument("--pairs", type=_bench.count(1, 100_000), default=64)
    parser.add_argument("--out", help="folder for the results (default: a temporary one)")
    parser.add_argument("--figures", action="store_true", help="then time `make figures` on the demo's result")
    parser.add_argument("--identify-dir", help="with --figures: skip the demo and use this identify result")
    parser.add_argument("--no-method", action="store_true", help="identify and the report only (no demo_method.py)")
    parser.add_argument("--baseline", metavar="DIR", help="first time the code in DIR the same way, then this checkout")
    _bench.add_arguments(parser)
    args = parser.parse_args()
    if args.baseline and (args.figures or args.identify_dir):
        parser.error("--baseline: only for the demo (not with --figures or --identify-dir)")
    base = run_baseline(Path(args.baseline), args) if args.baseline else None
    if args.identify_dir:
        if not args.figures:
            parser.error("--identify-dir: only with --figures (it replaces the demo's own identify result)")
        if not Path(args.identify_dir, "all").is_dir():
            parser.error(f"--identify-dir {args.identify_dir}: not a `circuits identify --task all` result "
                         "(no all/ inside); accepted: the folder `make demo` writes, e.g. results/identify")
        out = Path(args.out or tempfile.mkdtemp(prefix="pipeline-speed-"))
        figures = time_figures(Path(args.identify_dir), out, args.model)
        _bench.finish(args, {"figures": figures}, figures_s=sum(figures.values()))
        return
    _bench.setup(args)
    import circuits

    clock = Clock()
    pairs = importlib.import_module("circuits.data.pairs")
    job = importlib.import_module("circuits.identify.job")
    results = importlib.import_module("circuits.results")
    report = importlib.import_module("circuits.viz.report")
    loading = importlib.import_module("circuits.models.loading")
    clock.wrap(loading, "load_model", "load")
    clock.wrap(pairs, "candidate_operands", "candidates")
    clock.wrap(pairs, "render_pair", "candidates")
    for scoring in ("pair_logits", "pair_answer_scores"):  # the latter since issue 41 (a batch of logits at a time)
        if hasattr(pairs, scoring):
            clock.wrap(pairs, scoring, "filtering")
    clock.wrap(job, "sweep", "sweep")
    clock.wrap(results.Result, "save", "write")
    clock.wrap(report, "write_report", "report")

    method = not args.no_method
    if method:  # experiments/demo_method.py of the code under test, its stages wrapped the same way
        sys.path.insert(0, str(Path(circuits.__file__).resolve().parent.parent / "experiments"))
        demo_method = importlib.import_module("demo_method")
        validate, explain = importlib.import_module("circuits.validate.job"), importlib.import_module("circuits.explain.job")
        clock.wrap(validate, "knockout_result", "knockout")
        for fn in ("roles_result", "views_result"):
            clock.wrap(explain, fn, "attention")
        for fn in ("lens_result", "save_lens"):
            clock.wrap(explain, fn, "logit lens")
    out = Path(args.out or tempfile.mkdtemp(prefix="pipeline-speed-"))
    start, cpu_start = time.perf_counter(), time.process_time()
    model = loading.load_model(args.model)
    config = job.IdentifyConfig(model=args.model, task=args.task, n_pairs=args.pairs)
    ident = out / "identify" / ("" if args.task == "all" else args.task)  # demo_method reads <dir>/<operation>
    job.run(config, ident, model=model, progress=False)
    folders = job.task_folders(config, ident)
    if method:
        demo_method.main(["--identify-dir", str(out / "identify"), "--out", str(out / "demo"), "--model", args.model])
    report.write_report([out / "identify", *[out / "demo"] * method], out / "report.html")
    demo_s, demo_cpu_s = time.perf_counter() - start, time.process_time() - cpu_start
    size, disk = output_bytes(out)

    rows = {**{s: clock.seconds.get(s, 0.0) for s in STAGES}, "other": demo_s - sum(clock.seconds.values())}
    cpu = {**{s: clock.cpu.get(s, 0.0) for s in STAGES}, "other": demo_cpu_s - sum(clock.cpu.values())}
    heads = {t: [list(h) for h, _ in results.load_result(f).key_heads()[:8]] for t, f in folders.items()}
    print(f"code: {Path(circuits.__file__).parent.parent}; {_bench.describe()}")
    for task, hs in heads.items():
        print(f"  {task}: key heads {hs}")
    old = base or {}
    print("stage         seconds  CPU s" + ("   baseline CPU s  ratio" if old else ""))
    for name in rows:
        line = f"{name:<12} {rows[name]:8.1f} {cpu[name]:6.1f}"
        if old:
            b = old.get("cpu_stages", {}).get(name, float("nan"))
            line += f"   {b:14.1f}  {b / cpu[name] if cpu[name] > 0.05 else float('nan'):5.2f}"
        print(line)
    print(f"output: {size:,} bytes in files, {disk:,} on disk ({out})")
    numbers = {"stages": rows, "cpu_stages": cpu, "threads_set_by": "circuits.threads" if _bench.configure_threads
               else "torch default", "key_heads": heads, "python": sys.version.split()[0], "output_bytes": size,
               "output_disk_bytes": disk}
    last = dict(demo_s=demo_s, demo_cpu_s=demo_cpu_s, output_mb=size / 1e6)
    if old:
        numbers["baseline"] = old
        last.update(baseline_demo_s=old["demo_s"], baseline_demo_cpu_s=old["demo_cpu_s"],
                    cpu_ratio=old["demo_cpu_s"] / demo_cpu_s, baseline_output_mb=old["output_mb"])
    if not args.figures:
        _bench.finish(args, numbers, **last)
        return
    numbers["figures"] = time_figures(out / "identify", out, args.model)
    _bench.finish(args, numbers, demo_s=demo_s, figures_s=sum(numbers["figures"].values()))


def makefile_figures(makefile: Path = Path(__file__).resolve().parent.parent / "Makefile") -> list[str]:
    """The scripts ``make figures`` runs (the Makefile's ``FIGURES`` list, continuation lines joined)."""
    text = makefile.read_text().replace("\\\n", " ")
    match = re.search(r"^FIGURES\s*:=\s*(.*)$", text, re.M)
    if match is None:
        raise SystemExit(f"{makefile}: no FIGURES list")
    return match.group(1).split()


def time_figures(identify: Path, out: Path, model: str) -> dict[str, float]:
    """Seconds of each ``make figures`` script run on ``identify`` (its outputs under ``out``), as make runs it."""
    experiments = Path(__file__).resolve().parent.parent / "experiments"
    seconds: dict[str, float] = {}
    for name in makefile_figures():
        start = time.perf_counter()
        subprocess.run([sys.executable, str(experiments / f"{name}.py"), "--model", model, "--identify-dir",
                        str(identify), "--out", str(out / name)], check=True, stdout=subprocess.DEVNULL)
        seconds[name] = time.perf_counter() - start
        print(f"{name:<24} {seconds[name]:8.1f} s   (load average {_bench.load_average():.1f})", flush=True)
    return seconds


if __name__ == "__main__":
    main()
