"""Figures 7 and 16: circuitsvis attention views of the key heads on a few prompts, as a standalone
offline page. Run: ``python experiments/fig7_attention_views.py``; ``--replot`` just names the page."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import _common as C

from circuits.config import option
from circuits.data.templates import OPERATIONS
from circuits.explain import AttentionViews, attention_html
from circuits.explain.attention import ViewsConfig


@dataclass(frozen=True)
class Config(C.KeyHeadConfig, ViewsConfig):
    n_key_heads: int = option(4)
    operations: tuple[str, ...] = option(OPERATIONS)
    prompts_per_operation: int = option(2)
    last_tokens: int = option(14, help="crop the few-shot prefix from the views")
    out: str = option("results/fig7_attention_views")


def main(config: Config, model=None) -> AttentionViews:
    model = model or C.model_for(config.model, config.dtype)
    heads = C.identify_result(config, model=model).top_heads(config.n_key_heads)
    prompts = [p for op in config.operations for p in C.pairs_for(config, op, model)[: config.prompts_per_operation]]
    page = attention_html(model, prompts, heads, title="Key heads (Figures 7, 16)", last_tokens=config.last_tokens)
    result = AttentionViews(config, heads, [p.reference for p in prompts], page)
    result.save(config.out)
    return result


def plot(result: AttentionViews, out: Path) -> Path:
    return Path(out) / "figure.html"  # the page is the data; circuitsvis renders it in the browser


if __name__ == "__main__":
    C.run(Config, main, plot)
