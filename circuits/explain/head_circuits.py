"""The OV and QK circuits of key heads, read between tokens (as ARENA does after patching, with ``FactoredMatrix``).

- **OV**: what a head writes onto the answer tokens when it attends to an operand token:
  ``ln1(W_E[source]) @ W_V[layer, head] @ W_O[layer, head] @ W_U[:, target]`` (a ``[source, target]`` table of
  direct logits). For a head that moves operand information to END, a row peaks at the answer digits the operand
  makes likely.
- **QK**: how much a query token attends to each source token before positions are taken into account:
  ``ln1(W_E[query]) @ W_Q W_K^T @ ln1(W_E[source])^T / attn_scale``.

These are the token-level, direct-path circuits (Elhage et al. 2021): they read the embeddings as if the head saw
them straight from layer 0 (each normalised by the head's own ``ln1``), and ignore rotary positions, biases and what
earlier layers add. They say what a head's weights *can* do with a token; patching (:func:`~circuits.sweep`) says
what it does on the prompts.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from jaxtyping import Float
from torch import Tensor
from circuits.models.backend import Model

from circuits.models.backend import FactoredMatrix

from circuits.types import Head

DIGITS = tuple(str(n) for n in range(10))


def single_tokens(tokenizer: Any, texts: Sequence[str]) -> tuple[list[int], list[str]]:
    """Each text as one token, preferring its form after a space (how operands and answers follow ``=``/``+``);
    a text that is one token in neither form is a ValueError naming it."""
    ids, labels = [], []
    for text in texts:
        for form in (" " + text.lstrip(), text):
            got = tokenizer(form, add_special_tokens=False).input_ids
            if len(got) == 1:
                ids.append(got[0])
                labels.append(form)
                break
        else:
            raise ValueError(f"{text!r} is not one token for this tokenizer (with or without a leading space); "
                             "accepted: texts that are one token, e.g. the digits 0-9")
    return ids, labels


@dataclass
class HeadCircuits:
    """OV and QK tables of some heads. ``ov[head, source, target]``: direct logit of ``target`` written by the head
    when it attends to ``source``; ``qk[head, query, source]``: the attention score (before softmax, no positions)."""

    heads: list[Head]
    sources: list[str]
    targets: list[str]
    queries: list[str]
    ov: Float[Tensor, "head source target"]
    qk: Float[Tensor, "head query source"]
    notes: dict[str, str] = field(default_factory=dict)

    def relative_ov(self) -> Float[Tensor, "head source target"]:
        """``ov`` minus each row's mean over targets: which answer token a source pushes *more than the others*
        (a head that raises every digit alike has a row of zeros)."""
        return self.ov - self.ov.mean(-1, keepdim=True)

    def figure(self, relative: bool = True, title: str | None = None):
        """The OV tables as heatmaps (:func:`circuits.viz.head_circuits.ov_figure`); ``relative``: each row minus its
        mean (:meth:`relative_ov`), else the raw direct logits."""
        from circuits.viz.head_circuits import ov_figure

        what = "direct logit minus the row's mean" if relative else "direct logit"
        title = title or f"OV circuits of key heads: operand token -> answer token ({what})"
        return ov_figure(self.relative_ov() if relative else self.ov, [str(h) for h in self.heads], self.sources,
                         self.targets, title, colorbar="logit vs row mean" if relative else "direct logit")

    def copying_score(self) -> Float[Tensor, " head"]:
        """Per head, the share of sources whose largest OV target is the same token text (1: a copying head)."""
        same = [self.targets.index(s) if s in self.targets else -1 for s in self.sources]
        hit = torch.tensor([[same[i] >= 0 and int(row.argmax()) == same[i] for i, row in enumerate(ov)] for ov in self.ov])
        return hit.float().mean(-1)

    def __repr__(self) -> str:
        return (f"HeadCircuits({', '.join(map(str, self.heads))}: OV {len(self.sources)} sources x {len(self.targets)} "
                f"targets, QK {len(self.queries)} queries x {len(self.sources)} sources)")


def _normed(model: Model, layer: int, ids: Sequence[int]) -> Tensor:
    """The embeddings of ``ids`` after layer ``layer``'s ``ln1`` (as if each were the whole residual stream)."""
    e = model.W_E[torch.tensor(list(ids), device=model.W_E.device)]
    return model.blocks[layer].ln1(e[:, None])[:, 0].float()


@torch.no_grad()
def head_circuits(model: Model, heads: Sequence[Any], sources: Sequence[str] = DIGITS,
                  targets: Sequence[str] = DIGITS, queries: Sequence[str] = ("=", " ")) -> HeadCircuits:
    """OV (``sources`` onto ``targets``) and QK (``queries`` against ``sources``) tables of ``heads`` (anything
    :meth:`Head.parse` reads, ``key_heads()``'s pairs included), through ``model.OV`` and ``model.QK``
    (``FactoredMatrix``). Defaults: the digits 0-9 as operands and answers; ``=`` and a space as queries (SmolLM2's
    prompts end with ``"= "``, so END is the space token; pass your prompts' END token otherwise)."""
    cfg = model.cfg
    hs = [Head.parse(h).check(cfg.n_layers, cfg.n_heads) for h in heads]
    if not hs:
        raise ValueError("No heads given: pass e.g. result.key_heads() or [cc.Head(20, 8)]")
    src, src_labels = single_tokens(model.tokenizer, sources)
    tgt, tgt_labels = single_tokens(model.tokenizer, targets)
    qry, qry_labels = single_tokens(model.tokenizer, queries)
    W_U = model.W_U[:, torch.tensor(tgt, device=model.W_U.device)].float()
    ovs, qks = [], []
    for h in hs:
        _, _, W_K, _, W_V, _ = model.backend.attn_qkv(h.layer)  # [kv_head, d_model, d_head]: query head h reads K/V head g
        g = h.head // (cfg.n_heads // W_K.shape[0])
        s = _normed(model, h.layer, src)
        ov = FactoredMatrix(W_V[g].float(), model.W_O[h.layer, h.head].float())
        ovs.append((s @ ov @ W_U).AB.cpu())  # [source, target]
        qk = FactoredMatrix(model.W_Q[h.layer, h.head].float(), W_K[g].float().T)
        qks.append(((_normed(model, h.layer, qry) @ qk @ s.T).AB * model.backend.score_scale(h.layer)).cpu())  # [query, source]
    return HeadCircuits(hs, src_labels, tgt_labels, qry_labels, torch.stack(ovs), torch.stack(qks),
                        {"path": "direct: embeddings through ln1, no positions or biases"})


__all__ = ["DIGITS", "HeadCircuits", "head_circuits", "single_tokens"]
