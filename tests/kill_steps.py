"""Kill a command at every write step, in children of a fresh interpreter that ran no torch op (issue 30).

A *zygote* (``python tests/kill_steps.py``, started by :class:`Zygote`) imports the toolkit (torch, TransformerLens,
the command line and every job's module) but runs no torch op and starts no thread; for each request it reads (one
JSON line on stdin) it forks a child that replaces :func:`circuits.io._write_step` (called inside every atomic write
and folder swap, before the rename that publishes it) with one that SIGKILLs the child at its N-th call, and runs
``circuits.cli.main(argv)``. So a run costs its work alone (no 5-second import), and no child is forked from a
process whose threads may hold a lock (the pytest process runs torch ops; a child forked from it once hung on a futex
for 30 minutes). Every child has a hard timeout: one that does not end in time is killed and reported as hung, so a
hang fails the test, it never blocks the suite. The zygote answers one JSON line per request: the exit code (``-9``
when killed), the number of write steps the run went through, whether it hung, and the end of its output.

The production code reads nothing from the environment for this: the hook lives here.
"""

from __future__ import annotations

import json
import os
import random
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


# --- the zygote (runs in its own interpreter) ---------------------------------------------------------------------

def _threads() -> int:
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:  # no /proc: trust the imports
        return 1


def _child(argv: list[str], kill_at: int | None, log: str, count_w: int) -> None:
    """In the forked child: run the command, SIGKILLed at write step ``kill_at``; never returns."""
    import atexit

    atexit._clear()  # the zygote's own exit handlers are not the child's; the child's run at its end, as at any exit
    code = 1
    try:
        fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        import circuits.io
        from circuits.cli import main

        calls = [0]

        def step() -> None:
            calls[0] += 1
            if calls[0] == kill_at:
                os.kill(os.getpid(), signal.SIGKILL)

        circuits.io._write_step = step
        sys.argv = ["circuits", *argv]
        try:
            code = main(argv)
        except SystemExit as exit_:  # --help, or a parse error: what the console script would exit with
            code = exit_.code if isinstance(exit_.code, int) else 1
        os.write(count_w, str(calls[0]).encode())
    except BaseException:  # noqa: BLE001 -- whatever happens, the child ends here and says why in its log
        import traceback

        traceback.print_exc()
    finally:
        atexit._run_exitfuncs()  # os._exit skips them: circuits' private temporary folder goes here
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code if isinstance(code, int) else 1)


def _start(request: dict) -> dict:
    """Fork the child of ``request``; what :func:`_finish` needs to wait for it."""
    n = _threads()
    if n != 1:
        return {"id": request["id"], "error": f"the zygote runs {n} threads: a fork could inherit a held lock"}
    count_r, count_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(count_r)
        _child(request["argv"], request.get("kill_at"), request["log"], count_w)
    os.close(count_w)
    now = time.monotonic()
    kill_after = request.get("kill_after")  # SIGKILL at a moment rather than at a write step (tests/integration/test_kill.py)
    return {"pid": pid, "count_r": count_r, "started": now, "deadline": now + request["timeout"], "request": request,
            "kill_time": None if kill_after is None else now + kill_after}


def _finish(run: dict, block: bool = False) -> dict | None:
    """The reply of a child that ended (or was killed for running past its deadline); None while it runs."""
    pid, request = run["pid"], run["request"]
    done, status, usage = os.wait4(pid, 0 if block else os.WNOHANG)
    hung, wchan = False, ""
    if not done and run["kill_time"] is not None and time.monotonic() >= run["kill_time"]:
        os.kill(pid, signal.SIGKILL)  # the moment asked for: a kill, not a hang
        done, status, usage = os.wait4(pid, 0)
    if not done:
        if time.monotonic() <= run["deadline"]:
            return None
        hung = True
        try:
            wchan = Path(f"/proc/{pid}/wchan").read_text()
        except OSError:
            pass
        os.kill(pid, signal.SIGKILL)
        _, status, usage = os.wait4(pid, 0)
    steps = os.read(run["count_r"], 64).decode()
    os.close(run["count_r"])
    code = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
    try:
        tail = Path(request["log"]).read_text(errors="replace")[-3000:]
        os.unlink(request["log"])
    except OSError:
        tail = ""
    return {"id": request["id"], "code": code, "steps": int(steps) if steps else None, "hung": hung,
            "wchan": wchan, "tail": tail, "cpu": usage.ru_utime + usage.ru_stime,
            "wall": time.monotonic() - run["started"]}


def _warm() -> None:
    """Fill the pure-Python caches every child would fill again (plotly's validators, transformers' checkpoint
    renaming rules: about 1 s of a tiny identify's 2 s under cProfile), running no torch op and starting no thread."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    fig = make_subplots(rows=1, cols=2, subplot_titles=("a", "b"))
    fig.add_trace(go.Heatmap(z=[[0.0, 1.0]], colorscale="RdBu", zmid=0, hovertemplate="%{z}"), row=1, col=1)
    fig.add_trace(go.Scatter(x=[0, 1], y=[0, 1], mode="lines+markers", error_y=dict(array=[0.1, 0.1])), row=1, col=2)
    fig.add_trace(go.Bar(x=["a"], y=[1.0]), row=1, col=2)
    fig.update_layout(title="t", width=800, height=400, legend=dict(orientation="h"))
    fig.update_xaxes(title="x")
    fig.update_yaxes(title="y")
    fig.to_html(include_plotlyjs=False, full_html=False)
    try:
        from transformers.conversion_mapping import get_checkpoint_conversion_mapping

        get_checkpoint_conversion_mapping("llama")
    except ImportError:  # another transformers: its own caches
        pass


def serve() -> None:
    """The zygote's loop: import, say ready, then one child per request line."""
    import torch  # noqa: F401 -- imported, no op run
    import transformer_lens  # noqa: F401

    import circuits.cli  # noqa: F401
    import circuits.io  # noqa: F401
    from circuits.jobs import COMMANDS, load

    for j in COMMANDS:  # every job's module, so that a child imports nothing heavy itself
        if j.run:
            load(j.run)
    _warm()
    out = sys.stdout
    sys.stdout = sys.stderr  # nothing but replies on the pipe
    out.write(json.dumps({"ready": True, "threads": _threads()}) + "\n")
    out.flush()
    running: list[dict] = []
    buffer, open_ = b"", True
    while open_ or running:
        ready = select.select([0], [], [], 0.02)[0] if open_ else time.sleep(0.02)
        if ready:
            data = os.read(0, 65536)
            open_, buffer = bool(data), buffer + data
            while b"\n" in buffer:
                line, buffer = buffer.split(b"\n", 1)
                if line.strip():
                    started = _start(json.loads(line))
                    if "error" in started:
                        out.write(json.dumps(started) + "\n")
                        out.flush()
                    else:
                        running.append(started)
        for run in list(running):
            reply = _finish(run)
            if reply is not None:
                running.remove(run)
                out.write(json.dumps(reply) + "\n")
                out.flush()


# --- the client (in the pytest process) --------------------------------------------------------------------------

# A child still running after this many seconds hangs. The slowest command the tests run here, test_kill's SmolLM2
# identify --task all, ends its whole test (three runs) in under a minute on the quiet machine, so even a run four times
# slower, beside two other CPU-bound jobs on 2 cores, stays far inside it; a real hang still fails the test, later.
HANG_S = 600.0


class ZygoteError(AssertionError):
    pass


class Lines:
    """Lines from a pipe's file descriptor, read with a timeout. A buffered file object cannot be waited on with
    ``select``: one ``readline`` may pull two replies into the object's buffer, and a ``select`` on the descriptor
    then waits for a line already read (two children that ended together once cost a test its reply)."""

    def __init__(self, fd: int):
        self.fd, self.buffer = fd, b""

    def next(self, timeout: float) -> str | None:
        """The next line, without its newline; None when none came within ``timeout`` seconds or the pipe closed."""
        deadline = time.monotonic() + timeout
        while b"\n" not in self.buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.fd], [], [], left)[0]:
                return None
            data = os.read(self.fd, 65536)
            if not data:
                return None
            self.buffer += data
        line, self.buffer = self.buffer.split(b"\n", 1)
        return line.decode()


class Zygote:
    """A running zygote; :meth:`run` forks one command in it. ``logs`` is a folder for the children's output."""

    def __init__(self, logs: Path, start_timeout: float = 180.0):
        self.logs, self.n = Path(logs), 0
        self.logs.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
               "CIRCUITS_THREADS": "1", "PYTHONUNBUFFERED": "1",
               # pyarrow's jemalloc (imported with datasets) starts a background thread by default: a thread at fork
               "JE_ARROW_MALLOC_CONF": "background_thread:false"}
        self.err = open(self.logs / "zygote.err", "w")  # noqa: SIM115 -- closed in close()
        self.proc = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "serve"], env=env,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.err, text=True)
        self.lines = Lines(self.proc.stdout.fileno())
        self.outstanding: set[int] = set()  # sent, not yet answered: an aborted chain's replies come later
        ready = self._reply(start_timeout)
        if not ready.get("ready"):
            raise ZygoteError(f"the zygote did not start: {ready}")

    def _reply(self, timeout: float) -> dict:
        line = self.lines.next(timeout)
        if line is None:
            err = (self.logs / "zygote.err").read_text(errors="replace")[-2000:]
            raise ZygoteError(f"the zygote gave no answer within {timeout:.0f} s (exit {self.proc.poll()}): {err}")
        reply = json.loads(line)
        self.outstanding.discard(reply.get("id"))
        return reply

    def _send(self, argv: list[str], kill_at: int | None, timeout: float, kill_after: float | None = None) -> int:
        self.n += 1
        request = {"id": self.n, "argv": [str(a) for a in argv], "kill_at": kill_at, "timeout": timeout,
                   "log": str(self.logs / f"run-{self.n}.log"), "kill_after": kill_after}
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()
        self.outstanding.add(self.n)
        return self.n

    def _check(self, reply: dict, argv: list[str], kill_at: int | None, timeout: float) -> dict:
        if "error" in reply:
            raise ZygoteError(reply["error"])
        if reply["hung"]:
            raise ZygoteError(f"circuits {' '.join(map(str, argv))} (kill at write step {kill_at}) hung for "
                              f"{timeout:.0f} s (waiting in {reply.get('wchan')!r}); killed. Its output: "
                              f"{reply['tail'][-1500:]}")
        return reply

    def run(self, argv: list[str], kill_at: int | None = None, timeout: float = HANG_S,
            kill_after: float | None = None) -> dict:
        """``circuits argv`` in a forked child, SIGKILLed at write step ``kill_at`` (or ``kill_after`` seconds after
        the fork, if it still runs then): ``{"code", "steps", "hung", "tail", "cpu", "wall"}``. A child that runs
        past ``timeout`` seconds is killed and fails the calling test."""
        if kill_after is None:
            return self.chains([[(argv, kill_at)]], workers=1, timeout=timeout)[0][0]
        sent = self._send(argv, kill_at, timeout, kill_after)
        while True:
            reply = self._reply(timeout + 60)
            if reply.get("id") == sent:
                return self._check(reply, argv, kill_at, timeout)

    def chains(self, chains: list[list[tuple[list[str], int | None]]], workers: int,
               timeout: float = HANG_S) -> list[list[dict]]:
        """Run each chain's commands ``(argv, kill_at)`` one after the other, up to ``workers`` chains at once;
        each chain's replies in its order."""
        replies: list[list[dict]] = [[] for _ in chains]
        waiting, running = list(range(len(chains))), {}  # request id -> chain index
        while waiting or running:
            while waiting and len(running) < max(1, workers):
                c = waiting.pop(0)
                argv, kill_at = chains[c][len(replies[c])]
                running[self._send(argv, kill_at, timeout)] = c
            outstanding_before = set(self.outstanding)
            reply = self._reply(timeout + 60)
            if reply.get("id") not in running:
                if reply.get("id") in outstanding_before:  # a reply to a chain an earlier failure abandoned
                    continue
                raise ZygoteError(f"the zygote answered a request never sent: {reply}")
            c = running.pop(reply["id"])
            argv, kill_at = chains[c][len(replies[c])]
            replies[c].append(self._check(reply, argv, kill_at, timeout))
            if len(replies[c]) < len(chains[c]):
                waiting.insert(0, c)
        return replies

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.close()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.err.close()


if __name__ == "__main__" and sys.argv[1:] == ["serve"]:
    serve()


# --- what is run, and how two runs' results are compared ---------------------------------------------------------

def commands(model: Path, ident: Path, delta: Path) -> dict[str, tuple[list[str], str]]:
    """Every command of the job table on the tiny model, in seconds each: ``name -> (argv without --out, the --out
    name)``. ``ident``: an identify result (``--heads-from``, the report's input); ``delta``: a finetune's
    ``delta.pt`` (export's input)."""
    tiny = ["--model", str(model), "--no-filter-correct", "--few-shot", "on"]
    heads = ["--heads-from", str(ident), "--no-progress"]
    return {
        "identify": (["identify", *tiny, "--pairs", "3", "--bootstrap", "20", "--key-rule", "top2", "--no-progress"],
                     "out"),
        "screen": (["screen", *tiny, "--pairs", "2", "--verify", "2", "--no-progress"], "out"),
        "positions": (["positions", *tiny, "--pairs", "2", "--offsets", "0,1", "--no-progress"], "out"),
        "neurons": (["neurons", *tiny, "--pairs", "2", "--layers", "1", "--shares", "0.05", "--no-progress"], "out"),
        "heuristics": (["heuristics", *tiny, "--no-progress", "--pairs", "2", "--layers", "1,2", "--neurons-per-mlp",
                        "4", "--operands", "0,4", "--threshold", "0.3", "--alpha", "1", "--n-random", "2", "--n-boot",
                        "20"], "out"),
        "carry": (["carry", "--model", str(model), "--no-filter-correct", "--n-boot", "5", "--n-splits", "5",
                   "--n-random", "2", "--no-progress"], "out"),
        "edges": (["edges", *heads, "--receivers", "2.1,MLP1"], "out"),
        "stability": (["stability", "--model", str(model), "--no-filter-correct", "--operations", "addition",
                       "--seeds", "0,1", "--pairs", "2"], "out"),
        "faithfulness": (["faithfulness", *tiny, "--pairs", "2", "--rankings", "exact-path,screen", "--sizes",
                          "0.2,0.5", "--no-progress"], "out"),
        "knockout": (["knockout", *heads, "--ks", "0,1,2", "--seeds", "0,1"], "out"),
        "transfer": (["transfer", *heads, "--n-key-heads", "2", "--n", "2", "--n-mmlu", "2", "--svamp-shots", "1"],
                     "out"),
        "attention": (["attention", *heads, "--n-key-heads", "2", "--operations", "addition", "--n-prompts", "2"],
                      "out"),
        "attention-views": (["attention-views", *heads, "--n-key-heads", "2", "--operations", "addition"], "out"),
        "lens": (["lens", *heads, "--top-k", "2"], "out"),
        "numbers": (["numbers", *tiny, "--no-progress", "--pairs", "3", "--n-heads", "2", "--n-mlps", "2",
                     "--n-problems", "4", "--digit-floor", "0", "--digit-mlps", "1", "--top-neurons", "3"], "out"),
        "finetune": (["finetune", "--model", str(model), "--heads", "1.0,2.3", "--data", "arithmetic", "--n-arithmetic",
                      "24", "--batch-size", "4", "--micro-batch-size", "2", "--epochs", "1", "--lr", "1e-3",
                      "--checkpoint-every", "1", "--no-progress", "--device", "cpu"], "out"),
        "evaluate": (["evaluate", "--model", str(model), "--tasks", "arithmetic", "--limit", "3", "--device", "cpu"],
                     "out"),
        "export": (["export", "--delta", str(delta)], "out"),
        "sft-study": (["sft-study", "--model", str(model), "--key-heads", "1.0,2.3", "--key-mlps", "1", "--arms",
                       "precise,random,lora,full", "--random-draws", "1", "--data", "arithmetic", "--n-arithmetic",
                       "16", "--batch-size", "4", "--micro-batch-size", "4", "--steps", "2", "--max-length", "32",
                       "--lrs", "1e-3", "--seeds", "0", "--per-form", "2", "--two-digit", "2", "--val-per-form", "2",
                       "--mmlu", "0", "--commonsenseqa", "0", "--shots", "0", "--n-boot", "20", "--no-progress"],
                      "out"),
        "mib": (["mib", str(ident)], "importances.json"),
        "report": (["report", str(ident)], "report.html"),
    }


# What a run records of itself rather than computes: measured time and speed, and where a resumed run started.
_OF_THE_RUN = ("seconds", "_per_s", "resumed_from", "timing")


def _timeless(value):
    """A JSON or tensor-file value without what a run records of itself (:data:`_OF_THE_RUN`)."""
    if isinstance(value, dict):
        return {k: _timeless(v) for k, v in value.items() if not any(w in str(k) for w in _OF_THE_RUN)}
    if isinstance(value, list):
        return [_timeless(v) for v in value]
    return value


def contents(folder: Path) -> dict[str, object]:
    """What a run wrote under ``folder``, as comparable values: JSON and tensor files without their seconds (measured,
    not computed), text files as text; pages and other files by their presence (their figures draw the data compared
    here, and may print seconds)."""
    import torch

    out: dict[str, object] = {}
    for p in sorted(folder.rglob("*")):
        if p.is_dir():
            continue
        rel = str(p.relative_to(folder))
        if p.suffix == ".json":
            data = json.loads(p.read_text())
            if p.name == "circuits.json":
                data.pop("provenance", None)  # the same process's: equal, but it names the run's paths nowhere
            if isinstance(data, dict) and "resumed_from" in data:
                data.pop("samples", None)  # a fine-tuning run's: those this process trained on (its samples/s's)
            out[rel] = _timeless(data)
        elif p.suffix == ".pt":
            out[rel] = _timeless(torch.load(p, weights_only=True))
        elif p.suffix in (".jsonl", ".md", ".py", ".txt"):
            out[rel] = p.read_text()
        elif p.suffix == ".safetensors":
            from safetensors.torch import load_file

            out[rel] = load_file(p)
        else:
            out[rel] = None
    return out


def differences(a: dict, b: dict) -> list[str]:
    """The files two :func:`contents` do not share, or whose values differ."""
    from circuits.results import same

    if sorted(a) != sorted(b):
        return [f"files differ: {sorted(set(a) ^ set(b))}"]
    return [k for k in a if not same(a[k], b[k])]


def leftovers(root: Path) -> list[str]:
    """Locks and temporaries of circuits' writes under ``root``."""
    return [str(p) for p in root.rglob("*") if ".lock" in p.name or "-tmp-" in p.name or "-old-" in p.name]


def stale_temps() -> list[str]:
    """circuits' per-process folders in $TMPDIR whose process is gone (a run's clean-up did not happen)."""
    import tempfile

    from circuits._startup import TEMP_PREFIXES, _alive

    root, gone = Path(tempfile.gettempdir()), []
    for p in root.iterdir():
        prefix = next((x for x in TEMP_PREFIXES if p.name.startswith(x)), None)
        pid = p.name[len(prefix):].split("-", 1)[0] if prefix else ""
        if pid.isdigit() and not _alive(int(pid)):
            gone.append(str(p))
    return gone


def workers() -> int:
    """Chains run at once: ``CIRCUITS_KILL_WORKERS``, else the cores this process may use (each child one thread)."""
    from circuits.threads import available_cores

    return int(os.environ.get("CIRCUITS_KILL_WORKERS", 0)) or available_cores()


# The seed of the sampled write steps (:func:`chosen_steps`): ``CIRCUITS_KILL_SEED``, else drawn once per process and
# named in every failure, so a failure reproduces.
SEED = int(os.environ.get("CIRCUITS_KILL_SEED") or random.SystemRandom().randrange(1_000_000))


def chosen_steps(n: int, name: str, middle: int = 2) -> tuple[list[int], str]:
    """The write steps of a run of ``n`` at which ``kill_every_step`` kills it, and how they were chosen: every step
    under ``CIRCUITS_KILL_ALL=1`` (``make test-kill``, which CI runs); else the first, the last and ``middle``
    steps between them drawn with :data:`SEED` and the command's name (``make test``: the whole matrix is 364 runs,
    519 CPU s on TransformerLens 3.9)."""
    if os.environ.get("CIRCUITS_KILL_ALL") == "1":
        return list(range(1, n + 1)), f"every write step of {n}"
    rng = random.Random(f"{SEED}:{name}")
    ks = sorted({1, n} | set(rng.sample(range(2, n), min(middle, max(0, n - 2)))))
    return ks, (f"write steps {ks} of {n} (sampled with seed {SEED}: CIRCUITS_KILL_SEED={SEED} reproduces them, "
                f"CIRCUITS_KILL_ALL=1 kills at every step)")


def kill_every_step(zygote: Zygote, name: str, argv: list[str], out_name: str, root: Path,
                    steps: list[int] | None = None) -> dict:
    """Run ``circuits argv`` straight, then, for each write step k of it chosen by :func:`chosen_steps` (or those
    in ``steps``), killed with SIGKILL at step k and run again with the same command: assert each rerun ends with
    code 0 and what it wrote equals the straight run's, and that no lock or temporary is left. What was measured:
    ``{"steps", "killed_at", "runs", "cpu"}`` (the children's CPU seconds)."""
    straight = root / "straight"
    first = zygote.run([*argv, "--out", straight / out_name])
    assert first["code"] == 0, f"{name}: the straight run: {first['tail'][-1500:]}"
    n = first["steps"]
    assert n and n >= 1, f"{name} wrote through {n} write steps"
    want = contents(straight)
    if steps is None:
        ks, how = chosen_steps(n, name)
    else:
        ks, how = [k for k in steps if 1 <= k <= n], f"write steps {steps} of {n}"
    name = f"{name} ({how})"
    chains = [[([*argv, "--out", root / f"killed-{k}" / out_name], k), ([*argv, "--out", root / f"killed-{k}" / out_name],
                                                                         None)] for k in ks]
    replies = zygote.chains(chains, workers())
    for k, (killed, rerun) in zip(ks, replies):
        assert killed["code"] == -signal.SIGKILL, \
            f"{name}: not killed at write step {k} of {n} (exit {killed['code']}): {killed['tail'][-1500:]}"
        assert rerun["code"] == 0, f"{name}: the rerun after a kill at write step {k} of {n}: {rerun['tail'][-1500:]}"
        diff = differences(want, contents(root / f"killed-{k}"))
        assert diff == [], f"{name}: killed at write step {k} of {n}, the rerun's result differs in {diff}"
    assert leftovers(root) == [], f"{name}: left behind"
    cpu = first["cpu"] + sum(r["cpu"] for chain in replies for r in chain)
    return {"steps": n, "killed_at": how, "runs": 1 + 2 * len(ks), "cpu": cpu}
