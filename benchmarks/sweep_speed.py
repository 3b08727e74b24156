"""Speed of the END-only patching engine against the plain TransformerLens loop, in one run.

On SmolLM2 (30 layers x 9 heads = 270 heads + 30 MLPs) with 32 addition pairs, for path and
activation patching: the plain loop (one ``run_with_hooks`` per component; for path patching its
hooks also freeze every other head's ``hook_z`` at the reference value) is timed on a fixed sample of
components and extrapolated to all 300; the engine is timed on all 300 at once. The engine's
results are compared with the plain loop's on the sample. The plain loop runs twice: on the model with its weights
as TransformerLens's ``from_pretrained`` leaves them (contiguous: the peer as its users have it; ``speedup_*``) and
on circuits' own layout (matrices stored as TransformerLens's forward reads them, cheaper for every forward:
``same_layout_*``). The last line reads
``speedup_path=<x> speedup_activation=<x> max_abs_diff=<x> same_layout_path=<x> same_layout_activation=<x>``.

    python benchmarks/sweep_speed.py [--pairs 32] [--sample 15] [--model smollm2]
"""

from __future__ import annotations

import argparse
import copy

import _bench  # first: passive OpenMP waiting before torch loads

from circuits.data.pairs import as_batch, build_pairs
from circuits.models import load_model
from circuits.models.loading import store_contiguous
from circuits.patching import all_components, sweep
from circuits.patching.reference import cache_runs, patch_component_plain


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pairs", type=int, default=32)
    parser.add_argument("--sample", type=int, default=15, help="components timed with the plain loop")
    parser.add_argument("--seed", type=int, default=0)
    _bench.add_arguments(parser)
    args = parser.parse_args()
    _bench.setup(args)

    model = load_model(args.model)
    pairs = build_pairs(model, "addition", n_pairs=args.pairs, seed=args.seed).pairs
    batch = as_batch(pairs, model)
    comps = all_components(model)
    sample = _bench.sample_components(model.cfg.n_layers, model.cfg.n_heads, args.sample)
    print(f"model {args.model}: {len(comps)} components, {len(pairs)} pairs; {_bench.describe()}; "
          f"plain loop timed on {len(sample)} components and extrapolated")

    # The peer as a TransformerLens user has it: weights contiguous, as from_pretrained leaves them (load_model
    # stores them transposed, which makes every forward cheaper, the plain loop's too): both baselines are timed.
    shipped = store_contiguous(copy.deepcopy(model))
    speedups, same_layout, worst = {}, {}, 0.0
    for mode in ("path", "activation"):
        engine = _bench.measure(lambda: sweep(model, batch, mode, progress=False),
                                warmup=lambda: sweep(model, batch.select(slice(0, 2)), mode, progress=False))
        result = engine.value

        plain_s = {}
        for name, m in (("shipped", shipped), ("same", model)):
            def plain_loop(m=m):
                caches = cache_runs(m, batch)  # a TransformerLens user caches both runs once
                return {c: patch_component_plain(m, batch, c, mode, result.baseline, caches) for c in sample}

            plain = _bench.measure(plain_loop)
            plain_s[name] = _bench.extrapolate(plain.seconds, len(sample), len(comps))
            for c, values in plain.value.items():
                worst = max(worst, _bench.max_abs_diff(_bench.sweep_values(result, c), values))
        speedups[mode] = plain_s["shipped"] / engine.seconds
        same_layout[mode] = plain_s["same"] / engine.seconds
        print(f"{mode:>10}: plain loop {plain_s['shipped']:8.1f} s on TransformerLens's layout, {plain_s['same']:8.1f} s "
              f"on circuits' (extrapolated to {len(comps)}); engine {engine.seconds:6.2f} s; speedup "
              f"{speedups[mode]:.1f}x / {same_layout[mode]:.1f}x")
    _bench.finish(args, speedup_path=speedups["path"], speedup_activation=speedups["activation"], max_abs_diff=worst,
                  same_layout_path=same_layout["path"], same_layout_activation=same_layout["activation"])


if __name__ == "__main__":
    main()
