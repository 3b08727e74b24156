"""Figure 4 and the MMLU check: knock out the key heads found on the addition templates and measure
next-token accuracy on SVAMP, multi-digit sums, decimals and time spans, and MMLU (humanities)
letter accuracy, before and after; k random heads as a control.
Run: ``python experiments/fig4_transfer.py [--n 48 --n-mmlu 40]``; ``--replot`` redraws."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import _common as C
import _tables as T

from circuits.config import option
from circuits.data.benchmarks import load_svamp_all, sample_mmlu
from circuits.validate import TransferResult, compute_means, random_order, transfer_knockout
from circuits.validate.transfer import TransferConfig, mmlu_accuracy, mmlu_items, synthetic_set, word_problem_set
from circuits.viz.figures import write_figure


@dataclass(frozen=True)
class Config(C.KeyHeadConfig, TransferConfig):
    n_key_heads: int = option(10)
    n: int = option(32, help="prompts per transfer set")
    n_mmlu: int = option(32)
    svamp_shots: int = option(2)
    random_seed: int = option(0)
    data_dir: str | None = option(None, help="benchmark data folder (default: $CIRCUITS_DATA_DIR or ../shared/data)")
    out: str = option("results/fig4_transfer")


def main(config: Config, model=None) -> TransferResult:
    t = C.Timer()
    model = model or C.model_for(config.model, config.dtype)
    r = C.identify_result(config, model=model)
    heads = r.top_heads(config.n_key_heads)
    control = random_order(model.cfg.n_layers, model.cfg.n_heads, config.random_seed)[: config.n_key_heads]
    means = compute_means(model, r.pairs, pooled=True)
    t("means")
    tok = model.tokenizer
    sets = {"svamp": word_problem_set(tok, load_svamp_all(config.data_dir), config.n, shots=config.svamp_shots, seed=config.seed)}
    for task in ("multi_digit", "decimal", "time_span"):
        sets[task] = synthetic_set(tok, task, config.n, seed=config.seed)
    res = transfer_knockout(model, sets, means, heads)
    ctrl = transfer_knockout(model, sets, means, control)
    for k in res:
        res[k]["accuracy_random_heads"] = ctrl[k]["accuracy_after"]
    t("transfer")
    mm = mmlu_items(tok, sample_mmlu(n=config.n_mmlu, seed=config.seed, data_dir=config.data_dir))
    res["mmlu_humanities"] = {"n": len(mm), "accuracy_before": mmlu_accuracy(model, mm, means),
                              "accuracy_after": mmlu_accuracy(model, mm, means, heads),
                              "accuracy_random_heads": mmlu_accuracy(model, mm, means, control)}
    t("mmlu")
    result = TransferResult(config, res, heads, control, {k: v[0].reference[-120:] for k, v in sets.items() if v})
    result.save(config.out)
    return result


def published(result: TransferResult) -> dict:
    """The table of docs/results.md this result gives (experiments/_tables.py renders it; publish.py copies it)."""
    keys = ("n", "accuracy_before", "accuracy_after", "accuracy_random_heads")
    return {"fig4_transfer": {"render": "fig4_transfer", "data": {
        "key_heads": [list(h) for h in result.key_heads], "n_random_heads": len(result.random_heads),
        "results": {k: {f: v[f] for f in keys if f in v} for k, v in result.results.items()}}}}


def plot(result: TransferResult, out: Path) -> Path:
    T.write_published(out, published(result))
    return write_figure(result.figure(), Path(out) / "figure.html")


if __name__ == "__main__":
    C.run(Config, main, plot)
