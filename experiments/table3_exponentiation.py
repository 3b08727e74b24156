"""Table 3 (Appendix D): key heads on the exponentiation templates and the knockout accuracy per template,
against as many random heads. Run: ``python experiments/table3_exponentiation.py``; ``--replot`` redraws."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import _common as C

from circuits.config import count, option, redefault
from circuits.validate import TransferResult, compute_means, knockout_many, random_order
from circuits.validate.transfer import TransferConfig
from circuits.viz.figures import knockout_table_figure, write_figure


@dataclass(frozen=True)
class Config(C.KeyHeadConfig, TransferConfig):
    task: str = redefault(C.KeyHeadConfig, "task", "exponentiation")
    n_pairs: int = redefault(C.KeyHeadConfig, "n_pairs", 24)
    n_key_heads: int = count(5, help="the paper's Table 3 lists five")
    random_seeds: tuple[int, ...] = option((0, 1, 2), minimum=0, nonempty=True, unique=True)
    out: str = option("results/table3_exponentiation")


def main(config: Config, model=None) -> TransferResult:
    t = C.Timer()
    model = model or C.model_for(config.model, config.dtype)
    r = C.identify_result(config, model=model)
    heads = r.top_heads(config.n_key_heads)
    means = compute_means(model, r.pairs)
    rows, examples = {}, {}
    for tid in sorted({p.template_id for p in r.pairs}):
        pairs = [p for p in r.pairs if p.template_id == tid]
        randoms = [random_order(model.cfg.n_layers, model.cfg.n_heads, s)[: config.n_key_heads]
                   for s in config.random_seeds]
        # No heads, the key heads and each random set: one batched knockout (knockout_many).
        before, after, *rnd_scores = knockout_many(model, pairs, [([], []), (heads, [])] + [(h, []) for h in randoms],
                                                   means=means)
        rnd = [s.accuracy for s in rnd_scores]
        rows[tid] = {"n": len(pairs), "accuracy_before": before.accuracy, "accuracy_after": after.accuracy,
                     "accuracy_random_heads": sum(rnd) / len(rnd),
                     "relative_drop": (after.accuracy - before.accuracy) / before.accuracy if before.accuracy else None}
        examples[tid] = pairs[0].reference.splitlines()[-1]
    t("knockout")
    result = TransferResult(config, rows, heads, [], examples)
    result.save(config.out)
    return result


def plot(result: TransferResult, out: Path) -> Path:
    return write_figure(knockout_table_figure(result.results, result.examples, result.key_heads, "Exponentiation (Table 3)"),
                        Path(out) / "figure.html")


if __name__ == "__main__":
    C.run(Config, main, plot)
