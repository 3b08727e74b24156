"""TransformerLens parameter values written back into the Hugging Face model they were converted from.

The inverse of TransformerLens's weight conversion for the families whose parameter names are mapped here
(:data:`EXPORTABLE`: Llama, Mistral, Qwen2, Qwen3, Gemma 2, Gemma 3), for the parameters a fine-tuning run changes:
head slices of ``W_Q``, ``W_K``, ``W_V``, ``W_O`` and their biases, whole MLPs, and (full SFT) embeddings, the
unembedding, norms and output biases. Where the model was loaded with its norms folded (``fold_ln``, how
:func:`circuits.models.load_model` loads by default and how ``circuits finetune`` trains), the norm weight that
TransformerLens multiplied into the rows that read a normalised input (``W_Q``, ``W_K``, ``W_V`` by ``ln1``;
``W_in``, ``W_gate`` by ``ln2``; ``W_U`` by the final norm) is divided out again, so the written model computes what
the tuned ``HookedTransformer`` computes. Gemma's norms, stored as ``w`` and used as ``1 + w``, and its embedding,
scaled by ``sqrt(d_model)``, are undone the same way.

TransformerLens keeps zero biases where an architecture has none (Llama's Q/K/V/O and MLP biases, the gated MLP's
``b_in``, ``b_U``); fine-tuning leaves them at zero (:func:`circuits.sft.plan.is_placeholder`) and they are skipped
here. A delta from an earlier circuits that tuned them can still be written where the architecture has an option
for that bias (``attention_bias``, ``mlp_bias``: switched on in the written config); elsewhere writing is refused
with the tensor named, since the model could not compute it.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable
from typing import Any

import torch
from torch import Tensor

EXPORTABLE = ("LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM", "Gemma2ForCausalLM",
              "Gemma3ForCausalLM")
_GEMMA = ("Gemma2ForCausalLM", "Gemma3ForCausalLM")
_QKV = {"W_Q": "q_proj", "W_K": "k_proj", "_W_K": "k_proj", "W_V": "v_proj", "_W_V": "v_proj"}
_BIASES = {"b_Q": "q_proj", "b_K": "k_proj", "_b_K": "k_proj", "b_V": "v_proj", "_b_V": "v_proj", "b_O": "o_proj"}
_MLP = {"W_in": "up_proj", "W_gate": "gate_proj", "W_out": "down_proj", "b_out": "down_proj"}
# TransformerLens's gated MLP adds b_in after the gate (act(x W_gate) * (x W_in) + b_in), which no Hugging Face gated
# MLP can compute; with unembed.b_U, it is only ever a zero placeholder.
_NOWHERE = ("b_in", "b_U")


class ExportError(ValueError):
    """Values that cannot be written into the Hugging Face architecture (one line saying which and why)."""


def _norm_names(arch: str) -> dict[str, str]:
    """TransformerLens norm -> Hugging Face module, per layer (``{l}``) or global."""
    ln2 = "pre_feedforward_layernorm" if arch in _GEMMA else "post_attention_layernorm"
    return {"ln1": "input_layernorm", "ln2": ln2, "ln1_post": "post_attention_layernorm",
            "ln2_post": "post_feedforward_layernorm", "attn.q_norm": "self_attn.q_norm",
            "attn.k_norm": "self_attn.k_norm"}


def hf_name(name: str, arch: str) -> str:
    """The Hugging Face parameter a TransformerLens parameter comes from (``blocks.3.attn._W_K`` ->
    ``model.layers.3.self_attn.k_proj.weight``)."""
    if name == "embed.W_E":
        return "model.embed_tokens.weight"
    if name == "unembed.W_U":
        return "lm_head.weight"
    if name == "ln_final.w":
        return "model.norm.weight"
    parts = name.split(".")
    if parts[0] != "blocks" or len(parts) < 4:
        raise ExportError(f"No Hugging Face parameter is known for {name}.")
    layer, module, param = parts[1], ".".join(parts[2:-1]), parts[-1]
    prefix = f"model.layers.{layer}."
    if module == "attn" and param in _QKV:
        return prefix + f"self_attn.{_QKV[param]}.weight"
    if module == "attn" and param == "W_O":
        return prefix + "self_attn.o_proj.weight"
    if module == "attn" and param in _BIASES:
        return prefix + f"self_attn.{_BIASES[param]}.bias"
    if module == "mlp" and param in _MLP:
        return prefix + f"mlp.{_MLP[param]}.{'weight' if param.startswith('W') else 'bias'}"
    norms = _norm_names(arch)
    if module in norms and param == "w":
        return prefix + f"{norms[module]}.weight"
    raise ExportError(f"No Hugging Face parameter is known for {name} in {arch}.")


def _bias_option(hf_param: str) -> str | None:
    if ".self_attn." in hf_param:
        return "attention_bias"
    if ".mlp." in hf_param:
        return "mlp_bias"
    return None


def _with_options(hf_model: Any, options: set[str]) -> Any:
    """The same model rebuilt with bias options switched on; the new biases are zero, everything else is copied."""
    config = copy.deepcopy(hf_model.config)
    for option in options:
        setattr(config, option, True)
    new = type(hf_model)(config).to(next(hf_model.parameters()).dtype)
    missing, unexpected = new.load_state_dict(hf_model.state_dict(), strict=False)
    if unexpected or any(not k.endswith(".bias") for k in missing):
        raise ExportError(f"Rebuilding {type(hf_model).__name__} with {sorted(options)} changed more than biases: "
                          f"{sorted(missing) + sorted(unexpected)}")
    with torch.no_grad():
        params = dict(new.named_parameters())
        for k in missing:
            params[k].zero_()
    return new.eval()


@torch.no_grad()
def write_back(
    hf_model: Any,
    values: Iterable[tuple[str, tuple[int, ...] | None, Tensor]],
    reference: dict[str, Tensor],
    *,
    folded: bool = True,
) -> Any:
    """Write TransformerLens ``values`` into ``hf_model`` (in place, or into a rebuilt copy when bias options have
    to be switched on), and return the model to save.

    Args:
        values: ``(name, rows, value)``: a TransformerLens parameter, the rows along its first dimension that the
            value holds (``None``: the whole tensor), and the value (``[len(rows), ...]`` or the whole shape).
        reference: the *unfolded* TransformerLens state dict of ``hf_model`` (its norm weights are divided out).
        folded: whether the values come from a model loaded with ``fold_ln``.
    """
    arch = type(hf_model).__name__
    if arch not in EXPORTABLE:
        raise ExportError(f"Writing tuned weights back is supported for {', '.join(EXPORTABLE)}; not for {arch}.")
    cfg = hf_model.config
    d_head = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    values = [(n, rows, v.detach().to("cpu", torch.float64)) for n, rows, v in values]
    params = dict(hf_model.named_parameters())
    options: set[str] = set()
    for name, _, value in values:
        if name.split(".")[-1] in _NOWHERE:
            if bool(value.abs().max() > 0):
                raise ExportError(f"The tuned {name} is not zero, but no {arch} parameter can hold it (a TransformerLens "
                                  "placeholder, tuned by an earlier circuits; fine-tuning now leaves placeholders at "
                                  "zero): fine-tune again to export.")
            continue
        target = hf_name(name, arch)
        if target in params or not bool(value.abs().max() > 0):
            continue
        option = _bias_option(target)
        if option is None or not hasattr(cfg, option):
            raise ExportError(f"The tuned {name} is not zero, but {arch} has no {target} (a TransformerLens placeholder, "
                              "tuned by an earlier circuits; fine-tuning now leaves placeholders at zero): fine-tune "
                              "again to export.")
        options.add(option)
    if options:
        hf_model = _with_options(hf_model, options)
        params = dict(hf_model.named_parameters())
    tied = getattr(cfg, "tie_word_embeddings", False)
    if tied and any(n in ("embed.W_E", "unembed.W_U") for n, _, _ in values):
        hf_model.config.tie_word_embeddings = False  # tuned separately: write both
        hf_model.lm_head.weight = torch.nn.Parameter(hf_model.lm_head.weight.detach().clone())
        params = dict(hf_model.named_parameters())
    offset = 1.0 if arch in _GEMMA else 0.0  # Gemma's norms are used as 1 + w

    def divisor(norm: str) -> Tensor:
        return reference[norm].to(torch.float64)[:, None] if folded else torch.ones(1, dtype=torch.float64)

    for name, rows, value in values:
        if name.split(".")[-1] in _NOWHERE:
            continue  # zero (checked above)
        target = hf_name(name, arch)
        if target not in params:
            continue  # a zero placeholder bias
        p = params[target]
        parts = name.split(".")
        param = parts[-1]
        layer = parts[1] if parts[0] == "blocks" else None

        def put(index: Any, new: Tensor, p: Tensor = p) -> None:
            p[index] = new.to(p.dtype)

        if name == "embed.W_E":
            put(slice(None), value / (cfg.hidden_size**0.5 if arch in _GEMMA else 1.0))
        elif name == "unembed.W_U":
            put(slice(None), (value / divisor("ln_final.w")).T)
        elif param in _QKV or param in ("W_in", "W_gate"):
            norm = f"blocks.{layer}.{'ln1' if param in _QKV else 'ln2'}.w"
            if param in _QKV:  # value [rows, d_model, d_head] -> weight rows of each head
                for i, r in enumerate(rows if rows is not None else range(value.shape[0])):
                    put(slice(r * d_head, (r + 1) * d_head), (value[i] / divisor(norm)).T)
            else:  # value [d_model, d_mlp]
                put(slice(None), (value / divisor(norm)).T)
        elif param == "W_O":  # value [rows, d_head, d_model] -> weight columns of each head
            for i, r in enumerate(rows if rows is not None else range(value.shape[0])):
                put((slice(None), slice(r * d_head, (r + 1) * d_head)), value[i].T)
        elif param == "W_out":
            put(slice(None), value.T)
        elif param in _BIASES and param != "b_O":  # value [rows, d_head]
            for i, r in enumerate(rows if rows is not None else range(value.shape[0])):
                put(slice(r * d_head, (r + 1) * d_head), value[i])
        elif param == "w":  # a norm's weight (unfolded runs, post norms, QK norms)
            put(slice(None), value - offset)
        else:  # b_O, b_in, b_out: whole vectors
            put(slice(None), value)
    return hf_model


# --- TransformerLens names on a model's own parameters (fine-tuning on either backend) ---------------------------
#
# Fine-tuning (:mod:`circuits.sft`) plans, masks, steps and saves parameters under their TransformerLens names and in
# TransformerLens's per-head layout, so that a tuning plan and a ``delta.pt`` mean the same on both backends. On a
# ``HookedTransformer`` those are the model's own parameters. On a ``TransformerBridge`` (and on a plain Hugging Face
# model) they are views of the Hugging Face ``nn.Linear`` weights, which are the only tensors that get gradients:
# head ``h`` of ``W_Q`` is rows ``h*d_head:(h+1)*d_head`` of ``q_proj.weight``, transposed; of ``W_O``, the same
# columns of ``o_proj.weight``. :class:`TunableTensor` holds one such correspondence and converts values, gradients
# and row selections between the two layouts.

LAYOUTS = ("same", "transpose", "head_rows", "head_cols", "head_bias")
# The head layouts: the axes of ``param`` and of the TransformerLens tensor (``h`` heads of ``d`` = d_head).
_HEAD_AXES = {"head_rows": ("(h d) m", "h m d"), "head_cols": ("m (h d)", "h d m"), "head_bias": ("(h d)", "h d")}
_PER_LAYER = ("attn.W_Q", "attn.W_K", "attn.W_V", "attn.W_O", "attn.b_Q", "attn.b_K", "attn.b_V", "attn.b_O",
              "mlp.W_in", "mlp.W_gate", "mlp.W_out", "mlp.b_out", "ln1.w", "ln2.w", "ln1_post.w", "ln2_post.w",
              "attn.q_norm.w", "attn.k_norm.w")
_GLOBAL = ("embed.W_E", "unembed.W_U", "ln_final.w")
_GROUPED = {"W_K": "_W_K", "W_V": "_W_V", "b_K": "_b_K", "b_V": "_b_V"}
# Norms a TransformerLens-style weight processing (``fold_ln``) multiplies into the weights after them.
FOLDED_NORMS = ("ln1", "ln2", "ln_final")


def _layout_of(name: str) -> str:
    param = name.split(".")[-1]
    if param in ("W_Q", "W_K", "_W_K", "W_V", "_W_V"):
        return "head_rows"
    if param == "W_O":
        return "head_cols"
    if param in ("b_Q", "b_K", "_b_K", "b_V", "_b_V"):
        return "head_bias"
    if param in ("W_in", "W_gate", "W_out", "W_U"):
        return "transpose"
    return "same"


class TunableTensor:
    """One parameter under its TransformerLens name ``name`` and the tensor that holds it, ``param`` (the model's
    parameter ``key``), in layout ``layout``:

    - ``same``: the parameter is the TransformerLens tensor (a ``HookedTransformer``; norms, ``b_O``, ``b_out``,
      ``W_E``), up to ``value = param * scale + offset`` (Gemma: norms used as ``1 + w``, embedding scaled);
    - ``transpose``: ``W_in``/``W_gate``/``W_out``/``W_U`` are the ``nn.Linear`` weight transposed;
    - ``head_rows``: ``W_Q``/``W_K``/``W_V`` ``[head, d_model, d_head]`` from weight rows ``(head d_head)``;
    - ``head_cols``: ``W_O`` ``[head, d_head, d_model]`` from weight columns ``(head d_head)``;
    - ``head_bias``: ``b_Q``/``b_K``/``b_V`` ``[head, d_head]`` from a bias ``(head d_head)``.

    Rows of a plan (head or K/V head indices along the TransformerLens tensor's first dimension) map to
    :attr:`dim` of ``param`` (:meth:`index`)."""

    def __init__(self, name: str, key: str, param: Tensor, layout: str = "same", d_head: int = 1,
                 scale: float = 1.0, offset: float = 0.0) -> None:
        if layout not in LAYOUTS:
            raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
        self.name, self.key, self.param, self.layout, self.d_head = name, key, param, layout, d_head
        self.scale, self.offset = scale, offset

    def __repr__(self) -> str:
        return f"TunableTensor({self.name!r} <- {self.key!r}, {self.layout}, {tuple(self.param.shape)})"

    def on(self, param: Tensor) -> "TunableTensor":
        """The same correspondence over another tensor of ``param``'s shape (e.g. a gathered state-dict entry)."""
        return TunableTensor(self.name, self.key, param, self.layout, self.d_head, self.scale, self.offset)

    @property
    def dim(self) -> int:
        """The dimension of ``param`` that a plan's rows select."""
        return 1 if self.layout == "head_cols" else 0

    @property
    def plain(self) -> bool:
        """Whether values and gradients are the parameter's own, element for element (an optimizer may step the
        parameter itself)."""
        return self.scale == 1.0 and self.offset == 0.0

    def _relayout(self, x: Tensor, back: bool = False) -> Tensor:
        """``param``-shaped -> TransformerLens-shaped (a view; no scale or offset); ``back``: TransformerLens-shaped
        (whole or some rows) -> the matching ``param`` block."""
        from einops import rearrange

        if self.layout == "transpose":
            return x.T
        if self.layout in _HEAD_AXES:
            held, tl = _HEAD_AXES[self.layout]
            return rearrange(x, f"{tl} -> {held}" if back else f"{held} -> {tl}", d=self.d_head)
        return x

    @property
    def shape(self) -> tuple[int, ...]:
        """The TransformerLens shape."""
        return tuple(self._relayout(self.param.detach()).shape)

    def index(self, rows: tuple[int, ...] | list[int]) -> Tensor:
        """The indices along :attr:`dim` of ``param`` that TransformerLens rows ``rows`` occupy (in that order)."""
        width = self.d_head if self.layout.startswith("head_") else 1
        idx = torch.tensor([r * width + i for r in rows for i in range(width)], dtype=torch.long)
        return idx.to(self.param.device)

    def to_tl(self, x: Tensor, rows: Tensor | None = None) -> Tensor:
        """Values: ``param``-shaped ``x`` -> the TransformerLens tensor (``rows``: only those rows, a copy)."""
        v = self._relayout(x)
        if not self.plain:
            v = v * self.scale + self.offset
        return v if rows is None else v.index_select(0, rows.to(v.device))

    def grad_to_tl(self, g: Tensor, rows: Tensor | None = None) -> Tensor:
        """Gradients: ``param``'s gradient -> the TransformerLens tensor's (``rows``: only those rows, a copy)."""
        v = self._relayout(g)
        if self.scale != 1.0:
            v = v / self.scale
        return v if rows is None else v.index_select(0, rows.to(v.device))

    def from_tl(self, v: Tensor) -> Tensor:
        """Values: TransformerLens rows (or the whole tensor) -> the ``param`` block they fill."""
        if not self.plain:
            v = (v - self.offset) / self.scale
        return self._relayout(v, back=True)

    def read(self, rows: tuple[int, ...] | list[int] | None = None) -> Tensor:
        """The TransformerLens values (of ``rows``), detached."""
        x = self.param.detach()
        return self.to_tl(x, None if rows is None else torch.tensor(list(rows), dtype=torch.long))

    @torch.no_grad()
    def write(self, value: Tensor, rows: tuple[int, ...] | list[int] | Tensor | None = None) -> None:
        """Put TransformerLens values (``[len(rows), ...]``, or the whole tensor) into ``param``, in place; nothing
        outside ``rows`` is written."""
        block = self.from_tl(value.to(device=self.param.device, dtype=torch.float32)).to(self.param.dtype)
        if rows is None:
            self.param.copy_(block)
            return
        rows = rows.tolist() if isinstance(rows, Tensor) else list(rows)
        self.param.index_copy_(self.dim, self.index(rows), block)

    def mask(self, rows: tuple[int, ...] | None, scale: float) -> Tensor | None:
        """A factor broadcast over ``param``'s gradient: ``scale`` on the entries of ``rows``, 0 elsewhere
        (``None``: the whole tensor unscaled, nothing to do)."""
        p = self.param
        if rows is None:
            return None if scale == 1.0 else torch.full((1,) * p.ndim, scale, dtype=p.dtype, device=p.device)
        shape = [1] * p.ndim
        shape[self.dim] = p.shape[self.dim]
        mask = torch.zeros(shape, dtype=p.dtype, device=p.device)
        mask.index_fill_(self.dim, self.index(rows), scale)
        return mask


def _hf_key(key: str) -> str:
    """A Bridge parameter's Hugging Face name (the Bridge wraps each module in ``._original_component``)."""
    return key.replace("._original_component", "")


def hf_tunable_tensors(hf_model: Any, params: dict[str, tuple[str, Tensor]] | None = None, *,
                       folded: bool = False, n_layers: int | None = None) -> dict[str, TunableTensor]:
    """The TransformerLens-named tensors of a Hugging Face model of an :data:`EXPORTABLE` family: name ->
    :class:`TunableTensor` over the model's parameters (``params``: Hugging Face name -> (the model's own
    parameter name, parameter), for a Bridge whose names differ). K/V tensors are named ``_W_K``/``_W_V``/
    ``_b_K``/``_b_V`` when K/V heads are shared (grouped-query attention), as TransformerLens 3.9 names them.
    ``folded``: the norms in :data:`FOLDED_NORMS` were folded into the weights after them and are left out.
    Parameters of another family or no mapping are simply absent (:func:`unmapped_parameters` lists them)."""
    cfg = hf_model.config
    arch = type(hf_model).__name__
    if params is None:  # tied embeddings: lm_head.weight is listed too (the reference needs W_U)
        params = {k: (k, p) for k, p in hf_model.named_parameters(remove_duplicate=False)}
    n_heads = cfg.num_attention_heads
    n_kv = getattr(cfg, "num_key_value_heads", None) or n_heads
    d_head = getattr(cfg, "head_dim", None) or cfg.hidden_size // n_heads
    gemma = arch in _GEMMA
    layers = n_layers if n_layers is not None else cfg.num_hidden_layers
    names = [f"blocks.{l}.{n}" for l in range(layers) for n in _PER_LAYER] + list(_GLOBAL)
    out: dict[str, TunableTensor] = {}
    for name in names:
        module = name.split(".")[-2] if name.startswith("blocks.") else name.split(".")[0]
        if (folded and module in FOLDED_NORMS) or (module in ("ln1_post", "ln2_post") and not gemma):
            continue  # (Llama's post_attention_layernorm is ln2, before the MLP)
        try:
            target = hf_name(name, arch)
        except ExportError:
            continue
        if target not in params:
            continue
        key, param = params[target]
        param_name = name.split(".")[-1]
        tl_name = name
        if n_kv < n_heads and param_name in _GROUPED:
            tl_name = name[: -len(param_name)] + _GROUPED[param_name]
        scale, offset = 1.0, 0.0
        if gemma and name == "embed.W_E":
            scale = cfg.hidden_size**0.5
        elif gemma and param_name == "w":
            offset = 1.0
        out[tl_name] = TunableTensor(tl_name, key, param, _layout_of(tl_name), d_head, scale, offset)
    if "lm_head.bias" in params:  # a Bridge's processed unembedding has one (zero, like TransformerLens's b_U)
        key, param = params["lm_head.bias"]
        out["unembed.b_U"] = TunableTensor("unembed.b_U", key, param)
    return out


def unmapped_parameters(model: Any, tunable: dict[str, TunableTensor]) -> list[str]:
    """The model's parameters that no TransformerLens name in ``tunable`` covers, except folded norms."""
    covered = {id(t.param) for t in tunable.values()}
    folded = getattr(model, "_weights_processed", False)
    out = []
    for key, p in model.named_parameters():
        hf = _hf_key(key)
        if id(p) in covered:
            continue
        if folded and (hf.endswith(("input_layernorm.weight", "model.norm.weight")) or
                       (hf.endswith("post_attention_layernorm.weight") and type(_hf_of(model)).__name__ not in _GEMMA) or
                       hf.endswith("pre_feedforward_layernorm.weight")):
            continue
        out.append(hf)
    return out


def _hf_of(model: Any) -> Any:
    return getattr(model, "original_model", model)


def bridge_tunable_tensors(model: Any) -> dict[str, TunableTensor]:
    """:func:`hf_tunable_tensors` of a ``TransformerBridge``'s Hugging Face model, over the Bridge's own parameters
    (their names with ``._original_component``). A Bridge whose weights were processed (``fold_ln``) has its
    pre-norms folded: they are not tunable, as on a ``HookedTransformer`` loaded with ``fold_ln``."""
    hf = model.original_model
    params = {_hf_key(k): (k, p) for k, p in model.named_parameters()}
    return hf_tunable_tensors(hf, params, folded=bool(getattr(model, "_weights_processed", False)),
                              n_layers=model.cfg.n_layers)


@torch.no_grad()
def tl_state_dict(hf_model: Any) -> dict[str, Tensor]:
    """The unfolded TransformerLens state dict of a Hugging Face model of an :data:`EXPORTABLE` family (the
    tensors :func:`write_back` reads as its ``reference``), built from the model's own weights without
    TransformerLens (which 4.x no longer converts with)."""
    arch = type(hf_model).__name__
    if arch not in EXPORTABLE:
        raise ExportError(f"Writing tuned weights back is supported for {', '.join(EXPORTABLE)}; not for {arch}.")
    return {name: t.read().to(torch.float32).clone() for name, t in hf_tunable_tensors(hf_model).items()}
