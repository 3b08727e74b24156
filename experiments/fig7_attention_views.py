"""Figures 7 and 16: circuitsvis attention views of the key heads on a few prompts, as a standalone
offline page. Run: ``python experiments/fig7_attention_views.py``; ``--replot`` just lists the page."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import _common as C

from circuits.attention import attention_html
from circuits.prompts import PairConfig, build_pairs


@dataclass(frozen=True)
class Config(C.KeyHeadConfig):
    n_key_heads: int = 4
    operations: tuple = ("addition", "subtraction", "multiplication", "division")
    last_tokens: int = 14  # crop the few-shot prefix from the views
    out: str = "results/fig7_attention_views"


def main(config: Config) -> Path:
    model, ps, eff, heads = C.key_heads_for(config, top=config.n_key_heads)
    prompts = []
    for op in config.operations:
        prompts += build_pairs(model, PairConfig(task=op, n_pairs=2, seed=config.seed)).pairs[:2]
    page = attention_html(model, prompts, heads, title="Key heads (Figures 7, 16)", last_tokens=config.last_tokens)
    C.save(config.out, config, {"heads": [list(h) for h in heads], "prompts": [p.reference for p in prompts]},
           files={"figure.html": page})
    return plot(config.out)


def plot(out) -> Path:
    return Path(out) / "figure.html"  # the page is the data; circuitsvis renders it in the browser


if __name__ == "__main__":
    C.run(Config, main, plot)
