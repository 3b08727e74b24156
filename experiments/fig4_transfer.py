"""Figure 4 and the MMLU check: knock out the key heads found on the addition templates and measure
next-token accuracy on SVAMP, multi-digit sums, decimals and time spans, and MMLU (humanities)
letter accuracy, before and after; k random heads as a control.
Run: ``python experiments/fig4_transfer.py [--n 48 --n-mmlu 40]``; ``--replot`` redraws."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import _common as C

from circuits.ablation import compute_means, random_order
from circuits.figures import before_after_figure, write_figure
from circuits.transfer import mmlu_accuracy, mmlu_items, synthetic_set, transfer_knockout, word_problem_set
from circuits.transfer_data import read_mmlu, read_svamp


@dataclass(frozen=True)
class Config(C.KeyHeadConfig):
    n_key_heads: int = 10
    n: int = 32  # prompts per transfer set
    n_mmlu: int = 32
    svamp_shots: int = 2
    random_seed: int = 0
    data_dir: str = ""
    out: str = "results/fig4_transfer"


def main(config: Config) -> Path:
    t = C.Timer()
    model, ps, eff, heads = C.key_heads_for(config, top=config.n_key_heads)
    control = random_order(model.cfg.n_layers, model.cfg.n_heads, config.random_seed)[: config.n_key_heads]
    means = compute_means(model, ps.pairs, pooled=True)
    t("means")
    tok = model.tokenizer
    sets = {"svamp": word_problem_set(tok, read_svamp(config.data_dir or None), config.n, shots=config.svamp_shots, seed=config.seed)}
    for task in ("multi_digit", "decimal", "time_span"):
        sets[task] = synthetic_set(tok, task, config.n, seed=config.seed)
    res = transfer_knockout(model, sets, means, heads)
    ctrl = transfer_knockout(model, sets, means, control)
    for k in res:
        res[k]["accuracy_random_heads"] = ctrl[k]["accuracy_after"]
    t("transfer")
    mm = mmlu_items(tok, read_mmlu(n=config.n_mmlu, seed=config.seed, path=config.data_dir or None))
    res["mmlu_humanities"] = {"n": len(mm), "accuracy_before": mmlu_accuracy(model, mm, means),
                              "accuracy_after": mmlu_accuracy(model, mm, means, heads),
                              "accuracy_random_heads": mmlu_accuracy(model, mm, means, control)}
    t("mmlu")
    examples = {k: v[0].reference[-120:] for k, v in sets.items()}
    C.save(config.out, config, {"results": res, "key_heads": [list(h) for h in heads],
                                "random_heads": [list(h) for h in control], "examples": examples})
    return plot(config.out)


def plot(out) -> Path:
    d = C.load(out)["results"]
    names = list(d)
    fig = before_after_figure(names, [d[k]["accuracy_before"] for k in names], [d[k]["accuracy_after"] for k in names],
                              "Transfer of the key-head knockout (Figure 4, MMLU)",
                              control=[d[k]["accuracy_random_heads"] for k in names])
    return write_figure(fig, Path(out) / "figure.html")


if __name__ == "__main__":
    C.run(Config, main, plot)
