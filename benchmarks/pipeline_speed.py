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

STAGES = ("load", "candidates", "filtering", "sweep", "write", "report")


class Clock:
    """Exclusive seconds per stage: time inside a nested stage counts for it alone."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self.open: list[list] = []

    def wrap(self, owner: object, attr: str, name: str) -> None:
        fn = getattr(owner, attr)
        clock = self

        def timed(*args, **kwargs):
            now = time.perf_counter()
            if clock.open:
                clock.seconds[clock.open[-1][0]] = clock.seconds.get(clock.open[-1][0], 0.0) + now - clock.open[-1][1]
            clock.open.append([name, now])
            try:
                return fn(*args, **kwargs)
            finally:
                now = time.perf_counter()
                clock.seconds[name] = clock.seconds.get(name, 0.0) + now - clock.open.pop()[1]
                if clock.open:
                    clock.open[-1][1] = now

        setattr(owner, attr, timed)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--task", default="all")
    parser.add_argument("--pairs", type=int, default=64)
    parser.add_argument("--out", help="folder for the results (default: a temporary one)")
    parser.add_argument("--figures", action="store_true", help="then time `make figures` on the demo's result")
    parser.add_argument("--identify-dir", help="with --figures: skip the demo and use this identify result")
    _bench.add_arguments(parser)
    args = parser.parse_args()
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

    out = Path(args.out or tempfile.mkdtemp(prefix="pipeline-speed-"))
    start = time.perf_counter()
    model = loading.load_model(args.model)
    config = job.IdentifyConfig(model=args.model, task=args.task, n_pairs=args.pairs)
    job.run(config, out / "identify", model=model, progress=False)
    folders = job.task_folders(config, out / "identify")
    report.write_report([out / "identify"], out / "report.html")
    demo_s = time.perf_counter() - start

    other = demo_s - sum(clock.seconds.values())
    rows = {**{s: clock.seconds.get(s, 0.0) for s in STAGES}, "other": other}
    heads = {t: [list(h) for h, _ in results.load_result(f).key_heads()[:8]] for t, f in folders.items()}
    print(f"code: {Path(circuits.__file__).parent.parent}; {_bench.describe()}")
    for task, hs in heads.items():
        print(f"  {task}: key heads {hs}")
    print("stage       seconds")
    for name, s in rows.items():
        print(f"{name:<10} {s:8.1f}")
    numbers = {"stages": rows, "threads_set_by": "circuits.threads" if _bench.configure_threads else "torch default",
               "key_heads": heads, "python": sys.version.split()[0]}
    if not args.figures:
        _bench.finish(args, numbers, demo_s=demo_s)
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
