"""How many CPU threads torch uses in the command line and the figure scripts (docs/speed.md).

Two settings, both overridable:

- **Threads**: ``CIRCUITS_THREADS`` if set, else ``OMP_NUM_THREADS`` if set, else the cores this process may run on
  (``os.sched_getaffinity``: a container's or ``taskset``'s share, not the machine's count).
- **Waiting**: idle OpenMP threads sleep (``OMP_WAIT_POLICY=PASSIVE``) unless the variable is set. The default
  (active) policy spins at every barrier; on a CPU shared with other jobs a spinning or descheduled thread stalls the
  other at each of the thousands of small parallel regions of a forward pass: on this project's 2-core machine under
  load, two threads ran SmolLM2's forward 2-7x slower than one, and two passive threads as fast as one. OpenMP reads
  the policy once, when torch loads it, so :func:`prefer_passive_waiting` must run before ``import torch``; entry
  points call it first thing.

In Python (a notebook, a script): ``import circuits`` itself lets idle OpenMP threads sleep when torch is not loaded
yet (:func:`prefer_passive_waiting`; a policy the user set is kept), because that is the only moment it can: the same
work ran 3-6x slower in the README's Python route than in the CLI on a shared 2-core machine before (issue 21).
The thread count is left alone unless the user asks: ``cc.use_threads()`` (the README's and the tour's first cell)
sets the count the CLI uses and says in one warning when torch came first, so that the policy could not apply.
"""

from __future__ import annotations

import os
import sys
import warnings

THREADS_ENV = "CIRCUITS_THREADS"


def prefer_passive_waiting() -> None:
    """Let idle OpenMP threads sleep unless ``OMP_WAIT_POLICY`` is set (effective only before torch is imported)."""
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


def available_cores() -> int:
    """CPU cores this process may run on (its affinity mask), or the machine's count where there is no mask."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # macOS and Windows have no affinity call
        return max(1, os.cpu_count() or 1)


def thread_count() -> int:
    """``CIRCUITS_THREADS``, else ``OMP_NUM_THREADS``, else :func:`available_cores`; a bad value is a ValueError."""
    for name in (THREADS_ENV, "OMP_NUM_THREADS"):
        value = os.environ.get(name, "").strip()
        if value:
            if not value.isdigit() or int(value) < 1:
                raise ValueError(f"{name}={value!r} is not a thread count; accepted: a positive integer")
            return int(value)
    return available_cores()


def configure_threads() -> int:
    """Set torch's intra-op thread count from :func:`thread_count`; returns it."""
    import torch

    n = thread_count()
    if torch.get_num_threads() != n:
        torch.set_num_threads(n)
    return n


def torch_loaded() -> bool:
    """Whether torch (and so its OpenMP runtime, which reads the wait policy once) is already imported."""
    return "torch" in sys.modules


def use_threads(n: int | None = None) -> int:
    """The CLI's thread set-up for a notebook or a script: passive OpenMP waiting and ``n`` intra-op threads
    (default :func:`thread_count`: ``CIRCUITS_THREADS``, ``OMP_NUM_THREADS`` or this process's cores). Returns the
    count. Call it before ``import torch`` (``import circuits as cc; cc.use_threads()`` as the first cell) so that the
    wait policy applies; when torch came first and no policy was set, one warning says so."""
    if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < 1):
        raise ValueError(f"use_threads(n={n!r}): n is a positive integer (or None: {THREADS_ENV}, OMP_NUM_THREADS or "
                         "the cores this process may use)")
    late = torch_loaded() and "OMP_WAIT_POLICY" not in os.environ
    prefer_passive_waiting()
    import torch

    if late:
        warnings.warn("torch was imported before circuits, so its OpenMP threads spin while idle (slow on a shared "
                      "CPU): restart and import circuits (or set OMP_WAIT_POLICY=PASSIVE) before torch.", stacklevel=2)
    count = n or thread_count()
    if torch.get_num_threads() != count:
        torch.set_num_threads(count)
    return count


# torch's compile cache (issue 41, LITTER): here, at the bottom layer, so circuits.models may use it.
def _default_compile_cache() -> str:
    """torch's default ``TORCHINDUCTOR_CACHE_DIR`` (``torch._inductor.runtime.cache_dir_utils.default_cache_dir``, as
    torch 2.13 computes it), found without importing torch._inductor: importing it makes the folder."""
    import getpass
    import re
    import tempfile

    try:
        user = getpass.getuser()
    except (KeyError, ModuleNotFoundError, OSError):
        user = f"uid_{os.getuid()}" if hasattr(os, "getuid") else "unknown_user"
    return os.path.join(tempfile.gettempdir(), "torchinductor_" + re.sub(r'[\\/:*?"<>|]', "_", user))


class no_empty_compile_cache:
    """Around the first import of TransformerLens from Python (``circuits.models``): torch._dynamo, which it imports,
    makes ``$TMPDIR/torchinductor_<user>`` at once, empty, and a script or notebook that only loads a model left that
    folder behind. Where the import made it and it is still empty afterwards it is removed (``os.rmdir``: never a
    folder holding anything); torch makes it again when it first writes a compiled kernel. A command line points the
    cache into its own temporary folder instead (:func:`private_torch_caches`); a ``TORCHINDUCTOR_CACHE_DIR`` the
    user set is left alone."""

    def __enter__(self) -> None:
        self.path = None
        if "TORCHINDUCTOR_CACHE_DIR" in os.environ:
            return
        path = _default_compile_cache()
        self.path = None if os.path.lexists(path) else path

    def __exit__(self, *exc: object) -> None:
        if self.path is not None and os.environ.get("TORCHINDUCTOR_CACHE_DIR") in (None, self.path):
            try:
                os.rmdir(self.path)
            except OSError:  # not made, or something was written there: torch's now
                pass
