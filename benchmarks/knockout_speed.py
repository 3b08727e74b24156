"""Speed of Figure 3's knockout curve batched across ablation sets (every (k, order) run a row mask in the same
forward passes: :func:`circuits.validate.knockout.knockout_many`) against one knockout run per (k, order)
(:func:`circuits.validate.knockout.knockout`, which already shares each prompt group's few-shot prefix), in one run,
on the same pairs and means; accuracies must agree exactly and answer probabilities to float precision. Also the
batched runs with every set's rows through every layer (``start_at_first_layer=False``) against the default, which
starts each set at the first layer it ablates (issue 44). The last line reads ``curve_seconds=<x>
speedup_knockout=<x> every_layer_seconds=<x> speedup_first_layer=<x> max_abs_prob_diff=<x>``.

    python benchmarks/knockout_speed.py [--identify results/identify/addition] [--ks 0,1,2,3,5,10,20] [--seeds 3]
"""

from __future__ import annotations

import argparse
import functools

import _bench  # first: passive OpenMP waiting before torch loads

import circuits.patching.ablation.executor as executor
from circuits.models import load_model
from circuits.validate.knockout import knockout, knockout_many, random_order, replacement_values


MAX_HEADS = 100_000  # more heads than any model here has; the model's own count is checked once it is loaded


def k_list(text: str) -> list[int]:
    try:
        ks = [int(k) for k in text.split(",")]
    except ValueError:
        ks = [-1]
    if any(not 0 <= k <= MAX_HEADS for k in ks):
        raise argparse.ArgumentTypeError(f"{text!r}: accepted: comma-separated counts of heads from 0 to {MAX_HEADS}, "
                                         "e.g. 0,1,2,5")
    return ks


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--identify", default="results/identify/addition",
                        help="pairs and ranking from this identify result when it exists")
    parser.add_argument("--pairs", type=_bench.count(1, 100_000), default=64)
    parser.add_argument("--ks", type=k_list, default="0,1,2,3,5,10,20")
    parser.add_argument("--seeds", type=_bench.count(1, 1000), default=3, help="random orders beside the effect order")
    _bench.add_arguments(parser)
    args = parser.parse_args()
    _bench.setup(args)
    model = load_model(args.model)
    model.requires_grad_(False)
    L, H = model.cfg.n_layers, model.cfg.n_heads
    if max(args.ks) > L * H:
        parser.error(f"argument --ks: {max(args.ks)}: the model has {L * H} heads")
    pairs, r = _bench.identify_pairs(model, args.identify, args.pairs)
    ranking = [h for h, _ in r.scores(None).ranked(part="heads")] if r is not None else random_order(L, H, 99)
    ks = args.ks
    orders = [ranking] + [random_order(L, H, s) for s in range(args.seeds)]
    sets = [(o[:k], ()) for o in orders for k in ks]
    means = replacement_values(model, pairs)
    print(f"model {args.model}: {len(pairs)} pairs, {len(sets)} ablation sets (k in {ks}, effect order + "
          f"{args.seeds} random orders); {_bench.describe()}")
    fast = _bench.measure(lambda: knockout_many(model, pairs, sets, means=means),
                          warmup=lambda: knockout_many(model, pairs[:2], sets[:2], means=means))
    default = executor.ablated_residuals
    executor.ablated_residuals = functools.partial(default, start_at_first_layer=False)  # the same run, every layer
    try:
        every = _bench.measure(lambda: knockout_many(model, pairs, sets, means=means))
    finally:
        executor.ablated_residuals = default
    plain = _bench.measure(lambda: [knockout(model, pairs, heads, means=means) for heads, _ in sets])
    batched, one_by_one, fast_s, plain_s = fast.value, plain.value, fast.seconds, plain.seconds
    assert [b.accuracy for b in batched] == [o.accuracy for o in one_by_one], "accuracies differ"
    assert [b.accuracy for b in batched] == [e.accuracy for e in every.value], "accuracies differ (every layer)"
    diff = max(abs(b.answer_prob - o.answer_prob) for other in (one_by_one, every.value) for b, o in zip(batched, other))
    print(f"one knockout run per set: {plain_s:6.1f} s; batched across sets: {fast_s:6.1f} s (every set through every "
          f"layer: {every.seconds:6.1f} s)")
    _bench.finish(args, curve_seconds=fast_s, speedup_knockout=plain_s / fast_s, every_layer_seconds=every.seconds,
                  speedup_first_layer=every.seconds / fast_s, max_abs_prob_diff=diff)


if __name__ == "__main__":
    main()
