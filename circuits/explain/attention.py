"""What the key heads attend to (Section 4.2, 5.2; Figures 5, 7, 16).

:func:`role_attention` reads each chosen head's attention from the END token (the query that
predicts the answer) to every earlier token, and sums it by the token's role in the prompt: operand
``A``, operand ``B``, the ``operator``, the ``answer_prefix`` (the template text after the last
operand or operator up to END, e.g. ``=``, ``equals to``, ``? A:``), the ``few_shot`` prefix, and
``other`` (the rest of the question, BOS). Roles come from the template spans recorded in
:attr:`PromptPair.roles`, never from matching strings. Each prompt's roles sum to 1 per head (the
softmax row); Figure 5 is their mean over prompts.

:func:`attention_html` writes a standalone page of circuitsvis attention views (Figures 7, 16) that loads the
circuitsvis bundle once (shared beside the results, or inlined), so it opens offline; in a notebook it displays as
the views.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from jaxtyping import Float
from torch import Tensor
from circuits.models.backend import Model
from circuits.models.backend import act_name as get_act_name

from circuits.data.pairs import PromptPair, as_batch
from circuits.io import read_json, read_text, write_json, write_text
from circuits.patching.core.uncertainty import mean_interval
from circuits.explain.config import RolesConfig, ViewsConfig
from circuits.results import Result
from circuits.types import Head
from circuits.viz.notebook import ShowsFigure

ROLE_NAMES = ("A", "B", "operator", "answer_prefix", "few_shot", "other")


def has_roles(pair: PromptPair) -> bool:
    """Whether the pair marks any of its operands or operator (a pairs-file line without ``roles`` whose prompt
    matches no template marks none: every position would read as "other")."""
    return any(pair.roles.get(r) for r in ("A", "B", "operator"))


def role_of_positions(pair: PromptPair) -> list[str]:
    """The role of every position of the reference prompt (see the module docstring)."""
    n = len(pair.reference_token_ids)
    labels = ["other"] * n
    for i in range(pair.prefix_length):
        labels[i] = "few_shot"
    marked = [p for r in ("A", "B", "operator") for p in pair.roles.get(r, ())]
    if marked:
        for i in range(max(marked) + 1, n):
            labels[i] = "answer_prefix"
    for role in ("operator", "B", "A"):  # an operand wins over an operator on a shared token
        for p in pair.roles.get(role, ()):
            labels[p] = role
    return labels


def role_masks(pair: PromptPair) -> Float[Tensor, "role pos"]:
    labels = role_of_positions(pair)
    mask = torch.zeros(len(ROLE_NAMES), len(labels))
    for i, lab in enumerate(labels):
        mask[ROLE_NAMES.index(lab), i] = 1.0
    return mask


@torch.no_grad()
def end_attention(
    model: Model, pairs: Sequence[PromptPair], heads: Sequence[Head], batch_size: int = 32
) -> Float[Tensor, "pair head pos"]:
    """Attention from END to every position of each reference prompt, for each head (right-padded with 0)."""
    layers = sorted({l for l, _ in heads})
    names = {get_act_name("pattern", l) for l in layers}
    width = max(len(p.reference_token_ids) for p in pairs)
    out = torch.zeros(len(pairs), len(heads), width)
    for s in range(0, len(pairs), batch_size):
        chunk = list(pairs[s : s + batch_size])
        batch = as_batch(chunk, model)
        _, cache = model.run_with_cache(batch.reference, names_filter=lambda n: n in names, stop_at_layer=max(layers) + 1)
        rows = torch.arange(len(chunk), device=batch.end.device)
        for j, (l, h) in enumerate(heads):
            pat = cache[get_act_name("pattern", l)][:, h]  # [batch, q, k]
            out[s : s + len(chunk), j, : pat.shape[-1]] = pat[rows, batch.end].float().cpu()
    return out


@dataclass
class RoleAttention:
    """END-row attention per head summed by role: ``per_prompt`` is ``[pair, head, role]``, ``mean`` its mean over pairs."""

    heads: list[Head]
    roles: tuple[str, ...]
    per_prompt: Float[Tensor, "pair head role"]

    @property
    def mean(self) -> Float[Tensor, "head role"]:
        return self.per_prompt.mean(0)

    def dominant(self) -> dict[str, str]:
        """The role each head attends to most, on average."""
        return {f"{l}.{h}": self.roles[int(self.mean[i].argmax())] for i, (l, h) in enumerate(self.heads)}

    def interval(self, n_boot: int = 1000, level: float = 0.95, seed: int = 0) -> tuple[Tensor, Tensor]:
        """The percentile bootstrap interval over prompts of each head's mean attention to each role: low and high,
        ``[head, role]`` (:func:`~circuits.patching.core.uncertainty.mean_interval`)."""
        return mean_interval(self.per_prompt, n_boot, level, seed)

    def to_json(self, level: float = 0.95) -> dict[str, Any]:
        low, high = self.interval(level=level)
        return {
            "heads": [list(h) for h in self.heads],
            "dominant": self.dominant(),
            "roles": list(self.roles),
            "mean": self.mean.tolist(),
            "std": self.per_prompt.std(0).tolist() if self.per_prompt.shape[0] > 1 else None,
            "n_prompts": int(self.per_prompt.shape[0]),
            "ci_low": low.tolist(), "ci_high": high.tolist(), "ci_level": level,  # over prompts
        }


def role_attention(model: Model, pairs: Sequence[PromptPair], heads: Sequence[Head], batch_size: int = 32) -> RoleAttention:
    """Each head's END-row attention summed over the positions of each role, for every prompt."""
    heads = [Head(*h) for h in heads]
    att = end_attention(model, pairs, heads, batch_size)
    per = torch.zeros(len(pairs), len(heads), len(ROLE_NAMES))
    for i, p in enumerate(pairs):
        m = role_masks(p)  # [role, pos]
        per[i] = att[i, :, : m.shape[1]] @ m.T
    return RoleAttention(heads, ROLE_NAMES, per)


class AttentionPage(str):
    """The HTML of :func:`attention_html`: a ``str`` (write it, search it) that a notebook displays as the views
    themselves, not as megabytes of text."""

    def __repr__(self) -> str:
        return f"<AttentionPage: {self.count('CircuitsVis.render(')} circuitsvis views, {len(self) / 1e6:.1f} MB of HTML>"

    def _repr_html_(self) -> str:
        return notebook_html(self)


def notebook_html(page: str) -> str:
    """A page of circuitsvis views as one notebook cell's HTML: an ``<iframe srcdoc>``, so the bundle and the views'
    element ids stay apart from the notebook's and from other cells'."""
    n = max(1, page.count("CircuitsVis.render("))
    return (f"<iframe srcdoc=\"{html.escape(page, quote=True)}\" style='width:100%;height:{min(3200, 100 + 1000 * n)}px;"
            f"border:1px solid #ddd' sandbox='allow-scripts'></iframe>")


def shared_page(page: str, path: Path) -> str:
    """``page`` with an inlined circuitsvis bundle replaced by the shared copy beside the results (relative path)."""
    from circuits.viz.page import circuitsvis_bundle, script_tag

    inlined = f"<script type='text/javascript'>{circuitsvis_bundle()}</script>"
    return page.replace(inlined, script_tag("circuitsvis", path)) if inlined in page else page


def inlined_page(page: str) -> AttentionPage:
    """``page`` as :func:`attention_html` returned it: a shared circuitsvis copy's ``<script src>`` (what
    :func:`shared_page` wrote) put back inline, so a loaded result shows in a notebook and equals the one saved."""
    import re

    from circuits.viz.page import circuitsvis_bundle

    tag = re.compile(r"<script type='text/javascript' src='[^']*circuitsvis-[^'/]*\.js'></script>")
    inlined = f"<script type='text/javascript'>{circuitsvis_bundle()}</script>"
    return AttentionPage(tag.sub(lambda _: inlined, page))


def visible_tokens(tokens: Sequence[str]) -> list[str]:
    """Tokens as labels: spaces as '␣', newlines as '↵', tabs as '⇥', so a space-only token is not a blank label."""
    return [str(t).replace(" ", "␣").replace("\n", "↵").replace("\t", "⇥") for t in tokens]


@torch.no_grad()
def attention_html(
    model: Model,
    prompts: Sequence[str | PromptPair],
    heads: Sequence[Head],
    path: str | Path | None = None,
    title: str = "Attention of the heads given",
    last_tokens: int | None = None,
    *,
    inline: bool | None = None,
) -> AttentionPage:
    """A standalone HTML page: one circuitsvis ``attention_heads`` view per prompt for ``heads``
    (Figures 7, 16), with the circuitsvis bundle loaded once for all of them. Written to ``path``, the bundle is the
    shared copy in ``_assets/`` beside the results (:func:`circuits.viz.page.script_tag`; ``inline=True`` embeds
    it); returned without ``path``, it is inlined so the page opens offline on its own.

    ``last_tokens`` crops each view to the last positions (e.g. drop a long few-shot prefix); a cropped view's
    tokens keep their position in the prompt (``27:␣+``), so they match the roles. Spaces show as '␣' and newlines as
    '↵'; each prompt's header keeps its newlines.
    """
    from circuits.viz.colours import ATTENTION_KEY
    from circuits.viz.page import CSS, Page, script_tag

    heads = [Head(*h) for h in heads]
    page = Page(title)
    parts = [f"<h1>{html.escape(title)}</h1>", ATTENTION_KEY]
    names = [f"L{l}H{h}" for l, h in heads]
    layers = sorted({l for l, _ in heads})
    filt = {get_act_name("pattern", l) for l in layers}
    for prompt in prompts:
        if isinstance(prompt, PromptPair):
            tokens = torch.tensor([prompt.reference_token_ids], device=model.cfg.device)
            text = prompt.reference
        else:
            tokens = model.to_tokens(prompt, prepend_bos=False)  # as pairs are tokenised (a Bridge prepends BOS by default)
            text = prompt
        _, cache = model.run_with_cache(tokens, names_filter=lambda n: n in filt, stop_at_layer=max(layers) + 1)
        pat = torch.stack([cache[get_act_name("pattern", l)][0, h] for l, h in heads]).float().cpu()
        strs = visible_tokens(model.to_str_tokens(tokens[0]))
        if last_tokens and last_tokens < len(strs):
            start = len(strs) - last_tokens
            pat = pat[:, start:, start:]
            strs = [f"{start + i}:{t}" for i, t in enumerate(strs[start:])]
        parts.append(f"<h3 class='prompt'>{html.escape(text[-300:])}</h3>")
        parts.append(page.view("AttentionHeads", {"attention": pat.tolist(), "tokens": list(strs),
                                                  "attentionHeadNames": names}))
    inline = path is None if inline is None else inline
    js = script_tag("circuitsvis", path, inline=inline)
    out = AttentionPage("<!DOCTYPE html><html><head><meta charset='utf-8'><title>{}</title><style>{}</style>{}</head>"
                        "<body>{}</body></html>".format(html.escape(title), CSS, js, "\n".join(parts)))
    if path is not None:
        write_text(path, out)
    return out


def attention_roles(model: Model, pairs: Sequence[PromptPair], heads: Sequence[Head], *,
                    config: RolesConfig | None = None, batch_size: int = 32) -> AttentionRoles:
    """Figure 5: where each head looks from END, by token role, averaged over the prompts of each operation
    (pairs are grouped by their ``operation``). Pairs without roles (:func:`has_roles`) are left out and counted
    (``n_without_roles``); an operation none of whose pairs has roles is saved as ``no_roles_given`` (no means), so
    the figure and the command line say so instead of showing 100% "other"."""
    by_op: dict[str, list[PromptPair]] = {}
    for p in pairs:
        by_op.setdefault(p.operation, []).append(p)
    heads = [Head(*h) for h in heads]
    out: dict[str, dict[str, Any]] = {}
    for op, ps in by_op.items():
        marked = [p for p in ps if has_roles(p)]
        if marked:
            out[op] = role_attention(model, marked, heads, batch_size).to_json()
        else:
            out[op] = {"heads": [list(h) for h in heads], "roles": list(ROLE_NAMES), "n_prompts": 0,
                       "no_roles_given": True}
        out[op]["n_without_roles"] = len(ps) - len(marked)
    return AttentionRoles(config if config is not None else RolesConfig(), heads, out)


@dataclass(eq=False, repr=False)
class AttentionRoles(ShowsFigure, Result[RolesConfig]):
    """Figure 5: each key head's END-row attention by token role, per operation (means over prompts)."""

    kind = "attention"

    heads: list[Head]
    by_operation: dict[str, dict[str, Any]]  # operation -> RoleAttention.to_json()

    def figure(self):
        from circuits.viz.figures import roles_panels

        return roles_panels(self.by_operation)

    def _write(self, folder: Path) -> None:
        write_json(folder / "data.json", {"heads": [list(h) for h in self.heads], "by_operation": self.by_operation})

    @classmethod
    def _read(cls, folder: Path, config: RolesConfig) -> AttentionRoles:
        d = read_json(folder / "data.json")
        return cls(config, [Head(*h) for h in d["heads"]], d["by_operation"])


@dataclass(eq=False, repr=False)
class AttentionViews(Result[ViewsConfig]):
    """Figures 7 and 16: circuitsvis views of an identify run's top heads (its key rule's first) on a few prompts, as
    one offline page."""

    kind = "attention-views"

    heads: list[Head]
    prompts: list[str]
    page: str  # the HTML of :func:`attention_html`

    def _repr_html_(self) -> str:
        """In a notebook: the views themselves (the page in an iframe)."""
        return notebook_html(self.page)

    def _write(self, folder: Path) -> None:
        write_json(folder / "data.json", {"heads": [list(h) for h in self.heads], "prompts": self.prompts})
        write_text(folder / "figure.html", shared_page(self.page, folder / "figure.html"))

    @classmethod
    def _read(cls, folder: Path, config: ViewsConfig) -> AttentionViews:
        d = read_json(folder / "data.json")
        return cls(config, [Head(*h) for h in d["heads"]], d["prompts"], inlined_page(read_text(folder / "figure.html")))
