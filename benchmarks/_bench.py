"""What every benchmark shares: threads, passive OpenMP waiting, timing with warm-up and repeats, the last line.

Import it before torch (``import _bench`` first): OpenMP reads its waiting policy once, when torch loads it, and
torch's default (active) policy ran SmolLM2's forward 2-7x slower with two threads on a shared 2-core CPU
(docs/speed.md). Then, after parsing the command line::

    parser = argparse.ArgumentParser(...)
    _bench.add_arguments(parser)                     # --model, --threads, --json
    args = parser.parse_args()
    _bench.setup(args)                               # torch's thread count, as the command line sets it
    ours = _bench.measure(lambda: engine(batch), warmup=lambda: engine(small))
    base = _bench.measure(lambda: plain_loop(batch))
    _bench.finish(args, speedup=base.seconds / ours.seconds, max_abs_diff=worst)   # speedup=.. max_abs_diff=..

Every ratio a benchmark prints is against a baseline measured in the same run, on the same machine and load.
Threads follow the command line's rule (:mod:`circuits.threads`: ``CIRCUITS_THREADS``, then ``OMP_NUM_THREADS``,
then the cores of the process's affinity mask) unless ``--threads`` names a count. Code older than
:mod:`circuits.threads` (a ``git worktree`` of an old commit on ``PYTHONPATH``, for a before/after ratio) keeps
torch's own defaults, as its command line did.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

try:  # what the command line does first, where the code under test has it
    from circuits.threads import configure_threads, prefer_passive_waiting, thread_count

    prefer_passive_waiting()
except ImportError:  # older code: torch's own defaults, as its command line ran
    configure_threads = thread_count = None  # type: ignore[assignment]
try:  # torch's compile cache in this process's own temporary folder, not left in $TMPDIR (as the command line does)
    from circuits._startup import private_torch_caches

    private_torch_caches()
except ImportError:
    pass


def count(lo: int, hi: int) -> Callable[[str], int]:
    """An argparse ``type`` for a count in ``lo..hi``: anything else is argparse's one error line, before a model
    loads (``--pairs -1``: ``argument --pairs: -1: accepted: a whole number from 1 to 100000``)."""

    def parse(text: str) -> int:
        try:
            n = int(text)
        except ValueError:
            n = lo - 1
        if not lo <= n <= hi:
            raise argparse.ArgumentTypeError(f"{text}: accepted: a whole number from {lo} to {hi}")
        return n

    return parse


def amount(lo: float, hi: float) -> Callable[[str], float]:
    """An argparse ``type`` for a finite number in ``lo..hi`` (``--memory-mb 0``: one error line, before a model
    loads)."""

    def parse(text: str) -> float:
        try:
            x = float(text)
        except ValueError:
            x = math.nan
        if not lo <= x <= hi:  # NaN and the infinities fail here too
            raise argparse.ArgumentTypeError(f"{text}: accepted: a number from {lo:g} to {hi:g}")
        return x

    return parse


def add_arguments(parser: argparse.ArgumentParser, threads: int | None = None, json_flag: bool = True,
                  model: bool = True) -> None:
    """``--model`` (default smollm2; unless ``model`` is false), ``--threads N`` (default ``threads``, else the
    command line's rule) and, unless ``json_flag`` is false (a benchmark that writes its own report), ``--json
    PATH``: the last line's numbers and the machine's state."""
    if model:
        parser.add_argument("--model", default="smollm2", help="an embedded model, a .gguf file or a model folder")
    rule = "CIRCUITS_THREADS, else OMP_NUM_THREADS, else the cores this process may use"
    parser.add_argument("--threads", type=count(1, 4096), default=threads,
                        help=f"torch threads (default {threads if threads else rule})")
    if json_flag:
        parser.add_argument("--json", metavar="PATH", help="also write the numbers of the last line here, as JSON")


def setup(args: argparse.Namespace | None = None) -> int:
    """Set torch's thread count (``args.threads``, else the command line's rule) and return it."""
    import torch

    n = getattr(args, "threads", None)
    if n is not None and n < 1:
        raise SystemExit(f"--threads {n}: accepted: a positive number of threads")
    if n is None and configure_threads is not None:
        return configure_threads()
    if n is not None and torch.get_num_threads() != n:
        torch.set_num_threads(n)
    return torch.get_num_threads()


def load_average() -> float:
    return os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")


def cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def machine() -> dict[str, Any]:
    """Threads, waiting policy, load average and cores now: what every timing depends on."""
    import torch

    return {"threads": torch.get_num_threads(), "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY", "unset"),
            "load_average": round(load_average(), 2), "cores": cores()}


def describe() -> str:
    """One line: ``2 torch threads (OMP_WAIT_POLICY=PASSIVE), load average 1.3 on 2 cores``."""
    m = machine()
    return (f"{m['threads']} torch threads (OMP_WAIT_POLICY={m['omp_wait_policy']}), load average "
            f"{m['load_average']:.1f} on {m['cores']} cores")


@dataclass
class Timing:
    """Wall-clock seconds of the fastest of ``runs``, its process CPU seconds, and what the last run returned."""

    seconds: float
    cpu_seconds: float
    runs: list[float] = field(default_factory=list)
    value: Any = None


def measure(fn: Callable[[], Any], *, warmup: Callable[[], Any] | bool | None = None, repeat: int = 1,
            sync: Callable[[], None] | None = None) -> Timing:
    """Time ``fn()`` ``repeat`` times after an untimed warm-up (``warmup()``, or ``fn()`` itself when ``True``);
    ``sync`` (e.g. ``torch.cuda.synchronize``) runs before each clock reading."""
    if repeat < 1:
        raise ValueError(f"repeat={repeat}: accepted: 1 or more")
    if warmup is True:
        fn()
    elif callable(warmup):
        warmup()
    best, best_cpu, runs, value = math.inf, math.inf, [], None
    for _ in range(repeat):
        if sync is not None:
            sync()
        t0, c0 = time.perf_counter(), time.process_time()
        value = fn()
        if sync is not None:
            sync()
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        runs.append(wall)
        if wall < best:
            best, best_cpu = wall, cpu
    return Timing(best, best_cpu, runs, value)


def extrapolate(seconds: float, timed: int, total: int) -> float:
    """Seconds for ``total`` items from ``seconds`` measured on ``timed`` of them (a baseline too slow to run whole)."""
    return seconds / timed * total


def format_value(name: str, value: Any) -> str:
    """A number of the last line: differences as ``1.23e-05``, seconds and ratios from 1 on with one decimal from 100
    and two below, smaller ones with three significant digits."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool) or isinstance(value, int):
        return str(value)
    value = float(value)
    if math.isnan(value):
        return "nan"
    if name.endswith("diff"):
        return f"{value:.2e}"
    if abs(value) >= 100:
        return f"{value:.1f}"
    return f"{value:.2f}" if abs(value) >= 1 or value == 0 else f"{value:.3g}"


def last_line(**values: Any) -> str:
    """``name=value ...`` in the order given: the line every benchmark ends with."""
    if not values:
        raise ValueError("the last line needs at least one name=value")
    return " ".join(f"{k}={format_value(k, v)}" for k, v in values.items())


def parse_last_line(line: str) -> dict[str, str]:
    """The ``name=value`` pairs of a benchmark's last line (the inverse of :func:`last_line`, values as printed)."""
    pairs = [kv.split("=", 1) for kv in line.split()]
    if not pairs or any(len(kv) != 2 or not kv[0] for kv in pairs):
        raise ValueError(f"{line!r} is not a benchmark's last line; accepted: name=value pairs separated by spaces")
    return dict(pairs)  # type: ignore[arg-type]


def finish(args: argparse.Namespace | None, extra: dict | None = None, **values: Any) -> str:
    """Print the last line; with ``--json``, also write its numbers, ``extra`` and :func:`machine` there."""
    line = last_line(**values)
    path = getattr(args, "json", None)
    if path:
        numbers = {k: (v if isinstance(v, (bool, int, float, str)) else float(v)) for k, v in values.items()}
        Path(path).write_text(json.dumps({**numbers, **(extra or {}), "machine": machine()}, indent=1))
    print(line, flush=True)
    return line


# -- inputs several benchmarks share ---------------------------------------------------------------------------------

def identify_pairs(model, folder: str | Path, n: int, task: str = "addition") -> tuple[list, Any]:
    """The first ``n`` pairs of the identify result in ``folder`` and that result, or ``n`` pairs built for ``task``
    the same way and ``None`` where ``folder`` holds none."""
    if Path(folder, "pairs.jsonl").is_file():
        from circuits.identify import IdentifyResult

        result = IdentifyResult.load(folder)
        return result.pairs[:n], result
    from circuits.data.pairs import build_pairs

    return build_pairs(model, task, n_pairs=n).pairs, None


class Request:
    """An lm-eval request: ``args`` is ``(context, continuation)``."""

    def __init__(self, context: str, continuation: str):
        self.args = (context, continuation)


def choice_requests(records: list[dict]) -> list[Request]:
    """lm-eval's multiple-choice requests: each record's prompt, then ``" " + label`` for each of its labels."""
    return [Request(r["prompt"], " " + label) for r in records for label in r["labels"]]


def sample_components(n_layers: int, n_heads: int, k: int, mlp_share: int = 5, head_step: int = 5) -> list:
    """A fixed spread of ``k`` components for timing a plain loop: heads over layers and head indices (index
    ``i * head_step``), and one MLP in ``mlp_share``, spread over the layers."""
    from circuits.types import Component

    n_mlp = max(1, k // mlp_share)
    heads = [Component("head", (i * n_layers) // (k - n_mlp), (i * head_step) % n_heads) for i in range(k - n_mlp)]
    return heads + [Component.mlp((i * n_layers) // n_mlp + n_layers // (2 * n_mlp)) for i in range(n_mlp)]


def sweep_values(result, component) -> tuple:
    """A sweep result's (answer logit, logit difference, answer probability) per pair for ``component``, in the
    order :func:`circuits.patching.engines.end_sweep_plain.patch_component_plain` returns them."""
    if component.kind == "head":
        i = (component.layer, component.head)
        return result.head_logit[i], result.head_logit_diff[i], result.head_prob[i]
    return result.mlp_logit[component.layer], result.mlp_logit_diff[component.layer], result.mlp_prob[component.layer]


def max_abs_diff(ours, theirs) -> float:
    """The largest absolute difference between two sequences of tensors, pairwise."""
    return max(float((a - b).abs().max()) for a, b in zip(ours, theirs))
