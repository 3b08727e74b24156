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
import time

import torch

from circuits.data.pairs import as_batch, build_pairs
from circuits.patching import all_components, sweep
from circuits.patching.reference import cache_runs, patch_component_plain
from circuits.models.loading import store_contiguous
from circuits.models import load_model
from circuits.types import Component


def sample_components(n_layers: int, n_heads: int, k: int) -> list[Component]:
    """A fixed spread of heads over layers and head indices, plus a few MLPs."""
    n_mlp = max(1, k // 5)
    heads = [Component("head", (i * n_layers) // (k - n_mlp), (i * 5) % n_heads) for i in range(k - n_mlp)]
    mlps = [Component("mlp", (i * n_layers) // n_mlp + n_layers // (2 * n_mlp)) for i in range(n_mlp)]
    return heads + mlps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2")
    parser.add_argument("--pairs", type=int, default=32)
    parser.add_argument("--sample", type=int, default=15, help="components timed with the plain loop")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    model = load_model(args.model)
    pairs = build_pairs(model, "addition", n_pairs=args.pairs, seed=args.seed).pairs
    batch = as_batch(pairs, model)
    comps = all_components(model)
    sample = sample_components(model.cfg.n_layers, model.cfg.n_heads, args.sample)
    print(f"model {args.model}: {len(comps)} components, {len(pairs)} pairs, {torch.get_num_threads()} threads; "
          f"plain loop timed on {len(sample)} components and extrapolated")

    # The peer as a TransformerLens user has it: weights contiguous, as from_pretrained leaves them (load_model
    # stores them transposed, which makes every forward cheaper, the plain loop's too): both baselines are timed.
    shipped = store_contiguous(copy.deepcopy(model))
    speedups, same_layout, worst = {}, {}, 0.0
    for mode in ("path", "activation"):
        sweep(model, batch.select(slice(0, 2)), mode, progress=False)  # warm-up
        t0 = time.perf_counter()
        result = sweep(model, batch, mode, progress=False)
        engine_s = time.perf_counter() - t0

        plain_s = {}
        for name, m in (("shipped", shipped), ("same", model)):
            t0 = time.perf_counter()
            caches = cache_runs(m, batch)  # a TransformerLens user caches both runs once
            plain = {c: patch_component_plain(m, batch, c, mode, result.baseline, caches) for c in sample}
            plain_s[name] = (time.perf_counter() - t0) / len(sample) * len(comps)
            for c, (logit, ld, prob) in plain.items():
                if c.kind == "head":
                    ours = (result.head_logit[c.layer, c.head], result.head_logit_diff[c.layer, c.head], result.head_prob[c.layer, c.head])
                else:
                    ours = (result.mlp_logit[c.layer], result.mlp_logit_diff[c.layer], result.mlp_prob[c.layer])
                worst = max(worst, max((a - b).abs().max().item() for a, b in zip(ours, (logit, ld, prob))))
        speedups[mode] = plain_s["shipped"] / engine_s
        same_layout[mode] = plain_s["same"] / engine_s
        print(f"{mode:>10}: plain loop {plain_s['shipped']:8.1f} s on TransformerLens's layout, {plain_s['same']:8.1f} s "
              f"on circuits' (extrapolated to {len(comps)}); engine {engine_s:6.2f} s; speedup {speedups[mode]:.1f}x "
              f"/ {same_layout[mode]:.1f}x")
    print(f"speedup_path={speedups['path']:.1f} speedup_activation={speedups['activation']:.1f} max_abs_diff={worst:.2e} "
          f"same_layout_path={same_layout['path']:.1f} same_layout_activation={same_layout['activation']:.1f}")

if __name__ == "__main__":
    main()
