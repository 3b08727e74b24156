"""Speed of the per-position engine against TransformerLens's own by-position patching, in one run.

On SmolLM2 (30 layers x 9 heads) with pairs of one template and one length (what TransformerLens's
``get_act_patch_attn_head_out_by_pos`` and ``get_act_patch_mlp_out`` take): TransformerLens's patcher (the
``generic_activation_patch`` those two functions call, one forward per (layer, position, head) or (layer, position))
is timed on a fixed sample of indices and extrapolated to every index; the engine is timed on every head and MLP at
every position at once. Results are compared on the sample (mean answer logit at END, TransformerLens's metric).
The last line reads ``speedup_position=<x> max_abs_diff=<x>``.

    python benchmarks/position_sweep.py [--pairs 8] [--sample 40] [--identify results/identify/addition]
"""

from __future__ import annotations

import argparse
from collections import Counter

import _bench  # first: passive OpenMP waiting before torch loads

import pandas as pd
import torch
from transformer_lens import patching

from circuits.data.pairs import as_batch
from circuits.models import load_model
from circuits.patching.engines.position_sweep import sweep_positions


def aligned(pairs, n):
    """The largest set of pairs of one template and one length (at most ``n``)."""
    key = Counter((p.template_id, len(p.reference_token_ids)) for p in pairs).most_common(1)[0][0]
    return [p for p in pairs if (p.template_id, len(p.reference_token_ids)) == key][:n]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pairs", type=_bench.count(1, 100_000), default=8)
    parser.add_argument("--sample", type=_bench.count(1, 100_000), default=40,
                        help="head indices timed with TransformerLens (and a fifth as many MLP indices)")
    parser.add_argument("--identify", default="results/identify/addition", help="take pairs from this identify result "
                                                                               "when it exists")
    _bench.add_arguments(parser)
    args = parser.parse_args()
    _bench.setup(args)

    model = load_model(args.model)
    model.requires_grad_(False)
    pool, _ = _bench.identify_pairs(model, args.identify, 64)
    pairs = aligned(pool, args.pairs)
    batch = as_batch(pairs, model)
    L, H, W = model.cfg.n_layers, model.cfg.n_heads, batch.reference.shape[1]
    end, answer = W - 1, batch.answer
    print(f"model {args.model}: {len(pairs)} pairs of {pairs[0].template_id}, {W} tokens; {L * W * H} head and {L * W} "
          f"MLP indices; {_bench.describe()}")

    engine = _bench.measure(lambda: sweep_positions(model, batch, progress=False),
                            warmup=lambda: sweep_positions(model, batch.select(slice(0, 1)), offsets=[0, 1], progress=False))
    ours, ours_s = engine.value, engine.seconds

    def metric(logits):
        return logits[torch.arange(len(answer)), end, answer].mean()

    g = torch.Generator().manual_seed(0)
    heads = pd.DataFrame([(int(torch.randint(L, (1,), generator=g)), int(torch.randint(W, (1,), generator=g)),
                           int(torch.randint(H, (1,), generator=g))) for _ in range(args.sample)], columns=["layer", "pos", "head_index"])
    mlps = pd.DataFrame([(int(torch.randint(L, (1,), generator=g)), int(torch.randint(W, (1,), generator=g)))
                         for _ in range(max(1, args.sample // 5))], columns=["layer", "pos"])
    cache = _bench.measure(lambda: model.run_with_cache(batch.counterfactual)[1])  # the clean run, cached once
    cf_cache = cache.value
    th = _bench.measure(lambda: patching.generic_activation_patch(
        model, batch.reference, cf_cache, metric, patching.layer_pos_head_vector_patch_setter, "z", index_df=heads))
    tm = _bench.measure(lambda: patching.generic_activation_patch(
        model, batch.reference, cf_cache, metric, patching.layer_pos_patch_setter, "mlp_out", index_df=mlps))
    theirs_s = (cache.seconds + _bench.extrapolate(th.seconds, len(heads), L * W * H)
                + _bench.extrapolate(tm.seconds, len(mlps), L * W))
    th, tm = th.value, tm.value

    mean_h, mean_m = ours.heads.logit.mean(-1), ours.mlps.logit.mean(-1)  # [layer, head, offset], offset = end - pos
    worst = max(max(abs(float(mean_h[r.layer, r.head_index, end - r.pos]) - float(v)) for r, v in zip(heads.itertuples(), th)),
                max(abs(float(mean_m[r.layer, end - r.pos]) - float(v)) for r, v in zip(mlps.itertuples(), tm)))
    print(f"TransformerLens get_act_patch_attn_head_out_by_pos + get_act_patch_mlp_out: {theirs_s:8.1f} s "
          f"(extrapolated from {len(heads)} + {len(mlps)} indices); engine, every index: {ours_s:6.1f} s")
    _bench.finish(args, speedup_position=theirs_s / ours_s, max_abs_diff=worst)


if __name__ == "__main__":
    main()
