"""Forward passes that read only the last position, running shared few-shot prefixes once.

Prompts built from one template share their few-shot prefix token for token, and the prefix is
most of each prompt. :func:`end_residuals` runs a shared prefix once into the backend's
key/value cache (TransformerLens 3's, or Hugging Face's on a TransformerBridge), repeats the cache along the
batch, and runs only the rest of each prompt. Causal attention makes this exact (tests compare it with full
forwards). Where the backend's cache does not give the full run's numbers
(:meth:`~circuits.models.backend.Backend.prefix_sharing`: a Bridge under transformers 5.24), every prompt runs whole.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from jaxtyping import Float
from torch import Tensor
from circuits.models.backend import Model, apply_softcap

HooksFor = Callable[[Hashable, int], list]  # (group key, position offset) -> forward hooks
RowHooksFor = Callable[[list[int], Tensor], list]  # (rows of a batch, each row's END among the tokens fed) -> hooks


def pad_token_id(model_or_tokenizer: Any) -> int:
    """The id right padding uses: the tokenizer's pad token, else its EOS, else 0. Right padding never
    changes anything at or before a row's last real token (causal attention), so the value only has to exist."""
    tok = getattr(model_or_tokenizer, "tokenizer", model_or_tokenizer)
    for name in ("pad_token_id", "eos_token_id"):
        value = getattr(tok, name, None) if tok is not None else None
        if value is not None:
            return int(value)
    return 0


FULL_BATCH_LENGTH = 1024  # sequences up to this many tokens run ``batch_size`` at a time; longer ones in fewer


def cost_batches(costs: Sequence[int], batch_size: int, budget: int) -> list[range]:
    """Consecutive batches of rows (costs sorted largest first) with at most ``batch_size`` rows and at
    most ``budget`` in total cost (a row over budget runs alone)."""
    out, start = [], 0
    while start < len(costs):
        rows = max(1, min(batch_size, budget // max(1, costs[start])))
        out.append(range(start, min(start + rows, len(costs))))
        start = out[-1].stop
    return out


def length_batches(lengths: Sequence[int], batch_size: int, full_length: int = FULL_BATCH_LENGTH) -> list[range]:
    """Batches of rows (sorted longest first): at most ``batch_size`` rows and at most ``batch_size *
    full_length**2`` attention-pattern cells (rows x length squared), because TransformerLens materialises
    the whole ``[batch head pos pos]`` pattern (a 5-shot MMLU prompt of 2,900 tokens in a batch of 64 asks
    for 18 GB)."""
    return cost_batches([n * n for n in lengths], batch_size, batch_size * full_length**2)


def shared_prefix_lengths(token_ids: Sequence[Sequence[int]], min_prefix: int = 32) -> list[int]:
    """For each row, the length of a prefix it shares with other rows (0: none), such that rows given
    the same prefix length share exactly that prefix: rows are sorted, and runs of neighbours that share
    at least ``min_prefix`` tokens get their run's common prefix (always shorter than each row, so
    every row has at least one token of its own). Few-shot prompts that differ only in the question get
    their whole few-shot part."""
    order = sorted(range(len(token_ids)), key=lambda i: tuple(token_ids[i]))

    def lcp(a: Sequence[int], b: Sequence[int]) -> int:
        n = min(len(a), len(b))
        k = 0
        while k < n and a[k] == b[k]:
            k += 1
        return k

    out = [0] * len(token_ids)
    start = 0
    while start < len(order):
        common, end = None, start + 1
        while end < len(order):
            k = lcp(token_ids[order[end - 1]], token_ids[order[end]])
            k = k if common is None else min(common, k)
            if k < min_prefix:
                break
            common, end = k, end + 1
        run = order[start:end]
        if common is not None:
            n_pre = min(common, min(len(token_ids[i]) for i in run) - 1)
            if n_pre >= min_prefix:
                for i in run:
                    out[i] = n_pre
        start = end
    return out


def end_residuals(model: Model, token_ids: Sequence[Sequence[int]], prefix_lengths: Sequence[int] | None = None,
                  **options: Any) -> Float[Tensor, "row d_model"]:
    """The residual stream after the last block at each row's last token, every row's in one tensor
    (:func:`end_residual_batches` gives them a batch at a time, for a caller that keeps only a few numbers a row).
    Arguments as :func:`end_residual_batches`'s (``group_keys``, ``hooks``, ``row_hooks``, ``batch_size``)."""
    # Final residuals live where the last block runs (another GPU than the first for a spread model).
    out_device = model.backend.output_device()
    out = torch.empty((len(token_ids), model.cfg.d_model), dtype=model.cfg.dtype, device=out_device)
    for chunk, resid in end_residual_batches(model, token_ids, prefix_lengths, **options):
        out[torch.tensor(chunk, device=out_device)] = resid.to(out_device)
    return out


def end_residual_batches(
    model: Model,
    token_ids: Sequence[Sequence[int]],
    prefix_lengths: Sequence[int] | None = None,
    *,
    group_keys: Sequence[Hashable] | None = None,
    hooks: HooksFor | None = None,
    row_hooks: RowHooksFor | None = None,
    batch_size: int = 64,
) -> Iterator[tuple[list[int], Float[Tensor, "batch d_model"]]]:
    """The residual stream after the last block at each row's last token, one forward batch at a time:
    ``(rows, resid)`` with ``resid[r]`` row ``rows[r]``'s (``rows`` index ``token_ids``; every row comes once). Memory
    is one batch's, whatever the number of rows.

    Args:
        token_ids: one token list per row (right-padded internally; pads after the last token never
            reach it).
        prefix_lengths: tokens at the start of each row that other rows may share; rows whose
            prefixes are equal run them once. ``None`` or 0: no sharing.
        group_keys: rows run together only when their keys are equal (e.g. one key per set of hooks).
        hooks: ``hooks(key, offset)`` gives the forward hooks for a group; ``offset`` is the position
            of the first token fed in that call (0 for a prefix, the prefix length for the rest).
        row_hooks: ``row_hooks(rows, ends)`` gives more forward hooks for the call that runs the last tokens of
            ``rows`` (indices into ``token_ids``), ``ends`` being each row's last position among the tokens fed in
            that call: how a caller reads other activations at each row's last token.
    """
    device = model.cfg.device
    share = bool(prefix_lengths) and model.backend.prefix_sharing()
    groups: dict[tuple, list[int]] = {}
    for i, ids in enumerate(token_ids):
        n_pre = prefix_lengths[i] if share else 0  # type: ignore[index]
        key = group_keys[i] if group_keys is not None else None
        groups.setdefault((key, tuple(ids[:n_pre])), []).append(i)
    for (key, pre), rows in groups.items():
        rows = sorted(rows, key=lambda i: len(token_ids[i]), reverse=True)
        n_pre = len(pre)
        # Attention cells of a row: its own tokens (queries) x the prefix and its own tokens (keys).
        costs = [(len(token_ids[i]) - n_pre) * len(token_ids[i]) for i in rows]
        for part in cost_batches(costs, batch_size, batch_size * FULL_BATCH_LENGTH**2):
            chunk = rows[part.start : part.stop]
            width = max(len(token_ids[i]) for i in chunk)
            full = torch.zeros((len(chunk), width), dtype=torch.long)
            for r, i in enumerate(chunk):
                full[r, : len(token_ids[i])] = torch.tensor(list(token_ids[i]))
            full = full.to(device)
            ends = torch.tensor([len(token_ids[i]) - 1 for i in chunk], device=device)
            if not n_pre or n_pre >= width:
                own = row_hooks(chunk, ends) if row_hooks else []
                with model.hooks(fwd_hooks=(hooks(key, 0) if hooks else []) + own):
                    resid = model.backend.final_residual(full)
            else:
                cache = model.backend.prefix_cache(full[:1, :n_pre], hooks(key, 0) if hooks else [], len(chunk))
                body = full[:, n_pre:]
                ends = ends - n_pre
                own = row_hooks(chunk, ends) if row_hooks else []
                with model.hooks(fwd_hooks=(hooks(key, n_pre) if hooks else []) + own):
                    resid = model.backend.continue_prefix(body, cache)
            rows_idx = torch.arange(len(chunk), device=resid.device)
            yield chunk, resid[rows_idx, ends.to(resid.device)]


@dataclass
class EndRecord:
    """Activations at each row's last token, kept from one pass for a later pass over the same rows.

    The identify job runs every candidate's reference prompt while filtering (:func:`circuits.data.pairs.build_pairs`)
    and the sweep then runs the kept ones again for their END activations at every layer
    (:func:`circuits.patching.core.end_layers.collect_runs`). Given as ``record=`` to the filtering pass, this keeps
    the hooks ``names`` at END for each row it runs, by the row's tokens; the sweep reads the rows it finds and runs
    only the others. Both passes run the same rows on the same weights (prefixes shared differently, so equal up to
    float rounding). Rows stop being kept once they hold ``budget_bytes``; :meth:`keep_only` drops the rows a later
    pass will not read.
    """

    names: tuple[str, ...]
    budget_bytes: int
    rows: dict[tuple[int, ...], dict[str, Tensor]] = field(default_factory=dict, repr=False)
    nbytes: int = 0

    def row_hooks(self, token_ids: Sequence[Sequence[int]]) -> RowHooksFor:
        """``row_hooks`` for :func:`end_residual_batches` over ``token_ids``: each hook's value at each row's END."""

        def hooks(chunk: list[int], ends: Tensor) -> list:
            if self.nbytes >= self.budget_bytes:
                return []

            def gather(name: str):
                def hook(act: Tensor, hook) -> None:
                    values = act[torch.arange(act.shape[0], device=act.device), ends.to(act.device)].detach()
                    for r, i in enumerate(chunk):
                        self.rows.setdefault(tuple(token_ids[i]), {})[name] = values[r].clone()
                    self.nbytes += values.numel() * values.element_size()

                return hook

            return [(n, gather(n)) for n in self.names]

        return hooks

    def get(self, token_ids: Sequence[int]) -> dict[str, Tensor] | None:
        """Every hook's END value for these tokens, or None when any is missing."""
        found = self.rows.get(tuple(token_ids))
        return found if found is not None and all(n in found for n in self.names) else None

    def keep_only(self, token_ids: Sequence[Sequence[int]]) -> None:
        wanted = {tuple(t) for t in token_ids}
        self.rows = {k: v for k, v in self.rows.items() if k in wanted}
        self.nbytes = sum(t.numel() * t.element_size() for v in self.rows.values() for t in v.values())


def unembed_end(model: Model, resid: Float[Tensor, "row d_model"]) -> Float[Tensor, "row d_vocab"]:
    """Logits (float32) from final residuals: the model's own final norm, unembedding and final-logit soft-cap
    (Gemma 2), as its forward pass computes them."""
    logits = model.unembed(model.ln_final(resid[:, None]))[:, 0]
    return apply_softcap(logits, model.backend.logit_softcap()).float()
