"""Multiple-choice scoring with the few-shot prefix run once per group versus once per question.

MMLU prompts of one subject share their header and 5 dev examples (about 85% of each prompt's tokens), and
every CommonsenseQA prompt shares its 5 train examples. The lm-eval adapter
(:class:`circuits.lm_eval_adapter.HookedTransformerLM`) runs such a prefix once into a key/value cache and
only each question after it. This benchmark scores the same requests both ways in one run, checks the
log-likelihoods agree, and prints ``speedup=<x> max_abs_diff=<x>`` last.

The default sample is what a full run looks like (many questions per subject); a small ``--limit`` drawn
across all 57 subjects shares little, so there the two ways cost about the same.

    python benchmarks/eval_speed.py                       # SmolLM2, 3 MMLU subjects x 8 questions + 16 CSQA
    python benchmarks/eval_speed.py --subjects 57 --per-subject 1   # a spread-out sample: little to share
"""

from __future__ import annotations

import argparse
import random
from collections import defaultdict

import _bench  # first: passive OpenMP waiting before torch loads

from circuits.evaluation.lm_eval import HookedTransformerLM
from circuits.evaluation.tasks import EvalConfig, _csqa_records, _mmlu_records
from circuits.models import load_model


def sample_records(args: argparse.Namespace) -> list[dict]:
    config = EvalConfig(data_dir=args.data_dir)
    by_subject: dict[str, list[dict]] = defaultdict(list)
    for r in _mmlu_records(config):
        by_subject[r["subject"]].append(r)
    rng = random.Random(args.seed)
    subjects = rng.sample(sorted(by_subject), args.subjects)
    records = [r for s in subjects for r in rng.sample(by_subject[s], min(args.per_subject, len(by_subject[s])))]
    return records + rng.sample(_csqa_records(config), args.csqa)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--subjects", type=_bench.count(1, 57), default=3)
    p.add_argument("--per-subject", type=_bench.count(1, 100_000), default=8)
    p.add_argument("--csqa", type=_bench.count(1, 100_000), default=16)
    p.add_argument("--batch-size", type=_bench.count(1, 100_000), default=8)
    p.add_argument("--seed", type=_bench.count(0, 2**31 - 1), default=0)
    p.add_argument("--data-dir")
    _bench.add_arguments(p, threads=1)
    args = p.parse_args()
    _bench.setup(args)

    model = load_model(args.model)
    records = sample_records(args)
    reqs = _bench.choice_requests(records)
    shared = HookedTransformerLM(model, batch_size=args.batch_size)
    plain = HookedTransformerLM(model, batch_size=args.batch_size, min_shared_prefix=None)
    n_tokens = sum(len(shared.tok_encode(r["prompt"])) for r in records)
    print(f"model {args.model}: {len(records)} questions ({args.subjects} MMLU subjects x {args.per_subject}, "
          f"{args.csqa} CSQA), {len(reqs)} requests, {n_tokens} prompt tokens; {_bench.describe()}")

    warmup = lambda: shared.loglikelihood(reqs[:4])  # noqa: E731
    times = {name: _bench.measure(lambda lm=lm: lm.loglikelihood(reqs), warmup=warmup if name == "plain" else None)
             for name, lm in (("plain", plain), ("shared", shared))}
    for name, t in times.items():
        print(f"{name:>7}: {t.seconds:7.1f} s")
    scores = {name: t.value for name, t in times.items()}
    diff = max(abs(a[0] - b[0]) for a, b in zip(scores["plain"], scores["shared"]))
    same_greedy = all(a[1] == b[1] for a, b in zip(scores["plain"], scores["shared"]))
    print(f"greedy flags identical: {same_greedy}")
    _bench.finish(args, speedup=times["plain"].seconds / times["shared"].seconds, max_abs_diff=diff)


if __name__ == "__main__":
    main()
