"""Speed of EAP-IG (inputs variant, :func:`circuits.patching.engines.eap_ig.eap_ig`) against attribution patching
(:func:`circuits.patching.engines.attribution.attribute`, heads and MLPs, no neurons or QK fix: the same nodes) and against
the plain full-prompt EAP-IG loop (:func:`circuits.patching.engines.plain.eap_ig_plain`), in one run on the same pairs;
with one step EAP-IG is attribution patching and the two are compared node by node. The last line reads
``atp_seconds=<x> eap_ig1_seconds=<x> eap_ig_steps_seconds=<x> eap_ig_steps_edge_seconds=<x> speedup_vs_plain=<x>
max_abs_diff=<x>``.

    python benchmarks/eap_ig_speed.py [--pairs 32] [--steps 5] [--task addition]
"""

from __future__ import annotations

import argparse

import _bench  # first: passive OpenMP waiting before torch loads
import torch

from circuits.data.pairs import as_batch, build_pairs
from circuits.models import load_model
from circuits.patching.engines.attribution import attribute
from circuits.patching.engines.eap_ig import eap_ig
from circuits.patching.core.metrics import get_metric
from circuits.patching.engines.plain import eap_ig_plain


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pairs", type=_bench.count(1, 100_000), default=32)
    parser.add_argument("--steps", type=_bench.count(1, 100_000), default=5)
    parser.add_argument("--task", default="addition")
    parser.add_argument("--metric", default="logit_diff")
    parser.add_argument("--no-edges", action="store_true", help="skip the edge-level run")
    parser.add_argument("--batch", type=_bench.count(1, 100_000), default=16,
                        help="pairs per forward/backward (nodes, attribution, plain)")
    parser.add_argument("--edge-batch", type=_bench.count(1, 100_000), default=4,
                        help="pairs per forward/backward at edge level (memory)")
    _bench.add_arguments(parser)
    args = parser.parse_args()
    _bench.setup(args)

    model = load_model(args.model)
    model.requires_grad_(False)
    batch = as_batch(build_pairs(model, args.task, n_pairs=args.pairs).pairs, model)
    m = get_metric(args.metric)
    print(f"model {args.model}: {len(batch)} {args.task} pairs, up to {batch.reference.shape[1]} tokens; "
          f"{_bench.describe()}")
    small = batch.select(slice(0, 2))
    b = args.batch
    atp = _bench.measure(lambda: attribute(model, batch, m, neurons=False, qk_fix=False, pairs_per_batch=b,
                                           progress=False),
                         warmup=lambda: attribute(model, small, m, neurons=False, qk_fix=False, progress=False))
    print(f"attribution patching: {atp.seconds:.2f} s", flush=True)
    one = _bench.measure(lambda: eap_ig(model, batch, m, steps=1, pairs_per_batch=b, progress=False))
    print(f"EAP-IG 1 step: {one.seconds:.2f} s", flush=True)
    many = _bench.measure(lambda: eap_ig(model, batch, m, steps=args.steps, pairs_per_batch=b, progress=False))
    print(f"EAP-IG {args.steps} steps: {many.seconds:.2f} s", flush=True)
    edge_s = float("nan")
    if not args.no_edges:
        edge_s = _bench.measure(lambda: eap_ig(model, batch, m, steps=args.steps, level="edge",
                                               pairs_per_batch=args.edge_batch, progress=False)).seconds
        print(f"EAP-IG {args.steps} steps, edges: {edge_s:.2f} s", flush=True)

    def plain_loop() -> dict:
        parts = [eap_ig_plain(model, batch.select(slice(c, c + b)), m, many.value.readout, args.steps)
                 for c in range(0, len(batch), b)]
        return {k: torch.cat([p[k] for p in parts], -1) for k in ("head", "mlp")}

    plain = _bench.measure(plain_loop)
    a = atp.value
    worst = max(float((one.value.head - a.head.nansum(2)).abs().max()), float((one.value.mlp - a.mlp.nansum(1)).abs().max()))
    worst_plain = max(float((many.value.head - plain.value["head"]).abs().max()),
                      float((many.value.mlp - plain.value["mlp"]).abs().max()))
    print(f"attribution patching {atp.seconds:.2f} s; EAP-IG 1 step {one.seconds:.2f} s, {args.steps} steps "
          f"{many.seconds:.2f} s (nodes), {edge_s:.2f} s (edges); plain EAP-IG {args.steps} steps {plain.seconds:.2f} s "
          f"(max |diff| {worst_plain:.2e}); now {_bench.describe()}")
    _bench.finish(args, atp_seconds=atp.seconds, eap_ig1_seconds=one.seconds, eap_ig_steps_seconds=many.seconds,
                  eap_ig_steps_edge_seconds=edge_s, speedup_vs_plain=plain.seconds / many.seconds, max_abs_diff=worst)


if __name__ == "__main__":
    main()
