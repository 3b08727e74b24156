"""AdamW over the tuned slices, on fp32 master copies, with loss scaling for fp16 (Section 4.3, 5.3).

Mixed precision that trains. A bf16 number near 0.02 (a typical LLaMA2 weight) is 1.2e-4 away from its
neighbours, while an AdamW step at the paper's lr 2e-5 moves a weight by about 2e-5: stored in bf16, most
updates round away (measured on a Llama-shaped model: after 4 steps, 69% of the tuned entries had not moved).
So whatever the model's dtype, the optimizer owns an fp32 *master* of every tuned tensor or slice, keeps its AdamW
state in fp32, accumulates gradients in fp32, steps the master and casts it into the model after each step. The
forward and backward run in the model's dtype. There is no way around the masters through this class, so pure
low-precision training cannot happen through the public API or the CLI.

- an fp32 model's whole tuned tensors are their own masters (nothing copied; the previous behaviour);
- tuned *rows* of a tensor (a head's slice) get a leaf copy of just those rows, so optimizer state and weight decay
  cover tuned values only, and frozen rows are never written;
- fp16 runs scale the loss (:class:`LossScaler`, dynamic, as ``torch.amp.GradScaler``): a step whose gradients
  overflow is skipped and the scale halves.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor
from circuits.models.backend import Model, TunableTensor

from circuits.models.backend import check_dtype as check_device  # noqa: F401  (fp16 on a CPU: one clear error)
from circuits.sft import plan as hm

PRECISIONS: tuple[str, ...] = ("float32", "bfloat16", "float16")
_TORCH = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def torch_dtype(name: str) -> torch.dtype:
    if name not in _TORCH:
        raise ValueError(f"Unknown dtype {name!r}; accepted: {', '.join(PRECISIONS)}")
    return _TORCH[name]


@dataclass
class _Entry:
    name: str
    param: Tensor  # the model's parameter (any dtype)
    master: Tensor  # fp32 leaf the optimizer steps (``param`` itself for whole fp32 tensors)
    index: Tensor | None  # tuned rows along the TransformerLens tensor's dim 0, None for the whole tensor
    tensor: TunableTensor  # where the TransformerLens tensor lives in ``param`` (on a Bridge: HF rows/columns)

    @property
    def shared(self) -> bool:
        return self.master is self.param


class SliceOptimizer:
    """AdamW over the tuned rows only, on fp32 masters (see the module docstring).

    Use: :meth:`attach` before the backward passes (it moves each gradient into its master's fp32 ``.grad`` as
    soon as autograd has it, freeing the low-precision one), :meth:`gradients` for the all-reduce across ranks,
    :meth:`step` (unscale, skip on overflow, AdamW, cast into the model), :meth:`zero_grad`.
    """

    def __init__(self, model: Model, plan: hm.TuningPlan, config) -> None:
        params = model.backend.tunable_tensors()
        self.entries: list[_Entry] = []
        for t in plan.tensors:
            tt = params[t.name]
            p = tt.param
            index = None if t.rows is None else torch.tensor(t.rows, dtype=torch.long, device=p.device)
            if index is None and p.dtype == torch.float32 and tt.plain:
                master = p  # AdamW is element-wise: stepping the parameter in its own layout is the same step
            else:  # an fp32 copy in TransformerLens's layout (of the tuned rows)
                master = tt.to_tl(p.detach(), index).to(torch.float32).clone().requires_grad_(True)
            self.entries.append(_Entry(t.name, p, master, index, tt))
        self.optimizer = torch.optim.AdamW([e.master for e in self.entries], lr=config.lr, betas=tuple(config.betas),
                                           eps=config.eps, weight_decay=config.weight_decay)

    # --- gradients ---------------------------------------------------------------------------------

    def attach(self) -> list:
        """Hooks that add each tuned parameter's fresh gradient (its tuned rows, in fp32) to the master's ``.grad``
        and drop the parameter's own, once per backward pass. Returns the handles; the caller removes them."""
        return hm.all_or_none(e.param.register_post_accumulate_grad_hook(lambda p, e=e: self._take(e))
                              for e in self.entries if not e.shared)

    @staticmethod
    def _take(e: _Entry) -> None:
        g = e.param.grad
        if g is None:
            return
        g = e.tensor.grad_to_tl(g, e.index).to(torch.float32)  # TransformerLens layout, tuned rows
        if e.master.grad is None:
            e.master.grad = g
        else:
            e.master.grad.add_(g)
        e.param.grad = None

    def gradients(self) -> list[Tensor]:
        """Every master's fp32 gradient, zeros where no backward pass reached it (a rank with no samples in a step
        still joins the all-reduce)."""
        out = []
        for e in self.entries:
            if e.master.grad is None:
                e.master.grad = torch.zeros_like(e.master)
            out.append(e.master.grad)
        return out

    # --- the step ----------------------------------------------------------------------------------

    def step(self, scaler: LossScaler | None = None) -> bool:
        """Unscale (fp16), skip the step when a gradient is not finite (fp16: the scale halves), else AdamW on the
        masters and cast them into the model. Returns whether the weights changed."""
        grads = self.gradients()
        if scaler is not None and scaler.enabled:
            ok = scaler.unscale_(grads)
            if not ok:
                return False
        self.optimizer.step()
        self.write_back()
        return True

    @torch.no_grad()
    def write_back(self) -> None:
        """Cast the masters into the model's tuned tensors and rows (frozen rows are never written)."""
        for e in self.entries:
            if e.shared:
                continue
            e.tensor.write(e.master.detach(), e.index)

    def zero_grad(self) -> None:
        for e in self.entries:
            e.param.grad = None
            e.master.grad = None

    def set_lr(self, lr: float) -> None:
        for group in self.optimizer.param_groups:
            group["lr"] = lr

    # --- state -------------------------------------------------------------------------------------

    def masters(self) -> dict[str, Tensor]:
        """Tuned values in fp32 by tensor name (rows only for sliced tensors): what ``delta.pt`` stores."""
        return {e.name: e.tensor.to_tl(e.master.detach()) if e.shared else e.master.detach() for e in self.entries}

    @torch.no_grad()
    def load_masters(self, values: dict[str, Tensor]) -> None:
        """Set the masters (from a checkpoint's fp32 delta) and cast them into the model."""
        for e in self.entries:
            value = values[e.name].to(device=e.master.device, dtype=e.master.dtype)
            e.master.copy_(e.tensor.from_tl(value) if e.shared else value)
        self.write_back()

    def state_dict(self) -> dict:
        return self.optimizer.state_dict()

    def load_state_dict(self, state: dict) -> None:
        self.optimizer.load_state_dict(state)


class LossScaler:
    """Dynamic loss scaling for fp16 (Micikevicius et al., 2018; the rule of ``torch.amp.GradScaler``).

    The loss is multiplied by ``scale`` before backward so small fp16 gradients do not flush to zero; gradients
    are divided by it in fp32 before the step. A step with an inf/NaN gradient is skipped and the scale halves;
    after ``growth_interval`` good steps in a row it doubles. Disabled (scale 1, never skips) unless fp16.
    """

    def __init__(self, enabled: bool, init_scale: float = 2.0**16, growth_interval: int = 2000,
                 reduce=None) -> None:
        self.enabled = enabled
        self.scale = init_scale if enabled else 1.0
        self.growth_interval = growth_interval
        self.good_steps = 0
        self.skipped = 0
        # Across ranks every rank must take the same decision: ``reduce(flag)`` returns the logical OR.
        self._reduce = reduce

    def unscale_(self, grads: list[Tensor]) -> bool:
        """Divide ``grads`` by the scale in place; False (and the scale halves) when any is not finite."""
        found_inf = torch.zeros((), dtype=torch.float32, device=grads[0].device if grads else "cpu")
        for g in grads:
            local = g.to_local() if hasattr(g, "to_local") else g
            found_inf = torch.maximum(found_inf, (~torch.isfinite(local)).any().float().to(found_inf.device))
        if self._reduce is not None:
            found_inf = self._reduce(found_inf)
        if bool(found_inf):
            self.scale *= 0.5
            self.good_steps = 0
            self.skipped += 1
            return False
        for g in grads:
            g.mul_(1.0 / self.scale)
        self.good_steps += 1
        if self.good_steps % self.growth_interval == 0:
            self.scale *= 2.0
        return True

    def state_dict(self) -> dict:
        return {"enabled": self.enabled, "scale": self.scale, "good_steps": self.good_steps, "skipped": self.skipped}

    def load_state_dict(self, state: dict) -> None:
        self.scale, self.good_steps, self.skipped = state["scale"], state["good_steps"], state.get("skipped", 0)
