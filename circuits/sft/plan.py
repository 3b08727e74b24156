"""Which parameters Precise SFT tunes, and the per-head gradient masks that enforce it (Section 4.3, 5.3).

A *tuning plan* lists, for every parameter tensor that is tuned at all, which rows along its first
(head) dimension are tuned and the factor their gradient is multiplied by:

- a selected head ``(l, h)`` owns ``W_Q[h]``, ``b_Q[h]``, ``W_O[h]`` of layer ``l`` and, in plain
  multi-head attention, ``W_K[h]``, ``b_K[h]``, ``W_V[h]``, ``b_V[h]``;
- grouped-query attention (TransformerLens's ``_W_K/_W_V/_b_K/_b_V``, shape
  ``[n_kv_heads, d_model, d_head]``) shares one K/V head between ``n_heads // n_kv_heads`` query
  heads; query head ``h`` reads K/V head ``h // (n_heads // n_kv_heads)``. ``KVPolicy`` says what
  happens to the shared K/V (see :data:`DEFAULT_KV_POLICY`);
- a selected MLP owns all its weights and biases (gradient unscaled);
- ``b_O`` is a per-layer sum over heads, not a head slice, so Precise SFT leaves it frozen;
- full SFT is the plan with every tensor whole and unscaled;
- a bias that is zero everywhere is TransformerLens's placeholder for a bias the architecture does not have
  (Llama's Q/K/V/O and MLP biases, the gated MLP's ``b_in`` added after the gate, the unembedding's ``b_U``):
  neither plan tunes it (:func:`is_placeholder`), since the paper tunes the model's own parameters and a model with
  them could not be written back to its architecture (:mod:`circuits.sft.export`).

On both backends a plan names TransformerLens tensors (:meth:`~circuits.models.backend.Backend.tunable_tensors`). On a
``TransformerBridge`` (TransformerLens 4) the ``W_Q``/``W_K``/``W_V``/``W_O`` are views with no gradient of the
Hugging Face weights, so the masks go on those: head ``h`` is rows ``h*d_head:(h+1)*d_head`` of ``q_proj`` (of
``k_proj``/``v_proj`` for K/V head ``h // group``, the same ``kv_policy``) and the same columns of ``o_proj``;
a selected MLP is its ``gate_proj``/``up_proj``/``down_proj``. The values, rescaling and plan are the same.

Head-slice gradients are rescaled by ``H / h`` per layer (``H`` heads in the layer, ``h`` selected in
it), following the paper (Section 5.3). With Adam the update is almost invariant to a constant gradient
factor (it enters only against ``eps``), so the factor mainly matters for SGD-like optimizers; it is
applied exactly as stated either way and tested.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from torch import Tensor
from torch.utils.hooks import RemovableHandle
from circuits.models.backend import Model, TunableTensor

from circuits.sft.config import DEFAULT_KV_POLICY, KV_POLICIES, KVPolicy  # noqa: F401  (declared with the config)
from circuits.types import Head

# "shared": a K/V head is tuned when any of its query heads is selected. This keeps the paper's
# Q/K/V/O parameter set for every selected head (on LLaMA2-7B, which has no grouping, K/V are per
# head); the cost is that the group's other query heads see changed keys/values too. Those heads are
# listed in ``TuningPlan.side_effect_heads`` so the change is visible. "never" tunes only Q and O.


@dataclass(frozen=True)
class TunedTensor:
    """One parameter tensor with tuned rows.

    ``rows`` are indices along dim 0 (head or K/V-head index) or ``None`` for the whole tensor.
    ``scale`` multiplies the gradient of the tuned rows; frozen rows get gradient 0.
    """

    name: str
    rows: tuple[int, ...] | None
    scale: float = 1.0


@dataclass(frozen=True)
class TuningPlan:
    tensors: tuple[TunedTensor, ...]
    heads: tuple[Head, ...] = ()
    mlps: tuple[int, ...] = ()
    kv_policy: KVPolicy = DEFAULT_KV_POLICY
    full: bool = False
    side_effect_heads: tuple[Head, ...] = field(default=())

    @property
    def names(self) -> list[str]:
        return [t.name for t in self.tensors]

    def lowest_layer(self) -> int | None:
        layers = [_layer_of(t.name) for t in self.tensors]
        if any(layer is None for layer in layers):
            return 0
        return min(layers) if layers else None  # type: ignore[type-var]

    def to_json(self) -> dict:
        return {
            "full": self.full,
            "heads": [list(h) for h in self.heads],
            "mlps": list(self.mlps),
            "kv_policy": self.kv_policy,
            "side_effect_heads": [list(h) for h in self.side_effect_heads],
            "tensors": [{"name": t.name, "rows": None if t.rows is None else list(t.rows), "scale": t.scale} for t in self.tensors],
        }

    @classmethod
    def from_json(cls, data: dict) -> "TuningPlan":
        return cls(
            tensors=tuple(TunedTensor(t["name"], None if t["rows"] is None else tuple(t["rows"]), float(t["scale"])) for t in data["tensors"]),
            heads=tuple(Head(*h) for h in data["heads"]),
            mlps=tuple(data["mlps"]),
            kv_policy=data["kv_policy"],
            full=data["full"],
            side_effect_heads=tuple(Head(*h) for h in data.get("side_effect_heads", [])),
        )


def _layer_of(name: str) -> int | None:
    parts = name.split(".")
    return int(parts[1]) if parts[0] == "blocks" else None


def is_placeholder(name: str, param: Tensor) -> bool:
    """Whether ``param`` is a bias that is zero everywhere: TransformerLens's stand-in for a bias the original
    architecture does not have. (A real bias of a trained model is never exactly zero in every entry.)"""
    return name.split(".")[-1].startswith(("b_", "_b_")) and not bool(param.detach().any())


def is_grouped(model: Model, params: dict[str, TunableTensor] | None = None) -> bool:
    """Whether K/V heads are shared (TransformerLens's grouped ``_W_K``/``_W_V``), on either backend."""
    params = model.backend.tunable_tensors() if params is None else params
    return "blocks.0.attn._W_K" in params


def plan_tuning(
    model: Model,
    heads: list[Head] | tuple[Head, ...] = (),
    mlps: list[int] | tuple[int, ...] = (),
    kv_policy: KVPolicy = DEFAULT_KV_POLICY,
    rescale: bool = True,
) -> TuningPlan:
    """The tuning plan for Precise SFT on ``heads`` (``(layer, head)``) and ``mlps`` (layer indices)."""
    cfg = model.cfg
    if kv_policy not in KV_POLICIES:
        raise ValueError(f"kv_policy must be one of {KV_POLICIES}, got {kv_policy!r}")
    heads = tuple(sorted(set(Head(int(l), int(h)) for l, h in heads)))
    mlps = tuple(sorted(set(int(m) for m in mlps)))
    for l, h in heads:
        if not (0 <= l < cfg.n_layers and 0 <= h < cfg.n_heads):
            raise ValueError(f"head {l}.{h} out of range for a model with {cfg.n_layers} layers x {cfg.n_heads} heads")
    for m in mlps:
        if not 0 <= m < cfg.n_layers:
            raise ValueError(f"MLP {m} out of range for a model with {cfg.n_layers} layers")
    if not heads and not mlps:
        raise ValueError("Precise SFT needs at least one head or MLP; use full_plan() for full SFT")
    tunable = model.backend.tunable_tensors()
    params = {n: t.param for n, t in tunable.items()}
    if heads and "blocks.0.attn.W_Q" not in params:
        raise ValueError("Precise SFT of heads needs the attention weights under TransformerLens's names; this model's "
                         f"architecture ({getattr(model.cfg, 'architecture', None) or model.cfg.original_architecture}) "
                         "is not mapped (supported on a TransformerBridge: Llama, Mistral, Qwen2, Qwen3, Gemma 2, Gemma 3)")
    by_layer: dict[int, list[int]] = defaultdict(list)
    for l, h in heads:
        by_layer[l].append(h)
    grouped = is_grouped(model, tunable)
    group = cfg.n_heads // cfg.n_key_value_heads if grouped and cfg.n_key_value_heads else 1
    tensors: list[TunedTensor] = []
    side: list[Head] = []
    for l, hs in sorted(by_layer.items()):
        scale = cfg.n_heads / len(hs) if rescale else 1.0
        rows = tuple(hs)
        prefix = f"blocks.{l}.attn."
        own = lambda name: prefix + name in params and not is_placeholder(prefix + name, params[prefix + name])  # noqa: E731
        for name in ("W_Q", "b_Q", "W_O"):
            if own(name):
                tensors.append(TunedTensor(prefix + name, rows, scale))
        if grouped:
            if kv_policy == "shared":
                kv_rows = tuple(sorted({h // group for h in hs}))
                for name in ("_W_K", "_b_K", "_W_V", "_b_V"):
                    if own(name):
                        tensors.append(TunedTensor(prefix + name, kv_rows, scale))
                side += [Head(l, q) for kv in kv_rows for q in range(kv * group, (kv + 1) * group) if q not in hs]
        else:
            for name in ("W_K", "b_K", "W_V", "b_V"):
                if own(name):
                    tensors.append(TunedTensor(prefix + name, rows, scale))
    for m in mlps:
        prefix = f"blocks.{m}.mlp."
        tensors += [TunedTensor(n, None, 1.0) for n, p in params.items() if n.startswith(prefix) and not is_placeholder(n, p)]
    return TuningPlan(tuple(tensors), heads, mlps, kv_policy, False, tuple(side))


def full_plan(model: Model) -> TuningPlan:
    """Full SFT: every parameter whole, gradient unscaled (TransformerLens's zero placeholder biases excepted; on a
    TransformerBridge, folded norms excepted, and a tensor tied to another, such as an unfolded tied unembedding,
    tuned once)."""
    missing = model.backend.untunable_parameters()
    if missing:
        raise ValueError(f"full SFT would leave {len(missing)} parameters of this model untuned, having no "
                         f"TransformerLens name ({', '.join(missing[:3])}{', ...' if len(missing) > 3 else ''}); "
                         "supported on a TransformerBridge: Llama, Mistral, Qwen2, Qwen3, Gemma 2, Gemma 3")
    seen: set[int] = set()
    tensors = []
    for n, t in model.backend.tunable_tensors().items():
        if is_placeholder(n, t.param) or id(t.param) in seen:
            continue
        seen.add(id(t.param))
        tensors.append(TunedTensor(n, None, 1.0))
    return TuningPlan(tuple(tensors), full=True)


def freeze_except(model: Model, plan: TuningPlan) -> None:
    """``requires_grad`` only on tensors in the plan, so backward stops at the lowest tuned layer."""
    model.backend.link_processed_weights()  # (a TL 3.9 Bridge's processed MLP: gradients reach the HF weights)
    params = model.backend.tunable_tensors()
    tuned = {id(params[name].param) for name in plan.names}
    for p in model.parameters():
        p.requires_grad_(id(p) in tuned)


def gradient_mask(param: Tensor | TunableTensor, entry: TunedTensor) -> Tensor | None:
    """Factor broadcast over the parameter's gradient: ``scale`` on tuned rows, 0 on frozen rows (``None``: no-op).
    ``param``: a TransformerLens parameter (rows along dim 0), or a :class:`TunableTensor` (on a Bridge: the rows of
    ``q_proj``/``k_proj``/``v_proj`` and the columns of ``o_proj`` that the plan's heads occupy)."""
    if not isinstance(param, TunableTensor):
        param = TunableTensor(entry.name, entry.name, param)
    return param.mask(entry.rows, entry.scale)


def register_gradient_masks(model: Model, plan: TuningPlan) -> list[RemovableHandle]:
    """Register a gradient hook per tuned tensor that applies :func:`gradient_mask`.

    Returns the handles; the caller removes them (in a ``finally``).
    """
    params = model.backend.tunable_tensors()

    def register() -> Iterator[RemovableHandle]:
        for entry in plan.tensors:
            t = params[entry.name]
            mask = gradient_mask(t, entry)
            if mask is not None:
                yield t.param.register_hook(lambda g, m=mask: g * m)

    return all_or_none(register())


def all_or_none(handles: Iterable[RemovableHandle]) -> list[RemovableHandle]:
    """The hooks ``handles`` registers one by one (a generator): all of them, or, when one registration fails, none
    (those already made are removed and the error is raised)."""
    made: list[RemovableHandle] = []
    try:
        for h in handles:
            made.append(h)
    except BaseException:
        for h in made:
            h.remove()
        raise
    return made


def count_tuned_parameters(model: Model, plan: TuningPlan) -> int:
    params = model.backend.tunable_tensors()
    total = 0
    for t in plan.tensors:
        p = params[t.name].param
        total += p.numel() if t.rows is None else p.numel() // params[t.name].shape[0] * len(t.rows)
    return total
