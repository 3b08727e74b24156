"""The arms of the Precise SFT study that are not Precise SFT's own plan: random heads, and LoRA through ``peft``.

- :func:`random_heads`: as many heads as the key set, drawn uniformly from the key heads' layer range outside the
  key set; one draw per ``(seed, draw)``, the same on every run.
- LoRA (:func:`train_lora`): ``peft`` wraps Hugging Face modules, and the toolkit's models are TransformerLens
  models whose attention weights are einsum parameters (3.9) or views of the Hugging Face weights (4.3). So the
  LoRA arm trains the Hugging Face model the TransformerLens model is converted from (``load_hf_reference``: the
  same weights), on the same token ids, batches, loss (summed next-token cross-entropy over the target tokens, divided
  by the step's target tokens), lr schedule and AdamW settings as :func:`circuits.sft.train.finetune`; the adapters
  are merged (``merge_and_unload``), the model is saved as a Hugging Face folder and loaded with
  :func:`~circuits.models.loading.load_model` like any such folder, and scored by the same evaluator as every arm.
- :func:`lora_rank`: the rank whose trained parameters are nearest Precise SFT's: ``r * per_rank``, where
  ``per_rank`` sums ``in + out`` over the adapted projections of every layer; the difference is at most half of one
  rank's parameters (:data:`LORA_TOLERANCE`), unless rank 1 already exceeds the target.

``peft`` is an optional extra (``pip install .[peft]``): nothing here imports it until LoRA runs.
"""

from __future__ import annotations

import math
import random
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from circuits.sft.config import FinetuneConfig
from circuits.sft.data import TokenizedExample, collate
from circuits.types import Head

# LoRA's trained count is r * per_rank; the rank is the nearest, so |r * per_rank - target| <= per_rank / 2.
LORA_TOLERANCE = "half of one rank's parameters (per_rank / 2)"
PEFT_MISSING = "peft is not installed (pip install -e '.[peft]'): the LoRA arm needs it"


def random_heads(key: Sequence[Head], n_heads: int, seed: int, draw: int) -> tuple[Head, ...]:
    """``len(key)`` heads drawn without replacement from the layers ``min..max`` of ``key``, none of them in ``key``;
    the same for the same ``(seed, draw)``, another draw for another ``draw``. Sorted by ``(layer, head)``."""
    key = tuple(Head(int(l), int(h)) for l, h in key)
    if not key:
        raise ValueError("random heads are drawn beside a key set; the key set is empty")
    lo, hi = min(h.layer for h in key), max(h.layer for h in key)
    pool = [Head(l, h) for l in range(lo, hi + 1) for h in range(n_heads) if Head(l, h) not in set(key)]
    if len(pool) < len(key):
        raise ValueError(f"layers {lo}..{hi} hold {len(pool)} heads outside the {len(key)} key heads: too few to draw "
                         "as many random heads")
    rng = random.Random(f"random-heads:{seed}:{draw}")  # a string seed is hashed the same in every process
    return tuple(sorted(rng.sample(pool, len(key))))


def lora_modules(hf_model: Any, targets: Sequence[str]) -> list[tuple[str, torch.nn.Linear]]:
    """The ``nn.Linear`` modules of ``hf_model`` whose last name is one of ``targets`` (what peft's
    ``target_modules`` list matches)."""
    found = [(n, m) for n, m in hf_model.named_modules() if n.rsplit(".", 1)[-1] in targets
             and isinstance(m, torch.nn.Linear)]
    if not found:
        raise ValueError(f"the model has no linear module named {', '.join(targets)} for LoRA to adapt")
    return found


def lora_per_rank(hf_model: Any, targets: Sequence[str]) -> int:
    """Trained parameters per unit of LoRA rank: ``A`` is ``r x in``, ``B`` is ``out x r`` for each adapted module."""
    return sum(m.in_features + m.out_features for _, m in lora_modules(hf_model, targets))


def lora_rank(target: int, per_rank: int) -> int:
    """The rank whose count ``r * per_rank`` is nearest ``target`` (at least 1)."""
    if target < 1 or per_rank < 1:
        raise ValueError(f"need a positive target and per-rank count, got {target} and {per_rank}")
    return max(1, math.floor(target / per_rank + 0.5))


def wrap_lora(hf_model: Any, rank: int, targets: Sequence[str], seed: int) -> Any:
    """``hf_model`` with LoRA adapters of ``rank`` on ``targets`` (alpha = 2 * rank, no dropout, no bias), ``A``
    initialised from ``seed`` (``B`` is zero, so the wrapped model starts equal to the base)."""
    try:
        from peft import LoraConfig, get_peft_model
    except ImportError:
        raise ImportError(PEFT_MISSING) from None
    torch.manual_seed(seed)
    config = LoraConfig(r=rank, lora_alpha=2 * rank, lora_dropout=0.0, bias="none", target_modules=list(targets))
    return get_peft_model(hf_model, config)


def hf_sft_loss(model: Any, tokens: torch.Tensor, loss_mask: torch.Tensor) -> torch.Tensor:
    """:func:`circuits.sft.train.sft_loss` on a Hugging Face model: summed next-token cross-entropy over the target
    positions of ``loss_mask`` (right padding needs no attention mask: causal attention never lets a real position
    see a pad)."""
    logits = model(input_ids=tokens).logits[:, :-1]
    select = loss_mask.bool()
    return torch.nn.functional.cross_entropy(logits[select].float(), tokens[:, 1:][select], reduction="sum")


def train_lora(hf_model: Any, examples: list[TokenizedExample], config: FinetuneConfig, rank: int,
               targets: Sequence[str], pad_id: int) -> tuple[Any, dict[str, Any]]:
    """Train LoRA adapters on ``hf_model`` with ``config``'s batches, lr schedule and AdamW settings (the loop of
    :func:`circuits.sft.train.finetune`, on the Hugging Face model); return the peft model and its run's numbers
    (``tuned_parameters`` counted by peft itself, losses, seconds)."""
    from circuits.sft.train import batch_schedule, lr_at

    model = wrap_lora(hf_model, rank, targets, config.seed)
    model.eval()  # no dropout, as the TransformerLens model trains
    trained = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(trained, lr=config.lr, betas=config.betas, eps=config.eps,
                                  weight_decay=config.weight_decay)
    schedule = batch_schedule(len(examples), config)
    losses, samples, seconds = [], 0, 0.0
    for step, micro in enumerate(schedule):
        t0 = time.perf_counter()
        n_target = sum(sum(len(examples[i].ids) - max(examples[i].n_prompt, 1) for i in mb) for mb in micro)
        step_loss = 0.0
        for mb in micro:
            tokens, mask = collate([examples[i] for i in mb], pad_id)
            loss = hf_sft_loss(model, tokens, mask) / max(n_target, 1)
            loss.backward()
            step_loss += loss.item()
        if not math.isfinite(step_loss):
            raise FloatingPointError(f"LoRA loss became {step_loss} at step {step + 1}; try a lower lr")
        for group in optimizer.param_groups:
            group["lr"] = lr_at(step, len(schedule), config)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(step_loss)
        seconds += time.perf_counter() - t0
        samples += sum(len(mb) for mb in micro)
    tuned, _ = model.get_nb_trainable_parameters()
    return model, {"tuned_parameters": int(tuned), "losses": losses, "train_seconds": seconds, "steps": len(schedule),
                   "samples": samples, "lora_rank": rank}


def merged_model(peft_model: Any, tokenizer: Any, dtype: str, device: str | torch.device) -> Any:
    """The LoRA-trained model as the toolkit's model: adapters merged into the weights, saved as a Hugging Face
    folder and loaded by :func:`~circuits.models.loading.load_model` (either backend), then the folder removed."""
    from circuits.models.loading import load_model

    merged = peft_model.merge_and_unload()
    with tempfile.TemporaryDirectory(prefix="circuits-lora-") as tmp:
        merged.save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)
        return load_model(Path(tmp), dtype=dtype, device=device)
