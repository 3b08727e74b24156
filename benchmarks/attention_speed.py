"""TransformerLens's attention against the fused path (``circuits.models.attention``) in one run.

Times one forward of SmolLM2 at several lengths both ways, then the 5-shot MMLU scoring of Tables 1-2's CPU
evaluation (the first ``--docs`` questions of the shuffled test set, as ``--eval-limit`` takes them; prompts of
300-2,300 tokens) both ways, checks the log-likelihoods agree, and prints
``speedup_attention=<x> max_abs_diff=<x> same_choices=<bool>`` last (the MMLU ratio).

    python benchmarks/attention_speed.py                 # SmolLM2, lengths 256 1024 2048, 24 MMLU questions
    python benchmarks/attention_speed.py --docs 8 --lengths 512
"""

from __future__ import annotations

import argparse

import _bench  # first: passive OpenMP waiting before torch loads

import torch

from circuits.evaluation.lm_eval import HookedTransformerLM
from circuits.evaluation.tasks import EvalConfig, task_records
from circuits.models import load_model
from circuits.models.attention import fused_attention


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lengths", default="256,1024,2048", help="comma-separated token counts of the forwards")
    parser.add_argument("--docs", type=_bench.count(1, 100_000), default=24,
                        help="MMLU questions scored (Tables 1-2's --eval-limit)")
    parser.add_argument("--data-dir", help="benchmark data folder (default: $CIRCUITS_DATA_DIR or ../shared/data)")
    _bench.add_arguments(parser)
    args = parser.parse_args()
    try:
        lengths = [int(x) for x in args.lengths.split(",")]
    except ValueError:
        parser.error(f"--lengths {args.lengths!r}: accepted: comma-separated token counts, e.g. 256,1024")
    if args.docs < 1 or any(n < 1 for n in lengths):
        parser.error("--docs and --lengths: accepted: counts of 1 or more")
    _bench.setup(args)
    model = load_model(args.model, device="cpu")
    print(_bench.describe())
    print("forward     eager s   fused s   ratio")
    for n in lengths:
        tokens = torch.randint(100, 1000, (1, n), generator=torch.Generator().manual_seed(n))
        seconds, logits = {}, {}
        for on in (False, True):
            fused_attention(model, on)
            with torch.no_grad():
                t = _bench.measure(lambda: model(tokens)[0, -1])
            seconds[on], logits[on] = t.seconds, t.value
        print(f"{n:>7} {seconds[False]:9.2f} {seconds[True]:9.2f} {seconds[False] / seconds[True]:7.2f}x"
              f"   max |diff| of last logits {(logits[True] - logits[False]).abs().max().item():.1e}")

    records = task_records("mmlu", EvalConfig(tasks=("mmlu",), data_dir=args.data_dir))[: args.docs]
    requests = _bench.choice_requests(records)
    lm = HookedTransformerLM(model, batch_size=8)
    n_tokens = sum(len(lm.tok_encode(r["prompt"])) for r in records)
    seconds, scores = {}, {}
    for on in (False, True):
        fused_attention(model, on)
        t = _bench.measure(lambda: [lp for lp, _ in lm.loglikelihood(requests)])
        seconds[on], scores[on] = t.seconds, t.value
    fused_attention(model, True)
    diff = max(abs(a - b) for a, b in zip(scores[True], scores[False]))

    def choices(s: list[float]) -> list[int]:
        out, i = [], 0
        for r in records:
            n = len(r["labels"])
            out.append(max(range(n), key=lambda j: s[i + j]))
            i += n
        return out

    same = choices(scores[True]) == choices(scores[False])
    print(f"MMLU 5-shot, {len(records)} questions ({n_tokens} prompt tokens): eager {seconds[False]:.1f} s, "
          f"fused {seconds[True]:.1f} s")
    _bench.finish(args, speedup_attention=seconds[False] / seconds[True], max_abs_diff=diff, same_choices=same)


if __name__ == "__main__":
    main()
