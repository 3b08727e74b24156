"""The seam between ``circuits`` and TransformerLens: a :class:`Backend` object that every model carries.

A backend is what ``circuits`` needs of a model that the two TransformerLens lines provide differently:
``circuits.models._hooked.BACKEND`` (TransformerLens 3.9, ``HookedTransformer``) and
``circuits.models._bridge.BACKEND`` (TransformerLens 4.3 or a later 4.x, ``TransformerBridge``, which
wraps the Hugging Face model); each registers its one instance (:func:`register`) when :mod:`circuits.models`
imports it, so this module imports neither. :func:`circuits.models.load_model` attaches the installed line's to the
model it returns (``model.circuits_backend``); :func:`backend_of` gives it back, and recognises a model a test built
directly (a ``TransformerBridge`` by its wrapped Hugging Face model, anything else by the installed line). Any
TransformerLens version other than 3.9 or 4.3+ fails at import with one line naming what is supported
(:func:`check_version`); :data:`NAME` says which line is installed (``"hooked"``/``"bridge"``), for
:mod:`circuits.models` and the tests only: outside :mod:`circuits.models` no module branches on a backend, it asks
for a capability (a method of :class:`Backend`, or the module-level function of the same name here, which is
``backend_of(model).f(model, ...)``).

Every TransformerLens internal that the engines (:mod:`circuits.patching`), validation (:mod:`circuits.validate`),
explanations (:mod:`circuits.explain`), evaluation (:mod:`circuits.evaluation`) and fine-tuning (:mod:`circuits.sft`)
use comes from here; TransformerLens 3's own caches and attention class stay behind the seam.
:mod:`circuits.models.loading` keeps the loading internals. ``tests/unit/test_backend.py`` asserts that both
implementations define every method of the contract, that no module outside :mod:`circuits.models` imports more of
``transformer_lens`` than the model and cache classes, and that none names a backend.

Besides :class:`Backend`'s methods, the seam exports what does not depend on the model: the types :data:`Model`
(the installed line's model class, for annotations), :data:`ActivationCache` and :data:`FactoredMatrix`;
:func:`act_name` (``act_name("z", 3)`` is ``"blocks.3.attn.hook_z"``); :func:`apply_softcap`,
:func:`softcap_enabled`, :data:`POST_NORM_ARCHITECTURES`; :func:`head_linear` (per-head projection);
:func:`block_devices`, :func:`check_dtype`.

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

from collections.abc import Mapping

from abc import ABC, abstractmethod
from contextlib import AbstractContextManager
from typing import Any

import torch
from jaxtyping import Float
from torch import Tensor

from circuits.models.hf_weights import TunableTensor
from circuits.versions import SUPPORTED, UnsupportedTransformerLens, backend_line  # the one rule (tl4env)
from transformer_lens import ActivationCache, FactoredMatrix  # both lines
from transformer_lens.utilities.activation_functions import apply_softcap, softcap_enabled  # both lines
from transformer_lens.utilities.architectures import POST_NORM_ARCHITECTURES  # both lines
from transformer_lens.utilities.attention import simple_attn_linear as _simple_attn_linear  # both lines


def check_version(installed: str | None = None) -> str:
    """``"hooked"`` for TransformerLens 3.9.x, ``"bridge"`` for 4.3 <= version < 5; any other version (or none
    installed) raises :class:`UnsupportedTransformerLens` with one line naming what is supported
    (:func:`circuits.versions.backend_line`, which ``circuits.models`` runs first on import)."""
    return "hooked" if backend_line(installed) == 3 else "bridge"


NAME = check_version()  # the installed line: for circuits.models and the tests, never for a branch elsewhere


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
    differ. Methods take the model first (a backend holds no model: one instance serves every model of its kind);
    ``name`` is for messages and saved metadata, never for a branch.

    Model facts the two lines keep in different places: :meth:`architecture`, :meth:`n_kv_heads`,
    :meth:`post_norms`, :meth:`end_unsupported`, :meth:`rotary_key_hook`. Attention at one position, piece by piece
    (:func:`circuits.patching.end_layers.attention_at_end`): :meth:`attn_qkv`, :meth:`attn_out`, :meth:`qk_norms`,
    :meth:`rotary`, :meth:`score_scale`, :meth:`score_softcap`, :meth:`sliding_window`, :meth:`attention_scores`.
    Output: :meth:`unembed_weights`, :meth:`logit_softcap`, :meth:`final_residual`. A shared prefix run once:
    :meth:`prefix_sharing`, :meth:`prefix_cache`, :meth:`continue_prefix`. Receivers' own inputs (edges):
    :meth:`split_inputs`. Devices: :meth:`block_devices`, :meth:`spread`, :meth:`layer_device`,
    :meth:`output_device`, :meth:`check_dtype`. Fine-tuning under TransformerLens's names and per-head layout:
    :meth:`tunable_tensors`, :meth:`untunable_parameters`, :meth:`training_residual`,
    :meth:`link_processed_weights`, :meth:`checkpoint_blocks`, :meth:`cast_unsharded_buffers`,
    :meth:`gather_parameters`, :meth:`checkpoint_state`, :meth:`restore_checkpoint_state`. Generation:
    :meth:`decoder`. Export: :meth:`reference_weights`.
    """

    name: str  # "hooked" or "bridge"
    model_class: type  # the model class this backend runs

    # One instance per kind: a copied or unpickled model carries the same one.
    def __copy__(self) -> Backend:
        return self

    def __deepcopy__(self, memo: dict) -> Backend:
        return self

    def __reduce__(self) -> tuple:
        return (_by_name, (self.name,))

    # --- names and devices (no model needed) --------------------------------------------------------------

    @abstractmethod
    def act_name(self, site: str, layer: int | None = None) -> str:
        """The hook name of ``site`` in block ``layer`` (``act_name("z", 3)`` is ``"blocks.3.attn.hook_z"``)."""

    @abstractmethod
    def block_devices(self, n_layers: int, first: str | torch.device, n_devices: int) -> list[torch.device]:
        """The device of each block when ``n_layers`` are split over ``n_devices`` GPUs from ``first``
        (TransformerLens's rule: block ``i`` on ``first + i * n_devices // n_layers``)."""

    @abstractmethod
    def check_dtype(self, dtype: str, device: str | torch.device) -> None:
        """Refuse fp16 on a CPU (slow and partly unsupported there) with one line."""

    # --- model facts --------------------------------------------------------------------------------------

    @abstractmethod
    def architecture(self, model: Any) -> str:
        """The Hugging Face architecture name (``"LlamaForCausalLM"``)."""

    @abstractmethod
    def n_kv_heads(self, model: Any) -> int:
        """Key/value heads per layer (``n_heads`` without grouped-query attention)."""

    @abstractmethod
    def post_norms(self, model: Any) -> bool:
        """Whether blocks normalise sublayer outputs before they join the residual (Gemma 2/3)."""

    @abstractmethod
    def end_unsupported(self, model: Any) -> list[str]:
        """What the END-only engine (:mod:`circuits.patching.end_layers`) does not compute the way the model
        does (empty: supported)."""

    @abstractmethod
    def rotary_key_hook(self, model: Any, layer: int) -> str:
        """The hook holding layer ``layer``'s keys as attention reads them (rotated where the model is rotary)."""

    # --- attention, piece by piece ------------------------------------------------------------------------

    @abstractmethod
    def attn_qkv(self, model: Any, layer: int) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor]:
        """``W_Q [head d_model d_head], b_Q [head d_head], W_K, b_K, W_V, b_V`` (keys and values with their
        ``n_kv_heads`` heads, not repeated per query head), biases zero where the model has none."""

    @abstractmethod
    def attn_out(self, model: Any, layer: int) -> tuple[Tensor, Tensor]:
        """``W_O [head d_head d_model]`` and ``b_O [d_model]`` (zero where the model has none)."""

    @abstractmethod
    def qk_norms(self, model: Any, layer: int) -> tuple[Any, Any] | None:
        """The per-head query and key norms applied before rotary (Qwen3, Gemma 3), each callable on
        ``[n, d_head]``; ``None`` where the model has none."""

    @abstractmethod
    def rotary(self, model: Any, layer: int, x: Tensor, pos: Tensor) -> Tensor:
        """Rotary embedding of ``x`` (``[..., pair, head, d_head]``) at each pair's own position ``pos [pair]``,
        with layer ``layer``'s own table; ``x`` unchanged for models without rotary."""

    @abstractmethod
    def score_scale(self, model: Any, layer: int) -> float:
        """What attention multiplies ``q . k`` by."""

    @abstractmethod
    def score_softcap(self, model: Any, layer: int) -> float:
        """Attention score soft-cap (Gemma 2); ``<= 0`` for none."""

    @abstractmethod
    def sliding_window(self, model: Any, layer: int) -> int | None:
        """Layer ``layer``'s attention window (a query at ``i`` sees keys ``j > i - window``); ``None``: global."""

    @abstractmethod
    def attention_scores(self, model: Any, layer: int, q: Tensor, k: Tensor) -> Tensor:
        """Layer ``layer``'s attention scores ``[batch, head, query, key]`` (scaled, soft-capped, not masked) of
        queries ``q [batch, query, head, d_head]`` and keys ``k [batch, key, kv_head, d_head]``."""

    # --- output -------------------------------------------------------------------------------------------

    @abstractmethod
    def unembed_weights(self, model: Any) -> tuple[Tensor, Tensor]:
        """``W_U [d_model d_vocab]`` and ``b_U [d_vocab]`` (zero where the model has none)."""

    @abstractmethod
    def logit_softcap(self, model: Any) -> float:
        """Final logit soft-cap (Gemma 2); ``<= 0`` for none."""

    @abstractmethod
    def final_residual(self, model: Any, tokens: Tensor, **kwargs: Any) -> Float[Tensor, "batch pos d_model"]:
        """The residual stream after the last block (no final norm, no unembedding); ``kwargs`` go to the
        forward pass (``attention_mask=``...)."""

    # --- a shared prefix run once -------------------------------------------------------------------------

    @abstractmethod
    def prefix_sharing(self, model: Any) -> bool:
        """Whether :meth:`prefix_cache` and :meth:`continue_prefix` give the full run's numbers on this model."""

    @abstractmethod
    def prefix_cache(self, model: Any, prefix: Tensor, hooks: list, repeat: int) -> Any:
        """Run ``prefix`` (``[row, pos]`` tokens) once with ``hooks`` into a key/value cache whose rows are each
        repeated ``repeat`` times in order, for the rows that continue it (use it once)."""

    @abstractmethod
    def continue_prefix(self, model: Any, body: Tensor, cache: Any) -> Float[Tensor, "row pos d_model"]:
        """The final residual of ``body`` (the tokens after the prefix) run after ``cache``
        (:meth:`prefix_cache`), with whatever hooks are on the model."""

    # --- many distinct prefixes run once, bodies continued with gradients (attribution, EAP-IG, positions) ----

    @abstractmethod
    def run_prefixes(self, model: Any, tokens: Tensor, lengths: Tensor) -> Any:
        """Each row's first ``lengths[i]`` tokens of ``tokens [row, pos]``, the distinct ones run once without
        gradients, left-padded to one width with a mask: this backend's prefix state (``None`` when every length is
        0). Continue with :meth:`continue_prefixes`."""

    @abstractmethod
    def prefix_from_kv(self, model: Any, keys: list[Tensor], values: list[Tensor], mask: Tensor) -> Any:
        """A prefix state from every layer's keys and values ``[row, pos, kv_head, d_head]`` (as the hooks of
        :meth:`prefix_kv_hooks` hold them) and the mask ``[row, pos]`` of the real positions."""

    @abstractmethod
    def ungroup_prefix(self, model: Any, prefix: Any) -> Any:
        """``prefix`` with its key/value heads repeated per query head, for runs inside :meth:`split_inputs`
        (``ungroup=True``)."""

    @abstractmethod
    def continue_prefixes(self, model: Any, body: Tensor, prefix: Any, *, stop_at_layer: int | None = None
                          ) -> Float[Tensor, "row pos d_model"]:
        """The residual (final, or entering block ``stop_at_layer``) of ``body [row, pos]`` (each row's tokens after
        its prefix) run after ``prefix`` with whatever hooks are on the model, gradients through the body; ``prefix``
        ``None`` runs ``body`` as whole prompts."""

    @abstractmethod
    def prefix_keys(self, model: Any, prefix: Any, layer: int) -> Tensor:
        """The prefix's keys at ``layer`` that :meth:`rotary_key_hook` leaves out while :meth:`continue_prefixes`
        runs (``[row, 0, kv_head, d_head]`` where it sees them all)."""

    @abstractmethod
    def prefix_kv_hooks(self, model: Any, layer: int) -> tuple[str, str] | None:
        """The hooks whose whole-prompt values are a prefix's keys and values at ``layer`` (for
        :meth:`prefix_from_kv`), or ``None`` where prefixes cannot be shared on this model."""

    @abstractmethod
    def block_runner(self, model: Any, suffix: Tensor, keys: list[Tensor], values: list[Tensor],
                     mask: Tensor | None) -> Any:
        """A ``run(layer, x)`` that runs block ``layer`` alone on ``x`` (the rows of ``suffix [G, pos]``, repeated
        in order) after the cached ``keys``/``values`` of every layer, or ``None`` where blocks do not run alone."""

    # --- receivers' own inputs ----------------------------------------------------------------------------

    @abstractmethod
    def split_inputs(self, model: Any, *, ungroup: bool = True, attn_result: bool = False
                     ) -> AbstractContextManager[None]:
        """A context in which every head reads its own copies of the residual for its query, key and value
        inputs (``hook_q_input``/``hook_k_input``/``hook_v_input`` ``[batch, pos, head, d_model]``, one per query
        head with ``ungroup``), each MLP its own (``hook_mlp_in``) and, with ``attn_result``, heads write
        ``hook_result``; the same numbers, everything restored on exit."""

    # --- devices ------------------------------------------------------------------------------------------

    @abstractmethod
    def spread(self, model: Any, n_devices: int, first: str | torch.device | None = None) -> Any:
        """Place ``model``'s layers over ``n_devices`` GPUs from ``first`` (in place)."""

    @abstractmethod
    def layer_device(self, model: Any, layer: int) -> torch.device:
        """Where block ``layer``'s weights are (and so where its END-only pieces must run)."""

    @abstractmethod
    def output_device(self, model: Any) -> torch.device:
        """Where the final norm and the unembedding run."""

    # --- fine-tuning (circuits.sft) -----------------------------------------------------------------------

    @abstractmethod
    def tunable_tensors(self, model: Any) -> dict[str, TunableTensor]:
        """TransformerLens name -> :class:`~circuits.models.hf_weights.TunableTensor` of every parameter
        fine-tuning can tune (K/V named ``_W_K``/``_W_V`` where heads share them)."""

    @abstractmethod
    def untunable_parameters(self, model: Any) -> list[str]:
        """Parameters of ``model`` that no TransformerLens name covers (full SFT would leave them frozen)."""

    @abstractmethod
    def training_residual(self, model: Any, tokens: Tensor) -> Float[Tensor, "batch pos d_model"]:
        """The residual stream after the last block, before the final norm, with gradients."""

    @abstractmethod
    def link_processed_weights(self, model: Any) -> Any:
        """Make ``model`` compute with its parameters, so that gradients reach them (returns ``model``)."""

    @abstractmethod
    def checkpoint_blocks(self, model: Any) -> None:
        """Wrap each block's ``forward`` in place with activation checkpointing (undone by removing ``forward``
        from each block's ``__dict__``); parameter names and hook points unchanged."""

    @abstractmethod
    def cast_unsharded_buffers(self, model: Any, device: str | torch.device, dtype: torch.dtype
                               ) -> list[tuple[Any, Tensor]]:
        """Put buffers that FSDP's mixed precision does not cast (it casts parameters) in ``dtype`` on
        ``device``; returns ``(module, old buffer)`` pairs to put back (``module._buffers["bias"]``)."""

    @abstractmethod
    def gather_parameters(self, model: Any, keys: set[str]) -> dict[str, Tensor]:
        """The full (unsharded) CPU values of at least the parameters named ``keys`` (their
        ``TunableTensor.key``); a collective: every rank calls it."""

    @abstractmethod
    def checkpoint_state(self, model: Any, optimizer: torch.optim.Optimizer, init: bool = False) -> dict:
        """``{"model": ..., "optim": ...}`` as a ``torch.distributed.checkpoint`` folder holds a sharded model
        and its optimizer; with ``init``, ready to be loaded into (:meth:`restore_checkpoint_state` after)."""

    @abstractmethod
    def restore_checkpoint_state(self, model: Any, optimizer: torch.optim.Optimizer, state: dict) -> None:
        """Put a loaded :meth:`checkpoint_state` into the model and optimizer (nothing where it loads in place)."""

    # --- generation and export ----------------------------------------------------------------------------

    @abstractmethod
    def decoder(self, model: Any, tokens: Tensor, mask: Tensor) -> Decoder:
        """A :class:`Decoder` for greedy generation from left-padded ``tokens [row, pos]`` with ``mask``
        ``[row, pos]`` (1 on real tokens), with a key/value cache where the model's gives the full run's
        numbers, else rerunning the grown prompts."""

    @abstractmethod
    def reference_weights(self, hf_model: Any) -> dict[str, Tensor]:
        """TransformerLens-named, unfolded weights of a Hugging Face model, as this line would load them (what
        :func:`circuits.sft.export.export_model` checks a delta against and writes back through)."""


# --- which backend a model has ------------------------------------------------------------------------------

ATTRIBUTE = "circuits_backend"


_BACKENDS: dict[str, Backend] = {}


def register(backend: Backend) -> Backend:
    """Make ``backend`` the one instance of its kind (each implementation registers itself when imported;
    :mod:`circuits.models` imports those the installed TransformerLens can run: on 3.9 both, its own
    ``TransformerBridge`` serving fine-tuning's parity tests; on 4.x the Bridge's)."""
    _BACKENDS[backend.name] = backend
    return backend


def implementation(name: str, model_class: type, functions: Mapping[str, Any]) -> Backend:
    """The backend ``name`` whose every method of the contract is the function of the same name in ``functions``
    (an implementation module's ``globals()``: ``implementation("hooked", HookedTransformer, globals())``), for models
    of ``model_class``; registered (:func:`register`) as the one instance of its kind. A new backend is one module of
    functions and this call; a function missing from it is one ``TypeError`` naming it."""
    methods = sorted(Backend.__abstractmethods__)
    missing = [m for m in methods if not callable(functions.get(m))]
    if missing:
        raise TypeError(f"backend {name!r} lacks the contract's {', '.join(missing)}")
    cls = type(f"{name.title()}Backend", (Backend,), {
        "__doc__": f"The {name!r} backend: {functions.get('__name__', '?')}'s functions.", "__module__":
        functions.get("__name__", __name__), "name": name, "model_class": model_class,
        **{m: staticmethod(functions[m]) for m in methods}})
    return register(cls())


def _by_name(name: str) -> Backend:
    """The one instance of backend ``name``."""
    try:
        return _BACKENDS[name]
    except KeyError:
        raise LookupError(f"no {name!r} backend is loaded (TransformerLens {SUPPORTED}; circuits.models imports the "
                          "installed line's)") from None


def installed() -> Backend:
    """The backend of the installed TransformerLens line (what :func:`circuits.models.load_model` attaches)."""
    return _by_name(NAME)


def attach(model: Any, backend: Backend | None = None) -> Any:
    """Make ``model`` carry ``backend`` (default: :func:`backend_of` it); returns ``model``."""
    object.__setattr__(model, ATTRIBUTE, backend if backend is not None else backend_of(model))
    return model


def backend_of(model: Any) -> Backend:
    """The backend ``model`` carries (:func:`attach`); for a model built directly (tests), a ``TransformerBridge``
    (it wraps a Hugging Face model: ``original_model`` and ``adapter``, also TransformerLens 3.9's own) gets the
    Bridge backend, anything else the installed line's."""
    carried = getattr(model, "__dict__", {}).get(ATTRIBUTE)
    if carried is not None:
        return carried
    if hasattr(model, "original_model") and hasattr(model, "adapter"):
        return _by_name("bridge")
    return installed()


# the installed line's model class (annotations, isinstance)
if NAME == "hooked":
    from transformer_lens import HookedTransformer as Model
else:
    from transformer_lens.model_bridge import TransformerBridge as Model


# --- model-free pieces --------------------------------------------------------------------------------------


def act_name(site: str, layer: int | None = None) -> str:
    """The hook name of ``site`` in block ``layer`` (``act_name("z", 3)`` is ``"blocks.3.attn.hook_z"``)."""
    return installed().act_name(site, layer)


def head_linear(x: Float[Tensor, "batch pos d_model"], w: Float[Tensor, "head d_model d_head"],
                b: Float[Tensor, "head d_head"]) -> Float[Tensor, "batch pos head d_head"]:
    """Each head's projection of ``x`` (``x @ w[h] + b[h]``), as TransformerLens's attention computes its
    queries, keys and values."""
    return _simple_attn_linear(x, w, b)


def block_devices(n_layers: int, first: str | torch.device, n_devices: int) -> list[torch.device]:
    """:meth:`Backend.block_devices` of the installed line."""
    return installed().block_devices(n_layers, first, n_devices)


def check_dtype(dtype: str, device: str | torch.device) -> None:
    """:meth:`Backend.check_dtype` of the installed line."""
    installed().check_dtype(dtype, device)


# --- the contract's methods as functions of the model: backend_of(model).f(model, ...) ----------------------


def architecture(model: Model) -> str:
    return backend_of(model).architecture(model)


def n_kv_heads(model: Model) -> int:
    return backend_of(model).n_kv_heads(model)


def post_norms(model: Model) -> bool:
    return backend_of(model).post_norms(model)


def end_unsupported(model: Model) -> list[str]:
    return backend_of(model).end_unsupported(model)


def rotary_key_hook(model: Model, layer: int) -> str:
    return backend_of(model).rotary_key_hook(model, layer)


def attn_qkv(model: Model, layer: int) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor]:
    return backend_of(model).attn_qkv(model, layer)


def attn_out(model: Model, layer: int) -> tuple[Tensor, Tensor]:
    return backend_of(model).attn_out(model, layer)


def qk_norms(model: Model, layer: int) -> tuple[Any, Any] | None:
    return backend_of(model).qk_norms(model, layer)


def rotary(model: Model, layer: int, x: Tensor, pos: Tensor) -> Tensor:
    return backend_of(model).rotary(model, layer, x, pos)


def score_scale(model: Model, layer: int) -> float:
    return backend_of(model).score_scale(model, layer)


def score_softcap(model: Model, layer: int) -> float:
    return backend_of(model).score_softcap(model, layer)


def sliding_window(model: Model, layer: int) -> int | None:
    return backend_of(model).sliding_window(model, layer)


def attention_scores(model: Model, layer: int, q: Tensor, k: Tensor) -> Tensor:
    return backend_of(model).attention_scores(model, layer, q, k)


def unembed_weights(model: Model) -> tuple[Tensor, Tensor]:
    return backend_of(model).unembed_weights(model)


def logit_softcap(model: Model) -> float:
    return backend_of(model).logit_softcap(model)


def final_residual(model: Model, tokens: Tensor, **kwargs: Any) -> Tensor:
    return backend_of(model).final_residual(model, tokens, **kwargs)


def prefix_sharing(model: Model) -> bool:
    return backend_of(model).prefix_sharing(model)


def prefix_cache(model: Model, prefix: Tensor, hooks: list, repeat: int) -> Any:
    return backend_of(model).prefix_cache(model, prefix, hooks, repeat)


def continue_prefix(model: Model, body: Tensor, cache: Any) -> Tensor:
    return backend_of(model).continue_prefix(model, body, cache)


def run_prefixes(model: Model, tokens: Tensor, lengths: Tensor) -> Any:
    return backend_of(model).run_prefixes(model, tokens, lengths)


def prefix_from_kv(model: Model, keys: list[Tensor], values: list[Tensor], mask: Tensor) -> Any:
    return backend_of(model).prefix_from_kv(model, keys, values, mask)


def ungroup_prefix(model: Model, prefix: Any) -> Any:
    return backend_of(model).ungroup_prefix(model, prefix)


def continue_prefixes(model: Model, body: Tensor, prefix: Any, *, stop_at_layer: int | None = None) -> Tensor:
    return backend_of(model).continue_prefixes(model, body, prefix, stop_at_layer=stop_at_layer)


def prefix_keys(model: Model, prefix: Any, layer: int) -> Tensor:
    return backend_of(model).prefix_keys(model, prefix, layer)


def prefix_kv_hooks(model: Model, layer: int) -> tuple[str, str] | None:
    return backend_of(model).prefix_kv_hooks(model, layer)


def block_runner(model: Model, suffix: Tensor, keys: list[Tensor], values: list[Tensor], mask: Tensor | None) -> Any:
    return backend_of(model).block_runner(model, suffix, keys, values, mask)


def split_inputs(model: Model, *, ungroup: bool = True, attn_result: bool = False) -> AbstractContextManager[None]:
    return backend_of(model).split_inputs(model, ungroup=ungroup, attn_result=attn_result)


def spread(model: Model, n_devices: int, first: str | torch.device | None = None) -> Model:
    return backend_of(model).spread(model, n_devices, first)


def layer_device(model: Model, layer: int) -> torch.device:
    return backend_of(model).layer_device(model, layer)


def output_device(model: Model) -> torch.device:
    return backend_of(model).output_device(model)


def tunable_tensors(model: Model) -> dict[str, TunableTensor]:
    return backend_of(model).tunable_tensors(model)


def untunable_parameters(model: Model) -> list[str]:
    return backend_of(model).untunable_parameters(model)


def training_residual(model: Model, tokens: Tensor) -> Tensor:
    return backend_of(model).training_residual(model, tokens)


def link_processed_weights(model: Model) -> Model:
    return backend_of(model).link_processed_weights(model)


def checkpoint_blocks(model: Model) -> None:
    backend_of(model).checkpoint_blocks(model)


def cast_unsharded_buffers(model: Model, device: str | torch.device, dtype: torch.dtype) -> list[tuple[Any, Tensor]]:
    return backend_of(model).cast_unsharded_buffers(model, device, dtype)


def gather_parameters(model: Model, keys: set[str]) -> dict[str, Tensor]:
    return backend_of(model).gather_parameters(model, keys)


def checkpoint_state(model: Model, optimizer: torch.optim.Optimizer, init: bool = False) -> dict:
    return backend_of(model).checkpoint_state(model, optimizer, init)


def restore_checkpoint_state(model: Model, optimizer: torch.optim.Optimizer, state: dict) -> None:
    backend_of(model).restore_checkpoint_state(model, optimizer, state)


def decoder(model: Model, tokens: Tensor, mask: Tensor) -> Decoder:
    return backend_of(model).decoder(model, tokens, mask)


__all__ = ["ATTRIBUTE", "NAME", "POST_NORM_ARCHITECTURES", "SUPPORTED", "ActivationCache", "Backend", "Decoder",
           "FactoredMatrix", "Model", "TunableTensor", "UnsupportedTransformerLens", "act_name", "apply_softcap",
           "architecture", "attach", "block_runner", "continue_prefixes", "prefix_from_kv", "prefix_keys",
           "prefix_kv_hooks", "run_prefixes", "ungroup_prefix", "attention_scores", "attn_out", "attn_qkv", "backend_of", "block_devices",
           "cast_unsharded_buffers", "check_dtype", "check_version", "checkpoint_blocks", "checkpoint_state",
           "continue_prefix", "decoder", "end_unsupported", "final_residual", "gather_parameters", "head_linear",
           "installed", "layer_device", "link_processed_weights", "logit_softcap", "n_kv_heads", "output_device",
           "post_norms", "prefix_cache", "prefix_sharing", "qk_norms", "register", "restore_checkpoint_state", "rotary",
           "rotary_key_hook", "score_scale", "score_softcap", "sliding_window", "softcap_enabled", "split_inputs",
           "spread", "training_residual", "tunable_tensors", "unembed_weights", "untunable_parameters"]
