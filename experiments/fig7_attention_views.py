"""Figures 7 and 16: circuitsvis attention views of the key heads on a few prompts, as a standalone
offline page. Run: ``python experiments/fig7_attention_views.py``; ``--replot`` just names the page.
The same job as ``circuits attention-views`` (:mod:`circuits.explain.job`)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import _common as C

from circuits.config import count, option
from circuits.data.templates import OPERATIONS
from circuits.explain.attention import AttentionViews
from circuits.explain.job import views_result
from circuits.explain.config import ViewsConfig


@dataclass(frozen=True)
class Config(C.KeyHeadConfig, ViewsConfig):
    n_key_heads: int = count(4)
    operations: tuple[str, ...] = option(OPERATIONS)
    prompts_per_operation: int = count(2)
    last_tokens: int = count(14, help="crop the few-shot prefix from the views")
    out: str = option("results/fig7_attention_views")


def main(config: Config, model=None) -> AttentionViews:
    model = model or C.model_for(config.model, config.dtype)
    made = C.identify_result(config, model=model)
    result = views_result(model, made, config, lambda op: C.pairs_for(config, op, model))  # `circuits attention-views`
    result.save(config.out)
    return result


def plot(result: AttentionViews, out: Path) -> Path:
    return Path(out) / "figure.html"  # the page is the data; circuitsvis renders it in the browser


if __name__ == "__main__":
    C.run(Config, main, plot)
