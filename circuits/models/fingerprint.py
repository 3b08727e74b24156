"""What identifies a model's weights cheaply: :func:`weights_fingerprint`, saved by identify and compared when a later
job takes its heads (``--heads-from``), so a ranking made on other weights (a fine-tuned checkpoint saved over the
same folder, another revision of a hub name) is named, not used without a word (issue 41)."""

from __future__ import annotations

import hashlib

import torch

from circuits.models.backend import Model

SAMPLE = 256  # values read from each parameter, evenly spaced over it


def weights_fingerprint(model: Model) -> str:
    """``<backend>/<dtype>/<hash>``: a SHA-256 (first 16 hex digits) over every parameter's name, shape and
    :data:`SAMPLE` of its values, evenly spaced, read exactly (no arithmetic: the same weights give the same
    fingerprint on any device). Fine-tuning moves nearly every value, so it changes the fingerprint; an edit of a
    single value between the samples would not. Fingerprints of two backends or dtypes are not comparable
    (:func:`same_weights`)."""
    h = hashlib.sha256()
    params = sorted(model.named_parameters(), key=lambda kv: kv[0])
    dtype = str(params[0][1].dtype).removeprefix("torch.") if params else "none"
    with torch.no_grad():
        for name, p in params:
            h.update(f"{name}:{list(p.shape)}:".encode())
            # the values at evenly spaced flat (row-major) indices, gathered in place: many parameters are
            # non-contiguous views, and flattening them would copy the whole model
            idx = torch.arange(0, p.numel(), max(1, p.numel() // SAMPLE), device=p.device)[:SAMPLE]
            sample = p.detach()[torch.unravel_index(idx, p.shape)] if p.ndim else p.detach().reshape(1)
            h.update(sample.to("cpu", torch.float32).numpy().tobytes())
    return f"{model.backend.name}/{dtype}/{h.hexdigest()[:16]}"


def same_weights(saved: str, now: str) -> bool | None:
    """Whether two fingerprints name the same weights: None when they cannot be compared (one is missing, as in a
    result saved before fingerprints were, or they were taken on another backend or in another dtype)."""
    if not saved or not now or saved.rsplit("/", 1)[0] != now.rsplit("/", 1)[0]:
        return None
    return saved == now
