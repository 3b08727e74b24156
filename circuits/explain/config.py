"""What decides the explain step's results (Figures 5, 6 and 7), which are also the configs of its commands
(``circuits attention``, ``circuits attention-views``, ``circuits lens``). Imports neither torch nor
transformer_lens: the command line builds its flags from them."""

from __future__ import annotations

from dataclasses import dataclass

from circuits.config import count, option
from circuits.data.templates import OPERATIONS
from circuits.identify.config import FromIdentify


@dataclass(frozen=True)
class RolesConfig(FromIdentify):
    """What decides Figure 5 (``circuits attention``): the identify run (``heads_from``: its saved result), how many
    of its top-ranked heads are read (its key rule's first), and the prompts of each operation."""

    n_key_heads: int = count(8, per_model="heads", help="heads read: the identify ranking's top N by the key "
                                                        "rule's metric (the key rule's heads first)")
    operations: tuple[str, ...] = option(OPERATIONS, choices=OPERATIONS, nonempty=True, unique=True)
    n_prompts: int = count(32, help="prompts per operation (the paper: 1000)")


@dataclass(frozen=True)
class ViewsConfig(FromIdentify):
    """What decides Figures 7 and 16 (``circuits attention-views``): the identify run (``heads_from``: its saved
    result), how many of its top-ranked heads are shown (its key rule's first), on which prompts, cropped to how many
    last tokens."""

    n_key_heads: int = count(4, per_model="heads", help="heads shown: the identify ranking's top N by the key "
                                                        "rule's metric (the key rule's heads first)")
    operations: tuple[str, ...] = option(OPERATIONS, choices=OPERATIONS, nonempty=True, unique=True)
    prompts_per_operation: int = count(2)
    last_tokens: int = count(14, help="crop the few-shot prefix from the views: the last tokens shown")


@dataclass(frozen=True)
class LensConfig(FromIdentify):
    """What decides Figure 6 (``circuits lens``): the identify run's pairs (``heads_from``: its saved result; without
    it the pairs are built from these fields, no identify run), Figure 6c's example and how many tokens it lists."""

    example: str = option("4 + 3 = ", help="Figure 6c's prompt (after the task's few-shot prefix)")
    example_answer: str = option("7")
    top_k: int = count(5, maximum=1000, help="tokens Figure 6c lists")
