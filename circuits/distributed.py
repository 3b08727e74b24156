"""Ranks of a ``torchrun`` launch: which process this is, and the few collectives the jobs share.

Every job runs unchanged in one process; under ``torchrun --nproc-per-node N [--nnodes M ...] -m circuits ...``
(or any script that initialised ``torch.distributed``) the jobs split their work across the ranks with the
helpers here, and rank 0 alone writes results. Work is always cut into items decided by the job, never by the
number of ranks, so a rank computes exactly what one process computes for its items and the gathered result
equals a one-process run bit for bit (``docs/scale.md``).

- :func:`init_from_env` starts the process group from torchrun's environment (NCCL on GPUs, gloo on CPU) and puts
  each rank on its own GPU (``LOCAL_RANK``);
- :func:`rank`, :func:`world_size`, :func:`is_main`, :func:`device`: where this process stands;
- :func:`assign` and :func:`map_items`: a deterministic split of work items over ranks, and the gather;
- :func:`broadcast_object`, :func:`all_gather_objects`, :func:`barrier`: thin wrappers that are no-ops in one process.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import torch
import torch.distributed as dist

T = TypeVar("T")
R = TypeVar("R")


def is_distributed() -> bool:
    """Whether ``torch.distributed`` is initialised with more than one rank."""
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def rank() -> int:
    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


def world_size() -> int:
    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


def is_main() -> bool:
    """Rank 0, the one that writes results and prints (True in one process)."""
    return rank() == 0


def launched_by_torchrun() -> bool:
    return int(os.environ.get("WORLD_SIZE", "1")) > 1 and "RANK" in os.environ


def device(n_devices: int = 1) -> str:
    """This rank's (first) device: ``cuda:LOCAL_RANK * n_devices`` where GPUs are visible, else ``cpu``.

    A rank whose model spans ``n_devices`` GPUs (TransformerLens's ``n_devices``: consecutive layers on consecutive
    GPUs from the model's first device) owns GPUs ``LOCAL_RANK * n_devices ... + n_devices - 1`` of its node.
    """
    if torch.cuda.is_available():
        return f"cuda:{int(os.environ.get('LOCAL_RANK', '0')) * n_devices}"
    return "cpu"


def collective_device() -> torch.device:
    """Where this rank's collectives run: its current CUDA device under NCCL, else the CPU (gloo)."""
    if dist.is_available() and dist.is_initialized() and dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def use_devices(n_devices: int = 1) -> str:
    """Make this rank's first device the current CUDA device (collectives run there) and return it; checks that
    the node has the GPUs that ``n_devices`` per rank needs."""
    first = device(n_devices)
    if first.startswith("cuda"):
        local = int(os.environ.get("LOCAL_RANK", "0"))
        local_world = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
        if local_world * n_devices > torch.cuda.device_count():
            raise ValueError(f"{local_world} processes per node x n_devices {n_devices} needs "
                             f"{local_world * n_devices} GPUs; this node has {torch.cuda.device_count()}")
        torch.cuda.set_device(local * n_devices)
    return first


@dataclass
class Launch:
    """A process group this module started (and so stops, with :meth:`close`)."""

    backend: str
    owned: bool

    def close(self) -> None:
        if self.owned and dist.is_initialized():
            dist.destroy_process_group()


def init_from_env() -> Launch | None:
    """Start ``torch.distributed`` when launched by ``torchrun`` with more than one process.

    Returns ``None`` in a plain one-process run (nothing to do), else a :class:`Launch` whose ``close()`` ends the
    group. The backend is NCCL where CUDA is available and gloo otherwise (the CPU tests); each rank is put on GPU
    ``LOCAL_RANK`` first, so collectives and models of different ranks never share a GPU.
    """
    if dist.is_available() and dist.is_initialized():
        return Launch(dist.get_backend(), owned=False)
    if not launched_by_torchrun():
        return None
    backend = "nccl" if torch.cuda.is_available() else "gloo"
    if backend == "nccl":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    dist.init_process_group(backend)
    return Launch(backend, owned=True)


def barrier() -> None:
    if is_distributed():
        dist.barrier()


def broadcast_object(obj: T | None, src: int = 0) -> T:
    """``obj`` as rank ``src`` has it, on every rank (the object itself in one process)."""
    if not is_distributed():
        return obj  # type: ignore[return-value]
    box = [obj]
    dist.broadcast_object_list(box, src=src)
    return box[0]  # type: ignore[return-value]


def on_main(fn: Callable[[], T]) -> T:
    """Compute ``fn()`` on rank 0 only and hand the result to every rank (for work that must agree exactly
    across ranks, such as building prompt pairs, which filters on the model's own answers)."""
    value = fn() if is_main() else None
    return broadcast_object(value)


def all_gather_objects(obj: Any) -> list[Any]:
    """Every rank's ``obj``, in rank order (``[obj]`` in one process)."""
    if not is_distributed():
        return [obj]
    out: list[Any] = [None] * world_size()
    dist.all_gather_object(out, obj)
    return out


def assign(costs: Sequence[float], n_ranks: int) -> list[int]:
    """The rank of each work item: longest item first onto the least-loaded rank (ties: lower rank).

    Deterministic in ``costs`` and ``n_ranks``, so every rank derives the same assignment without talking.
    Which rank computes an item never changes the item's result.
    """
    load = [0.0] * n_ranks
    owner = [0] * len(costs)
    for i in sorted(range(len(costs)), key=lambda i: (-costs[i], i)):
        r = min(range(n_ranks), key=lambda r: (load[r], r))
        owner[i] = r
        load[r] += costs[i]
    return owner


def check_enough_work(n_items: int, what: str, n_ranks: int | None = None) -> None:
    """One clear error when there are more ranks than work items (some ranks would idle)."""
    n_ranks = world_size() if n_ranks is None else n_ranks
    if n_ranks > n_items:
        raise ValueError(f"{n_ranks} processes but only {n_items} {what} to split across them; "
                         f"launch at most {n_items} (torchrun --nproc-per-node)")


def map_items(fn: Callable[[T], R], items: Sequence[T], costs: Sequence[float] | None = None,
              what: str = "work items") -> list[R]:
    """``[fn(x) for x in items]``, each item computed by one rank (:func:`assign`) and the results gathered to
    every rank in item order. In one process it is the plain list comprehension."""
    if not is_distributed():
        return [fn(x) for x in items]
    check_enough_work(len(items), what)
    owner = assign(list(costs) if costs is not None else [1.0] * len(items), world_size())
    me = rank()
    mine = {i: fn(x) for i, x in enumerate(items) if owner[i] == me}
    merged: dict[int, R] = {}
    for part in all_gather_objects(mine):
        merged.update(part)
    return [merged[i] for i in range(len(items))]
