"""How a fine-tuning run spreads over processes: one process, data-parallel Precise SFT, or FSDP2-sharded full SFT.

:func:`strategy_for` picks one from the config and ``torch.distributed``; the training loop
(:func:`circuits.sft.train.finetune`) is the same for all three and calls a strategy for what differs.

- :class:`Local` (one process): the model trains in place; ``checkpoint.pt`` and ``delta.pt`` as before.
- :class:`Replicated` (Precise SFT on N ranks): every rank holds the whole model; the global batch of each step is
  split into N contiguous shards, so N ranks see the same samples per step as one process; after a step's backward
  passes only the tuned slices' fp32 gradients are all-reduced (summed: each rank's loss is already divided by the
  step's global target count), in one flat buffer. Checkpoints are rank 0's ``checkpoint.pt``, in the one-process
  format, read by rank 0 and broadcast on resume, so a run can resume on another number of ranks.
- :class:`Sharded` (full SFT on N ranks, or one rank with ``cpu_offload``): ``torch.distributed.fsdp.fully_shard``
  on every block, the embedding and the unembedding, then the root. Parameters and AdamW state are fp32 shards (the
  masters); compute runs in ``config.dtype`` (FSDP2's ``MixedPrecisionPolicy``) with fp32 gradient reduction;
  gradients are summed, not averaged, across ranks (``set_gradient_divide_factor(1)`` on every unit). Checkpoints are
  ``torch.distributed.checkpoint`` (DCP) folders, each rank writing its shards, swapped into ``checkpoint/``
  whole by rank 0; ``delta.pt`` is the full fp32 state dict gathered to rank 0's CPU.

Rank 0 alone writes results, each file atomically (:mod:`circuits.io`).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import tempfile
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from circuits.models.backend import Model

from circuits import distributed as D
from circuits.config import same_config
from circuits.io import read_json, save_torch, sibling_prefix, to_jsonable, write_json
from circuits.sft import plan as hm
from circuits.sft.delta import DELTA_FORMAT, apply_delta, extract_delta
from circuits.sft.optim import LossScaler, SliceOptimizer, torch_dtype

CHECKPOINT_FILE = "checkpoint.pt"
CHECKPOINT_DIR = "checkpoint"


def shard_of(batch: list[int], rank: int, world: int) -> list[int]:
    """Rank ``rank``'s contiguous share of one step's global batch (shares differ by at most one example)."""
    n = len(batch)
    return batch[rank * n // world : (rank + 1) * n // world]


def micro_batches(batch: list[int], micro_batch_size: int) -> list[list[int]]:
    return [batch[i : i + micro_batch_size] for i in range(0, len(batch), micro_batch_size)]


@contextlib.contextmanager
def checkpointed_blocks(model: Model, enabled: bool) -> Iterator[None]:
    """Activation checkpointing: each block keeps only its input in the forward pass and recomputes the rest in
    backward (about a third more compute for a fraction of the activation memory). Parameter names and hook points
    are unchanged, because the block's ``forward`` is wrapped in place rather than the block replaced."""
    if not enabled:
        yield
        return
    model.backend.checkpoint_blocks()  # each block's forward wrapped in place (the backend knows its keywords)
    try:
        yield
    finally:
        for block in model.blocks:
            block.__dict__.pop("forward", None)


class Local:
    """One process: the whole model, the whole batch."""

    name = "local"

    def __init__(self, config: Any) -> None:
        self.config = config
        self.rank, self.world = D.rank(), D.world_size()
        self.handles: list = []
        self.dtype = torch_dtype(config.dtype)

    # --- set-up ------------------------------------------------------------------------------------

    def check_model(self, model: Model) -> None:
        got = next(model.parameters()).dtype
        if got != self.dtype:
            raise ValueError(f"the model is {str(got).removeprefix('torch.')} but the config says dtype "
                             f"{self.config.dtype!r}; load it with load_model(..., dtype={self.config.dtype!r}) or set "
                             f"FinetuneConfig(dtype={str(got).removeprefix('torch.')!r}) (tuned values always keep "
                             "fp32 masters)")

    def setup(self, model: Model, plan: hm.TuningPlan) -> SliceOptimizer:
        hm.freeze_except(model, plan)
        optimizer = SliceOptimizer(model, plan, self.config)
        self.handles = hm.register_gradient_masks(model, plan)
        self.handles += optimizer.attach()
        return optimizer

    def scaler(self) -> LossScaler:
        return LossScaler(self.config.dtype == "float16", reduce=self._any)

    def input_device(self, model: Model) -> str | torch.device:
        return model.cfg.device

    def teardown(self, model: Model) -> None:
        for h in self.handles:
            h.remove()
        self.handles = []

    # --- per step ----------------------------------------------------------------------------------

    def my_micro_batches(self, step: list[list[int]]) -> list[list[int]]:
        """This rank's micro-batches of one optimizer step (in one process: the step's own)."""
        if self.world == 1:
            return step
        batch = [i for mb in step for i in mb]
        return micro_batches(shard_of(batch, self.rank, self.world), self.config.micro_batch_size)

    def reduce_gradients(self, optimizer: SliceOptimizer) -> None:
        """Make every rank's gradients the sum over ranks (nothing to do in one process)."""

    def total(self, value: float, device: str | torch.device) -> float:
        """``value`` summed over ranks."""
        if self.world == 1:
            return value
        t = torch.tensor([value], dtype=torch.float64, device=D.collective_device())
        dist.all_reduce(t)
        return float(t.item())

    @staticmethod
    def _any(flag: torch.Tensor) -> torch.Tensor:
        if D.is_distributed():
            flag = flag.to(D.collective_device())
            dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        return flag

    # --- checkpoints and the delta -----------------------------------------------------------------

    def checkpoint_path(self, out: Path) -> Path:
        return out / CHECKPOINT_FILE

    def same_run(self, saved: dict) -> bool:
        """Whether a checkpoint's config is this run's: fields it lacks count as their defaults (older checkpoints
        resume), and activation checkpointing, which changes memory only, may differ."""
        saved = {**to_jsonable(saved), "activation_checkpointing": self.config.activation_checkpointing}
        return same_config(saved, self.config)

    def load_checkpoint(self, out: Path, model: Model, optimizer: SliceOptimizer, scaler: LossScaler
                        ) -> tuple[int, list[float]]:
        """Resume from ``out/checkpoint.pt`` (rank 0 reads it and hands it to every rank); ``(0, [])`` when none."""
        if (out / CHECKPOINT_DIR).is_dir():
            raise ValueError(f"{out / CHECKPOINT_DIR} is a sharded (FSDP) checkpoint of full SFT on several ranks; "
                             "resume it with torchrun, or use another --out")
        def read() -> dict | None:  # tensors and plain values only: a checkpoint from elsewhere runs no code
            from circuits.sft.safe_load import load_checkpoint_file

            path = out / CHECKPOINT_FILE
            return load_checkpoint_file(path) if path.is_file() else None

        ckpt = D.on_main(read)
        if ckpt is None:
            return 0, []
        if not self.same_run(ckpt["config"]):
            raise ValueError(f"{out / CHECKPOINT_FILE} was written with a different config; use another --out or "
                             "delete it")
        apply_delta(model, ckpt["delta"])
        optimizer.load_masters(ckpt["delta"]["tensors"])
        optimizer.load_state_dict(ckpt["optimizer"])
        if "scaler" in ckpt:
            scaler.load_state_dict(ckpt["scaler"])
        return int(ckpt["step"]), list(ckpt["losses"])

    def delta(self, model: Model, plan: hm.TuningPlan, optimizer: SliceOptimizer, meta: dict | None = None
              ) -> dict:
        return extract_delta(model, plan, meta, values=optimizer.masters())

    def save_checkpoint(self, out: Path, step: int, losses: list[float], model: Model, plan: hm.TuningPlan,
                        optimizer: SliceOptimizer, scaler: LossScaler) -> None:
        if D.is_main():
            save_torch({"step": step, "losses": losses, "config": self.config.to_json(),
                        "delta": self.delta(model, plan, optimizer), "optimizer": optimizer.state_dict(),
                        "scaler": scaler.state_dict()}, out / CHECKPOINT_FILE)
        D.barrier()

    def save_delta(self, out: Path, model: Model, plan: hm.TuningPlan, optimizer: SliceOptimizer,
                   meta: dict) -> None:
        if D.is_main():
            save_torch(self.delta(model, plan, optimizer, meta), out / "delta.pt")


class Replicated(Local):
    """Precise SFT on N ranks: the whole model on each, the tuned slices' gradients all-reduced."""

    name = "replicated"

    def setup(self, model: Model, plan: hm.TuningPlan) -> SliceOptimizer:
        optimizer = super().setup(model, plan)
        # Every rank starts from rank 0's tuned values, so replicas cannot drift even if loading differed.
        # Collectives run on the rank's own collective device: a model spread over GPUs has masters on several.
        masters = [e.master.detach() for e in optimizer.entries]
        flat = torch.cat([m.reshape(-1).to(D.collective_device()) for m in masters])
        dist.broadcast(flat, src=0)
        self._unflatten(flat, masters)
        optimizer.write_back()
        return optimizer

    def reduce_gradients(self, optimizer: SliceOptimizer) -> None:
        grads = optimizer.gradients()
        # One collective for all tuned slices (<1% of the weights).
        flat = torch.cat([g.reshape(-1).to(D.collective_device()) for g in grads])
        dist.all_reduce(flat)
        self._unflatten(flat, grads)

    @staticmethod
    @torch.no_grad()
    def _unflatten(flat: torch.Tensor, tensors: list[torch.Tensor]) -> None:
        offset = 0
        for t in tensors:
            t.copy_(flat[offset : offset + t.numel()].view_as(t))
            offset += t.numel()


class Sharded(Local):
    """Full SFT with FSDP2: fp32 sharded parameters and AdamW state, compute in ``config.dtype``."""

    name = "sharded"

    def __init__(self, config: Any) -> None:
        super().__init__(config)
        self._saved: dict[str, Any] = {}
        self._checkpointing: contextlib.ExitStack | None = None

    def check_model(self, model: Model) -> None:
        got = next(model.parameters()).dtype
        if got != torch.float32:
            raise ValueError(f"sharded full SFT keeps fp32 parameter shards as masters and computes in "
                             f"{self.config.dtype}: load the model in float32 (on the CPU), not "
                             f"{str(got).removeprefix('torch.')}")

    def setup(self, model: Model, plan: hm.TuningPlan) -> SliceOptimizer:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import CPUOffloadPolicy, FSDPModule, MixedPrecisionPolicy, OffloadPolicy, fully_shard

        if not (dist.is_available() and dist.is_initialized()):
            # One GPU with the optimizer state on the CPU: FSDP needs a process group, of one rank.
            comm = "nccl" if torch.cuda.is_available() else "gloo"
            dist.init_process_group(comm, store=dist.HashStore(), rank=0, world_size=1)
            # Kept until the process ends: the sharded model needs it for every forward pass.
            atexit.register(lambda: dist.is_initialized() and dist.destroy_process_group())
        device = D.device()
        kind = torch.device(device).type
        mesh = init_device_mesh(kind, (dist.get_world_size(),))
        hm.freeze_except(model, plan)
        # TransformerLens casts activations to cfg.dtype in places (attention scores, norms): with bf16 compute it
        # must say bf16, as for a model loaded in bf16; and it moves inputs to cfg.device.
        self._saved = {"dtype": model.cfg.dtype, "device": model.cfg.device}
        model.cfg.dtype = self.dtype
        # Buffers FSDP does not cast (it casts parameters; a processed Bridge's zero b_U is one) are put in the
        # compute dtype here (and back in teardown).
        self._cast_buffers = model.backend.cast_unsharded_buffers(device, self.dtype)
        model.cfg.device = device
        mp = MixedPrecisionPolicy(param_dtype=self.dtype, reduce_dtype=torch.float32) if self.dtype != torch.float32 \
            else MixedPrecisionPolicy()
        offload = CPUOffloadPolicy(pin_memory=torch.cuda.is_available()) if self.config.cpu_offload else OffloadPolicy()
        self._checkpointing = contextlib.ExitStack()
        self._checkpointing.enter_context(checkpointed_blocks(model, self.config.activation_checkpointing))
        if not isinstance(model, FSDPModule):  # a model sharded by an earlier run stays as it is
            with torch.no_grad():  # FSDP shards contiguous parameters only (circuits stores some transposed)
                for param in model.parameters():
                    if not param.is_contiguous():
                        param.data = param.data.contiguous()
            units = [*model.blocks, model.embed, model.unembed]
            units += [m for m in (getattr(model, "pos_embed", None), model.ln_final)
                      if m is not None and any(True for _ in m.parameters())]
            for unit in units:
                fully_shard(unit, mesh=mesh, mp_policy=mp, offload_policy=offload)
            fully_shard(model, mesh=mesh, mp_policy=mp, offload_policy=offload)
        # Each rank's loss is already divided by the step's global target count: sum gradients, do not average.
        # Set on every unit (the root's setting does not reach the others), as a plain SUM (gloo has no PREMUL_SUM).
        for module in model.modules():
            if isinstance(module, FSDPModule):
                module.set_gradient_divide_factor(1.0)
                module.set_force_sum_reduction_for_comms(True)
        return SliceOptimizer(model, plan, self.config)

    def input_device(self, model: Model) -> str | torch.device:
        return D.device()

    def teardown(self, model: Model) -> None:
        super().teardown(model)
        if self._checkpointing is not None:
            self._checkpointing.close()
        if self._saved:
            model.cfg.dtype = self._saved["dtype"]
        for module, bias in getattr(self, "_cast_buffers", []):
            module._buffers["bias"] = bias

    def my_micro_batches(self, step: list[list[int]]) -> list[list[int]]:
        """This rank's micro-batches, padded with empty ones to the most any rank has: every FSDP backward pass is
        a collective, so every rank must run as many."""
        batch = [i for mb in step for i in mb]
        counts = [len(micro_batches(shard_of(batch, r, self.world), self.config.micro_batch_size))
                  for r in range(self.world)]
        mine = micro_batches(shard_of(batch, self.rank, self.world), self.config.micro_batch_size)
        return mine + [[] for _ in range(max(counts) - len(mine))]

    def delta(self, model: Model, plan: hm.TuningPlan, optimizer: SliceOptimizer, meta: dict | None = None
              ) -> dict:
        """The full fp32 weights, gathered to rank 0's CPU (a collective: every rank calls it; others get {})."""
        params = model.backend.tunable_tensors()  # TransformerLens names and layout (on a Bridge: of the HF weights)
        full = model.backend.gather_parameters({params[t.name].key for t in plan.tensors})
        if not D.is_main():
            return {}
        tensors = {t.name: params[t.name].on(full[params[t.name].key]).read().to(torch.float32).contiguous()
                   for t in plan.tensors}
        return {"format": DELTA_FORMAT, "plan": plan.to_json(), "tensors": tensors, "meta": meta or {}}

    def save_delta(self, out: Path, model: Model, plan: hm.TuningPlan, optimizer: SliceOptimizer,
                   meta: dict) -> None:
        delta = self.delta(model, plan, optimizer, meta)
        if D.is_main():
            save_torch(delta, out / "delta.pt")
        D.barrier()

    def checkpoint_path(self, out: Path) -> Path:
        return out / CHECKPOINT_DIR

    def save_checkpoint(self, out: Path, step: int, losses: list[float], model: Model, plan: hm.TuningPlan,
                        optimizer: SliceOptimizer, scaler: LossScaler) -> None:
        """A DCP folder (each rank writes its shards) built beside ``out/checkpoint`` and swapped in whole by rank 0
        once every rank has finished, with ``meta.json`` (step, losses, config, loss scale) written last."""
        import torch.distributed.checkpoint as dcp

        tmp = out / f".{CHECKPOINT_DIR}-tmp"
        if D.is_main():
            shutil.rmtree(tmp, ignore_errors=True)
            out.mkdir(parents=True, exist_ok=True)
        D.barrier()
        state = model.backend.checkpoint_state(optimizer.optimizer)
        dcp.save(state, checkpoint_id=str(tmp))
        D.barrier()
        if D.is_main():
            write_json(tmp / "meta.json", {"step": step, "losses": losses, "config": self.config.to_json(),
                                           "scaler": scaler.state_dict(), "world_size": self.world})
            final = out / CHECKPOINT_DIR
            old = Path(tempfile.mkdtemp(prefix=sibling_prefix(CHECKPOINT_DIR, "old"), dir=out)) if final.exists() else None
            if old is not None:
                os.replace(final, old / "x")
            os.replace(tmp, final)
            if old is not None:
                shutil.rmtree(old, ignore_errors=True)
        D.barrier()

    def load_checkpoint(self, out: Path, model: Model, optimizer: SliceOptimizer, scaler: LossScaler
                        ) -> tuple[int, list[float]]:
        from circuits.sft.safe_load import dcp_load

        if (out / CHECKPOINT_FILE).is_file():
            raise ValueError(f"{out / CHECKPOINT_FILE} is a one-process checkpoint; resume it in one process "
                             "(without torchrun or --cpu-offload), or use another --out")
        path = out / CHECKPOINT_DIR
        meta = D.on_main(lambda: read_json(path / "meta.json") if (path / "meta.json").is_file() else None)
        if meta is None:
            return 0, []
        if not self.same_run(meta["config"]):
            raise ValueError(f"{path} was written with a different config; use another --out or delete it")
        state = model.backend.checkpoint_state(optimizer.optimizer, init=True)
        dcp_load(state, path)  # reshards when the world size changed; unpickles only the format's own records
        model.backend.restore_checkpoint_state(optimizer.optimizer, state)
        scaler.load_state_dict(meta["scaler"])
        return int(meta["step"]), list(meta["losses"])


def strategy_for(config: Any) -> Local:
    """:class:`Sharded` for full SFT on several ranks or with ``cpu_offload``; :class:`Replicated` for Precise SFT on
    several ranks; else :class:`Local`. Raises one clear error when the global batch does not split over the ranks."""
    world = D.world_size()
    if config.batch_size % world:
        raise ValueError(f"the global batch ({config.batch_size}) does not split over {world} processes; use a "
                         f"--batch-size that is a multiple of {world}")
    if config.full and (world > 1 or config.cpu_offload):
        warnings.filterwarnings("ignore", message=".*returned a view tensor.*")  # the unembedding's view is not written
        return Sharded(config)
    if world > 1:
        return Replicated(config)
    return Local(config)
