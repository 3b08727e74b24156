"""Table 4 (Appendix E): key heads found on word problems (GSM8K by default) with counterfactuals
that rewrite the asking phrase (:mod:`circuits.data.word_problems`), their overlap with the template key
heads, and the knockout accuracy. A 135M model answers few GSM8K questions; when fewer than
``min_correct`` are right, the same procedure also runs on ``fallback`` (AddSub by default).
Run: ``python experiments/table4_gsm8k.py [--dataset gsm8k --n 48]``; ``--replot`` redraws."""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

import _common as C
import _tables as T

from circuits.config import count, option
from circuits.data.benchmarks import load_word_problems
from circuits.data.word_problems import solved_prefix, word_problem_pairs
from circuits.identify import IdentifyConfig, identify
from circuits.types import Head
from circuits.validate import compute_means, knockout
from circuits.validate.transfer import WordProblemConfig, WordProblemHeads
from circuits.viz.figures import word_problem_table_figure, write_figure


@dataclass(frozen=True)
class Config(C.KeyHeadConfig, WordProblemConfig):
    dataset: str = option("gsm8k")
    fallback: str = option("addsub")
    n: int = count(48, help="questions evaluated (after the rewrite)")
    shots: int = count(1, minimum=0, maximum=8, help="solved examples before each question (0: none)")
    min_correct: int = count(8, minimum=0, help="least questions answered correctly for the result to be read (0: no floor)")
    top: int = count(10)
    data_dir: str | None = option(None, help="benchmark data folder (default: $CIRCUITS_DATA_DIR or ../shared/data)")
    out: str = option("results/table4_gsm8k")


def run_dataset(model, config: Config, name: str, template_heads: list[Head], t) -> dict:
    problems = load_word_problems(name, config.data_dir)
    random.Random(config.seed).shuffle(problems)
    prefix = solved_prefix(problems[: config.shots])
    pairs, reasons = word_problem_pairs(model.tokenizer, problems[config.shots : config.shots + config.n * 2], prefix)
    pairs = pairs[: config.n]
    means = compute_means(model, pairs, pooled=True)  # questions do not align, so one mean per head
    base = knockout(model, pairs, [], means=means)
    correct = [p for p, ok in zip(pairs, base.correct) if ok]
    t(f"{name}: {len(correct)}/{len(pairs)} correct (first answer token)")
    out = {"n_questions": len(pairs), "skipped": dict(reasons), "accuracy": base.accuracy, "n_correct": len(correct),
           "example": {"reference": pairs[0].reference[len(prefix):], "counterfactual": pairs[0].counterfactual[len(prefix):]}}
    if len(correct) < 2:
        return out
    r = identify(model, correct, IdentifyConfig(model=config.model, n_pairs=len(correct), seed=config.seed,
                                               key_rule=f"top{config.top}:relative_logit", force=config.force),
                 progress=False)  # refused as the job refuses (identify's checks) unless --force
    heads = [h for h, _ in r.key_heads()]
    shared = [h for h in heads if h in set(template_heads)]
    only = [h for h in heads if h not in set(template_heads)]

    def acc(hs: list[Head]) -> float:
        return knockout(model, pairs, hs, means=means).accuracy if hs else base.accuracy

    out.update({
        "key_heads": [[h.layer, h.head, e] for h, e in r.key_heads()],
        "shared_with_templates": [list(h) for h in shared],
        "accuracy_knockout_own": acc(heads),
        "accuracy_knockout_template_heads": acc(template_heads),
        "accuracy_knockout_shared": acc(shared),
        "accuracy_knockout_own_only": acc(only),
    })
    t(f"{name}: knockout")
    return out


def main(config: Config, model=None) -> WordProblemHeads:
    t = C.Timer()
    model = model or C.model_for(config.model, config.dtype)
    template_heads = C.identify_result(config, model=model).top_heads(config.top)
    datasets = {config.dataset: run_dataset(model, config, config.dataset, template_heads, t)}
    if datasets[config.dataset]["n_correct"] < config.min_correct and config.fallback:
        datasets[config.fallback] = run_dataset(model, config, config.fallback, template_heads, t)
    result = WordProblemHeads(config, template_heads, datasets)
    result.save(config.out)
    return result


def published(result: WordProblemHeads) -> dict:
    """The table of docs/results.md this result gives, from its first dataset with key heads (experiments/_tables.py
    renders it; publish.py copies it)."""
    cfg = result.config  # a Config after main, its saved fields when read back
    model = cfg.get("model") if isinstance(cfg, dict) else getattr(cfg, "model", "")
    name, d = next(((n, d) for n, d in result.datasets.items() if "key_heads" in d), (None, None))
    if d is None:  # too few correct answers to rank heads: nothing to publish
        return {}
    keys = ("n_questions", "n_correct", "accuracy", "shared_with_templates", "accuracy_knockout_own",
            "accuracy_knockout_template_heads")
    return {"table4_gsm8k": {"render": "table4_gsm8k", "data": {
        "dataset": name, "model": model, "key_heads": [h[:2] for h in d["key_heads"]], **{k: d[k] for k in keys}}}}


def plot(result: WordProblemHeads, out: Path) -> Path:
    T.write_published(out, published(result))
    return write_figure(word_problem_table_figure(result.datasets), Path(out) / "figure.html")


if __name__ == "__main__":
    C.run(Config, main, plot)
