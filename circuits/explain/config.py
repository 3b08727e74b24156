"""What decides the explain step's results (Figures 5, 6 and 7), and the configs of its commands (``circuits
attention``, ``circuits attention-views``, ``circuits lens``). Imports neither torch nor transformer_lens: the command
line builds its flags from them."""

from __future__ import annotations

from dataclasses import dataclass

from circuits.config import option
from circuits.data.templates import OPERATIONS
from circuits.identify.config import FromIdentify, KeyHeadSource


@dataclass(frozen=True)
class RolesConfig(KeyHeadSource):
    """What decides Figure 5: the identify run, how many of its key heads are read, and the prompts of each
    operation."""

    n_key_heads: int = option(8)
    operations: tuple[str, ...] = option(OPERATIONS)
    n_prompts: int = option(32, help="prompts per operation (the paper: 1000)")


@dataclass(frozen=True)
class ViewsConfig(KeyHeadSource):
    """What decides Figures 7 and 16: the identify run, how many key heads are shown, on which prompts, cropped to
    how many last tokens."""

    n_key_heads: int = option(4)
    operations: tuple[str, ...] = option(OPERATIONS)
    prompts_per_operation: int = option(2)
    last_tokens: int = option(14, help="crop the few-shot prefix from the views")


@dataclass(frozen=True)
class LensConfig(KeyHeadSource):
    """What decides Figure 6: the identify run's pairs, Figure 6c's example and how many tokens it lists."""

    example: str = option("4 + 3 = ", help="Figure 6c's prompt (after the task's few-shot prefix)")
    example_answer: str = option("7")
    top_k: int = option(5)


@dataclass(frozen=True)
class RolesJobConfig(FromIdentify, RolesConfig):
    """``circuits attention``: Figure 5 from an identify result (``--heads-from``) or a fresh identify run."""


@dataclass(frozen=True)
class ViewsJobConfig(FromIdentify, ViewsConfig):
    """``circuits attention-views``: Figures 7 and 16 from an identify result or a fresh identify run."""


@dataclass(frozen=True)
class LensJobConfig(FromIdentify, LensConfig):
    """``circuits lens``: Figure 6 on an identify result's pairs (``--heads-from``) or on pairs built from the
    flags (no identify run: the lens needs no key heads)."""
