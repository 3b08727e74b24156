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
