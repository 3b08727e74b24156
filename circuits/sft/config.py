"""What decides a fine-tuning run and an export (saved as their ``config.json``).

:class:`FinetuneConfig` (``circuits finetune``) and :class:`ExportConfig` (``circuits export``), with the choices
they offer. Imports neither torch nor transformer_lens (the command line builds its flags from them)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from circuits.config import Config, count, option
from circuits.types import DTYPE_NAMES, Head, parse_heads, parse_layers

# What grouped-query attention does with a K/V head shared by tuned and untuned query heads (circuits.sft.plan).
KVPolicy = Literal["shared", "never"]
DEFAULT_KV_POLICY: KVPolicy = "shared"
KV_POLICIES: tuple[str, ...] = ("shared", "never")
# The training sources (circuits.sft.data builds them).
TRAIN_SOURCES: tuple[str, ...] = ("gsm8k", "adapters", "arithmetic")
# The dtypes ``circuits export`` writes weights in.
SAVE_DTYPES = ("float32", "bfloat16", "float16")


@dataclass(frozen=True)
class FinetuneConfig(Config):
    """One fine-tuning run. Defaults are the paper's (Section 5.3) except where marked.

    ``heads``/``mlps`` select Precise SFT; ``full=True`` tunes everything (and needs no heads).
    ``max_steps`` caps optimizer steps (``None``: ``epochs`` over the data).
    """

    model: str = option("smollm2", help="model name or path (see circuits.models.load_model)")
    heads: tuple[Head, ...] = option((), parse=parse_heads, help="heads to tune, LAYER.HEAD,... (e.g. 21.2,20.6)")
    mlps: tuple[int, ...] = option((), minimum=0, maximum=10_000, unique=True, parse=parse_layers, help="MLP layers to tune, comma-separated")
    full: bool = option(False, help="full SFT: tune every parameter")
    kv_policy: str = option(DEFAULT_KV_POLICY, choices=KV_POLICIES,
                            help="grouped-query attention: tune a shared K/V head when any of its query heads is "
                                 "selected ('shared') or never")
    rescale: bool = option(True, help="rescale head gradients by H/h (heads per layer / tuned heads in it)")
    lr: float = option(2e-5)
    weight_decay: float = option(0.1)
    warmup_ratio: float = option(0.02)
    batch_size: int = count(128, help="effective batch (gradient accumulation)")
    # Micro-batch for gradient accumulation; 8 keeps activations of a 135M model small on CPU.
    micro_batch_size: int = count(8)
    epochs: int = count(2, maximum=10_000)
    max_steps: int | None = count(None, flag="--steps", help="cap on optimizer steps")
    max_length: int = count(384, minimum=8)
    betas: tuple[float, float] = option((0.9, 0.999), cli=False)
    eps: float = option(1e-8, cli=False)
    seed: int = option(0, minimum=0)
    checkpoint_every: int = count(25)
    sources: tuple[str, ...] = option(TRAIN_SOURCES, flag="--data",
                                      help="training sources: gsm8k (train split), adapters (LLM-Adapters math minus all "
                                           "test questions), arithmetic")
    n_arithmetic: int = count(2000, minimum=0, help="synthetic arithmetic examples trained on (0: none)")
    limit_per_source: int | None = count(None)
    data_dir: str | None = option(None, help="benchmark data folder (default: $CIRCUITS_DATA_DIR or ../shared/data)")
    save_delta: bool = option(True, cli=False)
    dtype: str = option("float32", choices=DTYPE_NAMES,
                        help="compute dtype of the forward and backward passes; tuned values keep fp32 masters and "
                             "fp32 AdamW state, fp16 scales the loss (sharded full SFT: parameters stay fp32)")
    activation_checkpointing: bool = option(False, help="recompute each block's activations in backward: less "
                                                        "memory for about a third more compute")
    cpu_offload: bool = option(False, help="full SFT: keep fp32 parameter shards, gradients and AdamW state on the "
                                           "CPU (FSDP2 CPUOffloadPolicy), so a 7B model's full SFT fits one GPU")

    def __post_init__(self) -> None:
        object.__setattr__(self, "heads", tuple(Head(int(l), int(h)) for l, h in self.heads))
        object.__setattr__(self, "mlps", tuple(int(m) for m in self.mlps))
        object.__setattr__(self, "sources", tuple(self.sources))
        object.__setattr__(self, "betas", tuple(self.betas))
        if self.full and (self.heads or self.mlps):
            raise ValueError("full=True tunes every parameter; do not also list heads or MLPs")
        if not self.full and not (self.heads or self.mlps):
            raise ValueError("Precise SFT needs heads or MLPs (or set full=True)")
        if any(len(h) != 2 for h in self.heads):
            raise ValueError(f"heads must be (layer, head) pairs, got {self.heads}")
        if self.kv_policy not in KV_POLICIES:
            raise ValueError(f"kv_policy must be one of {KV_POLICIES}, got {self.kv_policy!r}")
        if not (self.lr > 0 and self.weight_decay >= 0 and 0 <= self.warmup_ratio < 1):
            raise ValueError("need lr > 0, weight_decay >= 0 and 0 <= warmup_ratio < 1")
        if self.micro_batch_size < 1 or self.batch_size < self.micro_batch_size or self.batch_size % self.micro_batch_size:
            raise ValueError(f"batch_size ({self.batch_size}) must be a positive multiple of micro_batch_size ({self.micro_batch_size})")
        if self.dtype not in DTYPE_NAMES:
            raise ValueError(f"Unknown dtype {self.dtype!r}; accepted: {', '.join(DTYPE_NAMES)}")
        if self.cpu_offload and not self.full:
            raise ValueError("cpu_offload is for full SFT (Precise SFT's optimizer state is already small)")
        if set(self.sources) - set(TRAIN_SOURCES):
            raise ValueError(f"sources must be among {TRAIN_SOURCES}, got {self.sources}")


@dataclass(frozen=True)
class ExportConfig(Config):
    """What ``circuits export`` writes."""

    delta: str = option("", help="delta.pt written by circuits finetune")
    model: str | None = option(None, help="the base model the delta was trained on (default: the one the delta names)")
    folded: bool = option(True, help="the delta was trained on a model loaded with folded norms (circuits finetune "
                                     "does this)")
    dtype: str = option("float32", choices=SAVE_DTYPES, help="dtype of the saved weights")

    def __post_init__(self) -> None:
        if self.dtype not in SAVE_DTYPES:
            raise ValueError(f"Unknown dtype {self.dtype!r}; accepted: {', '.join(SAVE_DTYPES)}")


def check_component_counts(top_k: object, top_mlps: object) -> None:
    """``--top-k`` and ``--top-mlps`` (heads and MLPs taken from ``--heads-from``) are whole numbers >= 0: -1 would
    slice off the last head, not mean "all". One line naming the flag; the command line checks it before torch is
    imported, :func:`circuits.sft.job.select` again from Python."""
    for flag, n in (("--top-k", top_k), ("--top-mlps", top_mlps)):
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise ValueError(f"{flag} {n!r}: a count of components (a whole number >= 0) is expected")
