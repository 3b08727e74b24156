"""A model too big for one GPU, spread over several, and the device of each layer.

TransformerLens's forward pass already follows a layer split: before block ``i`` it moves the residual stream to
``get_device_for_block_index(i, cfg)`` (consecutive layers on consecutive GPUs from ``cfg.device``, ``cfg.n_devices``
of them). Its constructor in 3.9 does not place the blocks that way (``move_model_modules_to_device`` puts every
module on one device), so :func:`spread` does: the embedding with block 0, block ``i`` on its device, the final norm
and the unembedding with the last block, where the forward pass leaves the residual stream. The END-only engine asks
:func:`layer_device` and :func:`output_device` where each piece lives and moves its small END tensors there.
"""

from __future__ import annotations

import torch
from transformer_lens import HookedTransformer
from transformer_lens.utilities.multi_gpu import get_device_for_block_index


def block_devices(n_layers: int, first: str | torch.device, n_devices: int) -> list[torch.device]:
    """The device of each block when ``n_layers`` are split over ``n_devices`` GPUs from ``first`` (TransformerLens's
    rule: block ``i`` on ``first + i * n_devices // n_layers``)."""

    class _Cfg:  # the two fields the rule reads
        device = str(first)

    cfg = _Cfg()
    cfg.n_devices, cfg.n_layers = n_devices, n_layers  # type: ignore[attr-defined]
    return [get_device_for_block_index(i, cfg) for i in range(n_layers)]  # type: ignore[arg-type]


def spread(model: HookedTransformer, n_devices: int, first: str | torch.device | None = None) -> HookedTransformer:
    """Place ``model``'s layers over ``n_devices`` GPUs (in place) so that TransformerLens's forward pass, the
    training loop and the END-only engine run it across them. Load the model on the CPU first (a model that does not
    fit one GPU cannot be built on one)."""
    first = torch.device(first if first is not None else ("cuda:0" if torch.cuda.is_available() else "cpu"))
    if n_devices < 1:
        raise ValueError(f"n_devices must be >= 1, got {n_devices}")
    if n_devices > 1:
        if first.type != "cuda":
            raise ValueError("n_devices > 1 spreads a model over GPUs; none is visible here")
        if (first.index or 0) + n_devices > torch.cuda.device_count():
            raise ValueError(f"n_devices {n_devices} from {first} needs GPUs up to cuda:{(first.index or 0) + n_devices - 1}"
                             f"; this machine has {torch.cuda.device_count()}")
    devices = block_devices(model.cfg.n_layers, first, n_devices)
    model.cfg.device = str(first)
    model.cfg.n_devices = n_devices
    for i, block in enumerate(model.blocks):
        block.to(devices[i])
    for name in ("embed", "hook_embed", "pos_embed", "hook_pos_embed"):
        if hasattr(model, name):
            getattr(model, name).to(devices[0])
    for name in ("ln_final", "unembed"):
        if hasattr(model, name):
            getattr(model, name).to(devices[-1])
    return model


def check_dtype(dtype: str, device: str | torch.device) -> None:
    """fp16 is for GPUs: on a CPU it is slow and partly unsupported, and bf16 has its memory with fp32's range."""
    if dtype in ("float16", "fp16") and torch.device(device).type == "cpu":
        raise ValueError("dtype float16 needs a GPU (this run is on the CPU); use bfloat16 or float32 on a CPU")


def layer_device(model: HookedTransformer, layer: int) -> torch.device:
    """Where block ``layer``'s weights are (and so where its END-only pieces must run)."""
    return next(model.blocks[layer].parameters()).device


def output_device(model: HookedTransformer) -> torch.device:
    """Where the final norm and the unembedding run."""
    return model.unembed.W_U.device
