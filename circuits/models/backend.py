"""The seam between ``circuits`` and TransformerLens: the :class:`Backend` object every model carries as ``model.backend``.

A backend is what ``circuits`` needs of a model that the two TransformerLens lines provide differently, bound to one
model: ``model.backend.final_residual(tokens)``, ``model.backend.split_inputs()``. The implementations are classes
registered by name (:data:`BACKENDS`, :func:`register`), each declaring the TransformerLens line it serves:
:class:`circuits.models._hooked.HookedBackend` (3.9, ``HookedTransformer``) and
:class:`circuits.models._bridge.BridgeBackend` (4.3 or a later 4.x, ``TransformerBridge``, which wraps the Hugging
Face model); :mod:`circuits.models` imports those the installed line can run, so this module imports neither.
:func:`installed` is the registered class of the installed line (the one rule that reads the version is
:func:`circuits.versions.backend_line`); :func:`circuits.models.load_model` loads through it and attaches its
backend to the model it returns (:func:`attach`). :func:`backend_of` recognises a model a test built directly (by
the registered ``model_class`` it is an instance of) and attaches its backend. Outside :mod:`circuits.models` no
module branches on a backend: it asks ``model.backend`` for a capability. ``tests/unit/test_backend.py`` asserts
that every implementation defines the whole contract, that no module outside :mod:`circuits.models` imports more of
``transformer_lens`` than the model and cache classes or names a backend, and registers a toy backend in one module.

Every TransformerLens internal that the engines (:mod:`circuits.patching`), validation (:mod:`circuits.validate`),
explanations (:mod:`circuits.explain`), evaluation (:mod:`circuits.evaluation`) and fine-tuning (:mod:`circuits.sft`)
use comes from here; TransformerLens 3's own caches and attention class stay behind the seam.
:mod:`circuits.models.loading` keeps the loading steps both lines share.

Besides :class:`Backend`, the seam exports what does not depend on the model: the types :data:`Model` (the installed
line's model class, for annotations), :data:`ActivationCache` and :data:`FactoredMatrix`; :func:`act_name`
(``act_name("z", 3)`` is ``"blocks.3.attn.hook_z"``); :func:`apply_softcap`, :func:`softcap_enabled`,
:data:`POST_NORM_ARCHITECTURES`; :func:`head_linear` (per-head projection); :func:`block_devices`,
:func:`check_dtype`.

A model, on either backend, has ``cfg`` (``n_layers``, ``n_heads``, ``d_model``, ``d_head``, ``d_mlp``,
``d_vocab``, ``n_key_value_heads``, ``dtype``, ``device``), ``blocks[l]`` with ``ln1``/``ln2``/``attn``/``mlp``
(and ``ln1_post``/``ln2_post`` where a norm follows a sublayer), ``ln_final``, ``unembed``, ``run_with_hooks``,
``run_with_cache``, ``hooks`` and ``to_tokens``; the same hook names and shapes on both (``hook_k``/``hook_v``
carry ``n_kv_heads`` heads), and ``model(tokens, stop_at_layer=n_layers)`` returns the residual stream after the
last block on both (:meth:`Backend.final_residual`).

Many distinct prefixes run once, bodies continued with gradients (attribution, EAP-IG and the per-position engine ask
for these, never for a backend): :meth:`Backend.run_prefixes` (each row's first ``n[i]`` tokens, distinct ones run once
without gradients, left-padded with a mask: a backend's prefix state, or ``None`` where no row has one),
:meth:`Backend.continue_prefixes` (the final residual, or the residual entering a block, of each row's body after its
prefix, hooks on, gradients through the body; ``None`` runs the body as a whole prompt), :meth:`Backend.prefix_keys`
(the prefix's keys that :meth:`Backend.rotary_key_hook` leaves out while continuing: none on 3.9's rotary models, all
of them on the Bridge), :meth:`Backend.ungroup_prefix` (key/value heads repeated per query head, for runs inside
:meth:`Backend.split_inputs`), :meth:`Backend.prefix_kv_hooks` (the hooks whose whole-prompt values are a prefix's
keys and values, or ``None`` where they are not) and :meth:`Backend.prefix_from_kv` (a prefix state from them);
:meth:`Backend.block_runner` (one block alone on a suffix after those keys and values, the per-position engine's rows
joining at their sender's layer; ``None`` where blocks do not run alone). All of these apply only where
:meth:`Backend.prefix_sharing` is true (else engines run whole prompts: the same numbers).
"""

from __future__ import annotations

import weakref
from abc import ABC, abstractmethod
from contextlib import AbstractContextManager
from typing import Any, ClassVar

import torch
from jaxtyping import Float
from torch import Tensor

from circuits.models.hf_weights import TunableTensor
from circuits.versions import LINE_BACKENDS, SUPPORTED, UnsupportedTransformerLens, backend_line  # the one rule
from transformer_lens import ActivationCache, FactoredMatrix  # both lines
from transformer_lens.utilities import get_act_name  # both lines
from transformer_lens.utilities.activation_functions import apply_softcap, softcap_enabled  # both lines
from transformer_lens.utilities.architectures import POST_NORM_ARCHITECTURES  # both lines
from transformer_lens.utilities.attention import simple_attn_linear as _simple_attn_linear  # both lines
from transformer_lens.utilities.multi_gpu import get_device_for_block_index  # both lines


class Decoder(ABC):
    """Greedy decoding's forward passes over a left-padded batch (:meth:`Backend.decoder`): :meth:`residual` gives
    the final residual ``[row, pos, d_model]`` of the tokens given so far and not yet run (its last position is
    the next token's), :meth:`append` adds one token per row ``[row]``."""

    @abstractmethod
    def residual(self) -> Float[Tensor, "row pos d_model"]: ...

    @abstractmethod
    def append(self, next_tokens: Tensor) -> None: ...


class Backend(ABC):
    """The contract: what ``circuits`` reads of a model and asks it to do, where the two TransformerLens lines
    differ. An instance is bound to one model (``model.backend``, :attr:`model`); the class methods load a model
    and read a Hugging Face model before there is one. ``name`` is for the registry, messages and saved metadata,
    never for a branch; ``line`` is the TransformerLens line whose models it runs by default (``None``: only where
    attached by hand).

    Loading: :meth:`load`, :meth:`official_name`, :meth:`reference_weights`. Model facts the two lines keep in
    different places: :meth:`architecture`, :meth:`n_kv_heads`, :meth:`post_norms`, :meth:`end_unsupported`,
    :meth:`rotary_key_hook`. Attention at one position, piece by piece
    (:func:`circuits.patching.core.end_layers.attention_at_end`): :meth:`attn_qkv`, :meth:`attn_out`, :meth:`qk_norms`,
    :meth:`rotary`, :meth:`score_scale`, :meth:`score_softcap`, :meth:`sliding_window`, :meth:`attention_scores`.
    Output: :meth:`unembed_weights`, :meth:`logit_softcap`, :meth:`final_residual`. A shared prefix run once:
    :meth:`prefix_sharing`, :meth:`prefix_cache`, :meth:`continue_prefix`. Receivers' own inputs (edges):
    :meth:`split_inputs`. Devices: :meth:`spread`, :meth:`layer_device`, :meth:`output_device`. Fine-tuning under
    TransformerLens's names and per-head layout: :meth:`tunable_tensors`, :meth:`untunable_parameters`,
    :meth:`training_residual`, :meth:`link_processed_weights`, :meth:`checkpoint_blocks`,
    :meth:`cast_unsharded_buffers`, :meth:`gather_parameters`, :meth:`checkpoint_state`,
    :meth:`restore_checkpoint_state`. Generation: :meth:`decoder`.
    """

    name: ClassVar[str]  # the registry's key ("hooked", "bridge")
    model_class: ClassVar[type]  # the model class this backend runs (what backend_of recognises)
    line: ClassVar[int | None] = None  # the TransformerLens line (circuits.versions.backend_line) it is the default of

    def __init__(self, model: Any) -> None:
        # A weak reference: the model holds its backend, and a model without cycles is freed when its last name goes.
        self._model = weakref.ref(model)

    @property
    def model(self) -> Any:
        """The model this backend is bound to."""
        model = self._model()
        if model is None:
            raise ReferenceError(f"the model this {self.name} backend was bound to no longer exists: keep the model "
                                 "in a name while its backend is used (model = ...; model.backend.f(...))")
        return model

    # A deep copy of the model carries a backend bound to the copy; a pickled model is unpickled with its backend.
    def __deepcopy__(self, memo: dict) -> Backend:
        return type(self)(memo.get(id(self.model), self.model))

    def __reduce__(self) -> tuple:
        return (type(self), (self.model,))

    # --- loading (before there is a model) ----------------------------------------------------------------

    @classmethod
    @abstractmethod
    def load(cls, name: str, dtype: torch.dtype, device: str | torch.device, fold_ln: bool, use_cache: bool,
             n_devices: int) -> Any:
        """The model of ``name`` (what :func:`circuits.models.load_model` accepts), processed as the toolkit loads
        it, in eval mode (:func:`circuits.models.load_model` attaches the backend)."""

    @classmethod
    @abstractmethod
    def official_name(cls, name: str) -> str | None:
        """The hub name of an official TransformerLens model name or alias (``None`` where ``name`` is none)."""

    @staticmethod
    @abstractmethod
    def reference_weights(hf_model: Any) -> dict[str, Tensor]:
        """TransformerLens-named, unfolded weights of a Hugging Face model, as this line would load them (what
        :func:`circuits.sft.export.export_model` checks a delta against and writes back through)."""

    # --- model facts --------------------------------------------------------------------------------------

    @abstractmethod
    def architecture(self) -> str:
        """The Hugging Face architecture name (``"LlamaForCausalLM"``)."""

    @abstractmethod
    def n_kv_heads(self) -> int:
        """Key/value heads per layer (``n_heads`` without grouped-query attention)."""

    @abstractmethod
    def post_norms(self) -> bool:
        """Whether blocks normalise sublayer outputs before they join the residual (Gemma 2/3)."""

    @abstractmethod
    def end_unsupported(self) -> list[str]:
        """What the END-only engine (:mod:`circuits.patching.core.end_layers`) does not compute the way the model
        does (empty: supported)."""

    @abstractmethod
    def rotary_key_hook(self, layer: int) -> str:
        """The hook holding layer ``layer``'s keys as attention reads them (rotated where the model is rotary)."""

    # --- attention, piece by piece ------------------------------------------------------------------------

    @abstractmethod
    def attn_qkv(self, layer: int) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor]:
        """``W_Q [head d_model d_head], b_Q [head d_head], W_K, b_K, W_V, b_V`` (keys and values with their
        ``n_kv_heads`` heads, not repeated per query head), biases zero where the model has none."""

    @abstractmethod
    def attn_out(self, layer: int) -> tuple[Tensor, Tensor]:
        """``W_O [head d_head d_model]`` and ``b_O [d_model]`` (zero where the model has none)."""

    @abstractmethod
    def qk_norms(self, layer: int) -> tuple[Any, Any] | None:
        """The per-head query and key norms applied before rotary (Qwen3, Gemma 3), each callable on
        ``[n, d_head]``; ``None`` where the model has none."""

    @abstractmethod
    def rotary(self, layer: int, x: Tensor, pos: Tensor) -> Tensor:
        """Rotary embedding of ``x`` (``[..., pair, head, d_head]``) at each pair's own position ``pos [pair]``,
        with layer ``layer``'s own table; ``x`` unchanged for models without rotary."""

    @abstractmethod
    def score_scale(self, layer: int) -> float:
        """What attention multiplies ``q . k`` by."""

    @abstractmethod
    def score_softcap(self, layer: int) -> float:
        """Attention score soft-cap (Gemma 2); ``<= 0`` for none."""

    @abstractmethod
    def sliding_window(self, layer: int) -> int | None:
        """Layer ``layer``'s attention window (a query at ``i`` sees keys ``j > i - window``); ``None``: global."""

    @abstractmethod
    def attention_scores(self, layer: int, q: Tensor, k: Tensor) -> Tensor:
        """Layer ``layer``'s attention scores ``[batch, head, query, key]`` (scaled, soft-capped, not masked) of
        queries ``q [batch, query, head, d_head]`` and keys ``k [batch, key, kv_head, d_head]``."""

    # --- output -------------------------------------------------------------------------------------------

    @abstractmethod
    def unembed_weights(self) -> tuple[Tensor, Tensor]:
        """``W_U [d_model d_vocab]`` and ``b_U [d_vocab]`` (zero where the model has none)."""

    @abstractmethod
    def logit_softcap(self) -> float:
        """Final logit soft-cap (Gemma 2); ``<= 0`` for none."""

    @abstractmethod
    def final_residual(self, tokens: Tensor, **kwargs: Any) -> Float[Tensor, "batch pos d_model"]:
        """The residual stream after the last block (no final norm, no unembedding); ``kwargs`` go to the
        forward pass (``attention_mask=``...)."""

    # --- a shared prefix run once -------------------------------------------------------------------------

    @abstractmethod
    def prefix_sharing(self) -> bool:
        """Whether :meth:`prefix_cache` and :meth:`continue_prefix` give the full run's numbers on this model."""

    @abstractmethod
    def prefix_cache(self, prefix: Tensor, hooks: list, repeat: int) -> Any:
        """Run ``prefix`` (``[row, pos]`` tokens) once with ``hooks`` into a key/value cache whose rows are each
        repeated ``repeat`` times in order, for the rows that continue it (use it once)."""

    @abstractmethod
    def continue_prefix(self, body: Tensor, cache: Any) -> Float[Tensor, "row pos d_model"]:
        """The final residual of ``body`` (the tokens after the prefix) run after ``cache``
        (:meth:`prefix_cache`), with whatever hooks are on the model."""

    # --- many distinct prefixes run once, bodies continued with gradients (attribution, EAP-IG, positions) ----

    @abstractmethod
    def run_prefixes(self, tokens: Tensor, lengths: Tensor) -> Any:
        """Each row's first ``lengths[i]`` tokens of ``tokens [row, pos]``, the distinct ones run once without
        gradients, left-padded to one width with a mask: this backend's prefix state (``None`` when every length is
        0). Continue with :meth:`continue_prefixes`."""

    @abstractmethod
    def prefix_from_kv(self, keys: list[Tensor], values: list[Tensor], mask: Tensor) -> Any:
        """A prefix state from every layer's keys and values ``[row, pos, kv_head, d_head]`` (as the hooks of
        :meth:`prefix_kv_hooks` hold them) and the mask ``[row, pos]`` of the real positions."""

    @abstractmethod
    def ungroup_prefix(self, prefix: Any) -> Any:
        """``prefix`` with its key/value heads repeated per query head, for runs inside :meth:`split_inputs`
        (``ungroup=True``)."""

    @abstractmethod
    def select_prefix(self, prefix: Any, rows: Tensor) -> Any:
        """``prefix`` (:meth:`run_prefixes`) with its rows ``rows`` (indices, repeats allowed), in that order: rows
        that continue the same prefix read it once run (the edge executor's circuit x pair rows)."""

    @abstractmethod
    def continue_prefixes(self, body: Tensor, prefix: Any, *, stop_at_layer: int | None = None
                          ) -> Float[Tensor, "row pos d_model"]:
        """The residual (final, or entering block ``stop_at_layer``) of ``body [row, pos]`` (each row's tokens after
        its prefix) run after ``prefix`` with whatever hooks are on the model, gradients through the body; ``prefix``
        ``None`` runs ``body`` as whole prompts."""

    @abstractmethod
    def prefix_keys(self, prefix: Any, layer: int) -> Tensor:
        """The prefix's keys at ``layer`` that :meth:`rotary_key_hook` leaves out while :meth:`continue_prefixes`
        runs (``[row, 0, kv_head, d_head]`` where it sees them all)."""

    @abstractmethod
    def prefix_kv_hooks(self, layer: int) -> tuple[str, str] | None:
        """The hooks whose whole-prompt values are a prefix's keys and values at ``layer`` (for
        :meth:`prefix_from_kv`), or ``None`` where prefixes cannot be shared on this model."""

    @abstractmethod
    def block_runner(self, suffix: Tensor, keys: list[Tensor], values: list[Tensor],
                     mask: Tensor | None) -> Any:
        """A ``run(layer, x)`` that runs block ``layer`` alone on ``x`` (the rows of ``suffix [G, pos]``, repeated
        in order) after the cached ``keys``/``values`` of every layer, or ``None`` where blocks do not run alone."""

    # --- receivers' own inputs ----------------------------------------------------------------------------

    @abstractmethod
    def split_inputs(self, *, ungroup: bool = True, attn_result: bool = False
                     ) -> AbstractContextManager[None]:
        """A context in which every head reads its own copies of the residual for its query, key and value
        inputs (``hook_q_input``/``hook_k_input``/``hook_v_input`` ``[batch, pos, head, d_model]``, one per query
        head with ``ungroup``), each MLP its own (``hook_mlp_in``) and, with ``attn_result``, heads write
        ``hook_result``; the same numbers, everything restored on exit."""

    # --- devices ------------------------------------------------------------------------------------------

    @abstractmethod
    def spread(self, n_devices: int, first: str | torch.device | None = None) -> Any:
        """Place the model's layers over ``n_devices`` GPUs from ``first`` (in place); returns the model."""

    def layer_device(self, layer: int) -> torch.device:
        """Where block ``layer``'s weights are (and so where its END-only pieces must run)."""
        return next(self.model.blocks[layer].parameters()).device

    def output_device(self) -> torch.device:
        """Where the final norm and the unembedding run."""
        return self.model.unembed.W_U.device

    # --- fine-tuning (circuits.sft) -----------------------------------------------------------------------

    @abstractmethod
    def tunable_tensors(self) -> dict[str, TunableTensor]:
        """TransformerLens name -> :class:`~circuits.models.hf_weights.TunableTensor` of every parameter
        fine-tuning can tune (K/V named ``_W_K``/``_W_V`` where heads share them)."""

    @abstractmethod
    def untunable_parameters(self) -> list[str]:
        """Parameters of ``model`` that no TransformerLens name covers (full SFT would leave them frozen)."""

    @abstractmethod
    def training_residual(self, tokens: Tensor) -> Float[Tensor, "batch pos d_model"]:
        """The residual stream after the last block, before the final norm, with gradients."""

    @abstractmethod
    def link_processed_weights(self) -> Any:
        """Make ``model`` compute with its parameters, so that gradients reach them (returns ``model``)."""

    @abstractmethod
    def checkpoint_blocks(self) -> None:
        """Wrap each block's ``forward`` in place with activation checkpointing (undone by removing ``forward``
        from each block's ``__dict__``); parameter names and hook points unchanged."""

    @abstractmethod
    def cast_unsharded_buffers(self, device: str | torch.device, dtype: torch.dtype
                               ) -> list[tuple[Any, Tensor]]:
        """Put buffers that FSDP's mixed precision does not cast (it casts parameters) in ``dtype`` on
        ``device``; returns ``(module, old buffer)`` pairs to put back (``module._buffers["bias"]``)."""

    @abstractmethod
    def gather_parameters(self, keys: set[str]) -> dict[str, Tensor]:
        """The full (unsharded) CPU values of at least the parameters named ``keys`` (their
        ``TunableTensor.key``); a collective: every rank calls it."""

    @abstractmethod
    def checkpoint_state(self, optimizer: torch.optim.Optimizer, init: bool = False) -> dict:
        """``{"model": ..., "optim": ...}`` as a ``torch.distributed.checkpoint`` folder holds a sharded model
        and its optimizer; with ``init``, ready to be loaded into (:meth:`restore_checkpoint_state` after)."""

    @abstractmethod
    def restore_checkpoint_state(self, optimizer: torch.optim.Optimizer, state: dict) -> None:
        """Put a loaded :meth:`checkpoint_state` into the model and optimizer (nothing where it loads in place)."""

    # --- generation -----------------------------------------------------------------------------------------

    @abstractmethod
    def decoder(self, tokens: Tensor, mask: Tensor) -> Decoder:
        """A :class:`Decoder` for greedy generation from left-padded ``tokens [row, pos]`` with ``mask``
        ``[row, pos]`` (1 on real tokens), with a key/value cache where the model's gives the full run's
        numbers, else rerunning the grown prompts."""


# --- the registry: which backend a model has ------------------------------------------------------------------

ATTRIBUTE = "backend"  # model.backend

BACKENDS: dict[str, type[Backend]] = {}


def register(cls: type[Backend]) -> type[Backend]:
    """Register a backend class under its ``name`` (a class decorator). :mod:`circuits.models` imports the
    implementations the installed TransformerLens can run (on 3.9 both, its own ``TransformerBridge`` serving
    fine-tuning's parity tests; on 4.x the Bridge's); a class whose contract is not whole is one ``TypeError``
    naming what it lacks."""
    missing = sorted(getattr(cls, "__abstractmethods__", ()))
    if missing:
        raise TypeError(f"backend {cls.__name__} lacks the contract's {', '.join(missing)}")
    if cls.line is not None and any(o.line == cls.line and o.name != cls.name for o in BACKENDS.values()):
        raise TypeError(f"backend {cls.name!r}: TransformerLens line {cls.line} already has one")
    BACKENDS[cls.name] = cls
    if cls.line is not None:
        LINE_BACKENDS[cls.line] = cls.name  # what a saved result's provenance names (circuits.versions)
    return cls


def installed() -> type[Backend]:
    """The backend class of the installed TransformerLens line (what :func:`circuits.models.load_model` loads
    through and attaches)."""
    line = backend_line()
    for cls in BACKENDS.values():
        if cls.line == line:
            return cls
    raise LookupError(f"no backend of TransformerLens line {line} is loaded (TransformerLens {SUPPORTED}; "
                      "circuits.models imports the installed line's)")


def attach(model: Any, backend: type[Backend] | None = None) -> Any:
    """Make ``model`` carry a ``backend`` (a class of :data:`BACKENDS`; default: the one :func:`backend_of`
    recognises) bound to it as ``model.backend``; returns ``model``."""
    cls = backend if backend is not None else _recognise(model)
    object.__setattr__(model, ATTRIBUTE, cls(model))
    return model


def _recognise(model: Any) -> type[Backend]:
    """The registered class whose ``model_class`` ``model`` is an instance of (the installed line's first), else
    the installed line's."""
    first = installed()
    for cls in (first, *BACKENDS.values()):
        if isinstance(model, cls.model_class):
            return cls
    return first


def backend_of(model: Any) -> Backend:
    """``model.backend``, attached first where ``model`` carries none bound to it (a model a test built directly:
    a ``TransformerBridge`` gets the Bridge backend, a ``HookedTransformer`` the hooked one, anything else the
    installed line's; a shallow copy gets its own)."""
    carried = getattr(model, "__dict__", {}).get(ATTRIBUTE)
    if not isinstance(carried, Backend) or carried._model() is not model:
        attach(model, type(carried) if isinstance(carried, Backend) else None)
    return vars(model)[ATTRIBUTE]


def __getattr__(name: str) -> Any:
    """``Model``: the installed line's model class (annotations, isinstance), read once the implementations are
    registered (:mod:`circuits.models` imports them before anything that reads it)."""
    if name == "Model":
        return installed().model_class
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# --- model-free pieces --------------------------------------------------------------------------------------


def act_name(site: str, layer: int | None = None) -> str:
    """The hook name of ``site`` in block ``layer`` (``act_name("z", 3)`` is ``"blocks.3.attn.hook_z"``)."""
    return get_act_name(site, layer)


def head_linear(x: Float[Tensor, "batch pos d_model"], w: Float[Tensor, "head d_model d_head"],
                b: Float[Tensor, "head d_head"]) -> Float[Tensor, "batch pos head d_head"]:
    """Each head's projection of ``x`` (``x @ w[h] + b[h]``), as TransformerLens's attention computes its
    queries, keys and values."""
    return _simple_attn_linear(x, w, b)


def block_devices(n_layers: int, first: str | torch.device, n_devices: int) -> list[torch.device]:
    """The device of each block when ``n_layers`` are split over ``n_devices`` GPUs from ``first``
    (TransformerLens's rule: block ``i`` on ``first + i * n_devices // n_layers``)."""

    class _Cfg:  # the two fields the rule reads
        device = str(first)

    cfg = _Cfg()
    cfg.n_devices, cfg.n_layers = n_devices, n_layers  # type: ignore[attr-defined]
    return [get_device_for_block_index(i, cfg) for i in range(n_layers)]  # type: ignore[arg-type]


def check_dtype(dtype: str, device: str | torch.device) -> None:
    """Refuse fp16 on a CPU with one line: there it is slow and partly unsupported, and bf16 has its memory with
    fp32's range."""
    if dtype in ("float16", "fp16") and torch.device(device).type == "cpu":
        raise ValueError("dtype float16 needs a GPU (this run is on the CPU); use bfloat16 or float32 on a CPU")


# and Model (read through the module's __getattr__)
__all__ = ["ATTRIBUTE", "BACKENDS", "POST_NORM_ARCHITECTURES", "SUPPORTED", "ActivationCache", "Backend", "Decoder",
           "FactoredMatrix", "TunableTensor", "UnsupportedTransformerLens", "act_name", "apply_softcap",
           "attach", "backend_of", "block_devices", "check_dtype", "head_linear", "installed", "register",
           "softcap_enabled"]
