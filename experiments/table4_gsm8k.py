"""Table 4 (Appendix E): key heads found on word problems (GSM8K by default) with counterfactuals
that rewrite the asking phrase (:mod:`circuits.word_problems`), their overlap with the template key
heads, and the knockout accuracy. A 135M model answers few GSM8K questions; when fewer than
``min_correct`` are right, the same procedure also runs on ``fallback`` (AddSub by default).
Run: ``python experiments/table4_gsm8k.py [--dataset gsm8k --n 48]``; ``--replot`` redraws."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import _common as C
import plotly.graph_objects as go

from circuits.ablation import compute_means, knockout
from circuits.figures import write_figure
from circuits.models import load_model
from circuits.prompts import PairConfig, build_pairs
from circuits.transfer_data import read_word_problems
from circuits.word_problems import solved_prefix, word_problem_pairs


@dataclass(frozen=True)
class Config:
    model: str = "smollm2"
    dataset: str = "gsm8k"
    fallback: str = "addsub"
    n: int = 48  # questions evaluated (after the rewrite)
    shots: int = 1
    min_correct: int = 8
    top: int = 10
    template_task: str = "addition"
    template_pairs: int = 32
    seed: int = 0
    data_dir: str = ""
    out: str = "results/table4_gsm8k"


def run_dataset(model, config: Config, name: str, template_heads: list, t) -> dict:
    import random

    problems = read_word_problems(name, config.data_dir or None)
    random.Random(config.seed).shuffle(problems)
    prefix = solved_prefix(problems[: config.shots])
    pairs, reasons = word_problem_pairs(model.tokenizer, problems[config.shots : config.shots + config.n * 2], prefix)
    pairs = pairs[: config.n]
    means = compute_means(model, pairs, pooled=True)  # questions do not align, so one mean per head
    base = knockout(model, pairs, means, [])
    correct = [p for p, ok in zip(pairs, base.correct) if ok]
    t(f"{name}: {len(correct)}/{len(pairs)} correct (first answer token)")
    out = {"n_questions": len(pairs), "skipped": dict(reasons), "accuracy": base.accuracy, "n_correct": len(correct),
           "example": {"reference": pairs[0].reference[len(prefix):], "counterfactual": pairs[0].counterfactual[len(prefix):]}}
    if len(correct) < 2:
        return out
    eff = C.head_effects(model, config.model, name, correct, config.seed, tag=f"-wp{config.shots}")
    heads = C.key_heads(eff, top=config.top)
    shared = [h for h in heads if h in set(template_heads)]
    only = [h for h in heads if h not in set(template_heads)]
    def acc(hs):
        return knockout(model, pairs, means, hs).accuracy if hs else base.accuracy
    out.update({
        "key_heads": [[l, h, eff["head_effects"][l][h]] for l, h in heads],
        "shared_with_templates": [list(h) for h in shared],
        "accuracy_knockout_own": acc(heads),
        "accuracy_knockout_template_heads": acc(template_heads),
        "accuracy_knockout_shared": acc(shared),
        "accuracy_knockout_own_only": acc(only),
    })
    t(f"{name}: knockout")
    return out


def main(config: Config) -> Path:
    t = C.Timer()
    model = load_model(config.model)
    fig2 = Path("results/fig2_key_heads/data.json")
    if fig2.exists() and json.loads(fig2.read_text()).get("task") == config.template_task:
        eff = json.loads(fig2.read_text())
    else:
        ps = build_pairs(model, PairConfig(task=config.template_task, n_pairs=config.template_pairs, seed=config.seed))
        eff = C.head_effects(model, config.model, config.template_task, ps.pairs, config.seed)
    template_heads = C.key_heads(eff, top=config.top)
    data = {"template_heads": [list(h) for h in template_heads], "datasets": {}}
    data["datasets"][config.dataset] = run_dataset(model, config, config.dataset, template_heads, t)
    if data["datasets"][config.dataset]["n_correct"] < config.min_correct and config.fallback:
        data["datasets"][config.fallback] = run_dataset(model, config, config.fallback, template_heads, t)
    C.save(config.out, config, data)
    return plot(config.out)


def plot(out) -> Path:
    d = C.load(out)
    cols = ["dataset", "answered", "top key heads", "shared with templates", "acc.", "KO own", "KO template", "KO shared", "KO own-only"]
    cells = [[] for _ in cols]
    for name, r in d["datasets"].items():
        vals = [name, f"{r['n_correct']}/{r['n_questions']}",
                ", ".join(f"({l},{h})" for l, h, _ in r.get("key_heads", [])), str(len(r.get("shared_with_templates", []))),
                f"{r['accuracy']:.2f}"] + [f"{r[k]:.2f}" if k in r else "-" for k in
                ("accuracy_knockout_own", "accuracy_knockout_template_heads", "accuracy_knockout_shared", "accuracy_knockout_own_only")]
        for c, v in zip(cells, vals):
            c.append(v)
    fig = go.Figure(go.Table(header={"values": cols}, cells={"values": cells}))
    fig.update_layout(title="Word-problem key heads and knockout (Table 4)")
    return write_figure(fig, Path(out) / "figure.html")


if __name__ == "__main__":
    C.run(Config, main, plot)
