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

``--backend bridge`` (TransformerLens 4.3, in .venv-tl4; docs/backends.md) times the engine on the
TransformerBridge against the plain loop on the same Bridge in the same run (the Bridge's weights are the Hugging
Face model's, so there is one layout), and the HookedTransformer engine's seconds from a run of this script in the
TransformerLens 3.9 virtualenv (``--hooked-python``, default ``.venv/bin/python``) started just before, on the same
pairs (the two lines cannot share a process: 4.x has no HookedTransformer). Its last line reads
``speedup_path=<x> speedup_activation=<x> max_abs_diff=<x> engine_path_s=<s> engine_activation_s=<s>
hooked_path_s=<s> hooked_activation_s=<s> vs_hooked_path=<x> vs_hooked_activation=<x>`` (``vs_hooked_*``: the
Bridge engine's seconds over the HookedTransformer engine's). ``--engine-only`` times the engine alone
(``engine_path_s=<s> engine_activation_s=<s>``: what the Bridge run reads from the 3.9 one).

    python benchmarks/sweep_speed.py [--pairs 32] [--sample 15] [--model smollm2]
    .venv-tl4/bin/python benchmarks/sweep_speed.py --backend bridge [--hooked-python .venv/bin/python]
"""

from __future__ import annotations

import argparse
import copy
import json
import subprocess
import tempfile
from pathlib import Path

import _bench  # first: passive OpenMP waiting before torch loads

from circuits.data.pairs import as_batch, build_pairs, read_pairs, write_pairs
from circuits.models import load_model
from circuits.patching import all_components, sweep
from circuits.patching.engines.end_sweep_plain import cache_runs, patch_component_plain
from circuits.versions import backend_line, installed_version

ROOT = Path(__file__).resolve().parents[1]
BACKENDS = {"hooked": 3, "bridge": 4}  # --backend -> the TransformerLens line it runs on


def _engine_seconds(model, batch) -> dict[str, tuple[float, object]]:
    """The engine's seconds (after a warm-up on two pairs) and result, per mode."""
    out = {}
    for mode in ("path", "activation"):
        t = _bench.measure(lambda: sweep(model, batch, mode, progress=False),
                           warmup=lambda: sweep(model, batch.select(slice(0, 2)), mode, progress=False))
        out[mode] = (t.seconds, t.value)
    return out


def _hooked_engine(args, pairs_file: Path) -> dict[str, float] | None:
    """The HookedTransformer engine's seconds per mode from ``--hooked-python`` (this script, ``--engine-only``, on
    the pairs in ``pairs_file``), or None where that virtualenv is absent or ``--hooked-python none``."""
    if args.hooked_python == "none":
        return None
    python = Path(args.hooked_python)
    if not python.exists():
        print(f"no TransformerLens 3.9 python at {python} (make install builds .venv): no HookedTransformer seconds")
        return None
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "hooked.json"
        cmd = [str(python), str(Path(__file__).resolve()), "--backend", "hooked", "--engine-only", "--model", args.model,
               "--pairs-from", str(pairs_file), "--json", str(out)]
        if args.threads is not None:
            cmd += ["--threads", str(args.threads)]
        print("HookedTransformer engine, run first:", " ".join(cmd), flush=True)
        subprocess.run(cmd, check=True, cwd=ROOT)
        numbers = json.loads(out.read_text())
    return {"path": numbers["engine_path_s"], "activation": numbers["engine_activation_s"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pairs", type=_bench.count(1, 100_000), default=32)
    parser.add_argument("--sample", type=_bench.count(1, 100_000), default=15,
                        help="components timed with the plain loop")
    parser.add_argument("--seed", type=_bench.count(0, 2**31 - 1), default=0)
    parser.add_argument("--backend", choices=sorted(BACKENDS), default=None,
                        help="hooked (TransformerLens 3.9) or bridge (4.3); default: the installed line's")
    parser.add_argument("--engine-only", action="store_true", help="time the engine alone (no plain loop)")
    parser.add_argument("--pairs-from", metavar="PAIRS_JSONL", help="these pairs instead of building them")
    parser.add_argument("--hooked-python", default=str(ROOT / ".venv" / "bin" / "python"),
                        help="--backend bridge: the TransformerLens 3.9 python whose HookedTransformer engine is "
                             "timed first ('none': skip; default: .venv of this checkout)")
    _bench.add_arguments(parser)
    args = parser.parse_args()
    line = backend_line()
    backend = args.backend or next(b for b, n in BACKENDS.items() if n == line)
    if BACKENDS[backend] != line:
        raise SystemExit(f"--backend {backend} needs TransformerLens {'3.9' if backend == 'hooked' else '4.3'}; "
                         f"this python has {installed_version()} (--backend hooked runs in .venv, bridge in .venv-tl4)")
    _bench.setup(args)

    model = load_model(args.model)
    pairs = read_pairs(args.pairs_from) if args.pairs_from else build_pairs(model, "addition", n_pairs=args.pairs,
                                                                            seed=args.seed).pairs
    batch = as_batch(pairs, model)
    comps = all_components(model)
    if args.engine_only:
        engine = _engine_seconds(model, batch)
        print(f"{backend} engine on {len(comps)} components, {len(pairs)} pairs; {_bench.describe()}: "
              + ", ".join(f"{m} {s:.2f} s" for m, (s, _) in engine.items()))
        _bench.finish(args, engine_path_s=engine["path"][0], engine_activation_s=engine["activation"][0])
        return
    if backend == "bridge":
        _bridge(args, model, pairs, batch, comps)
        return
    from circuits.models.loading import store_contiguous

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


def _bridge(args, model, pairs, batch, comps) -> None:
    """The TransformerBridge engine against the plain loop on the same Bridge, and the HookedTransformer engine's
    seconds from the 3.9 virtualenv, run first on the same pairs."""
    with tempfile.TemporaryDirectory() as tmp:
        pairs_file = Path(tmp) / "pairs.jsonl"
        write_pairs(pairs_file, pairs)
        hooked = _hooked_engine(args, pairs_file)
    sample = _bench.sample_components(model.cfg.n_layers, model.cfg.n_heads, args.sample)
    print(f"model {args.model} on the TransformerBridge (TransformerLens {installed_version()}): {len(comps)} "
          f"components, {len(pairs)} pairs; {_bench.describe()}; plain loop timed on {len(sample)} components and "
          "extrapolated", flush=True)
    engine = _engine_seconds(model, batch)
    speedups, versus, worst = {}, {}, 0.0
    for mode, (seconds, result) in engine.items():
        def plain_loop():
            caches = cache_runs(model, batch)  # a TransformerLens user caches both runs once
            return {c: patch_component_plain(model, batch, c, mode, result.baseline, caches) for c in sample}

        plain = _bench.measure(plain_loop)
        plain_s = _bench.extrapolate(plain.seconds, len(sample), len(comps))
        for c, values in plain.value.items():
            worst = max(worst, _bench.max_abs_diff(_bench.sweep_values(result, c), values))
        speedups[mode] = plain_s / seconds
        versus[mode] = seconds / hooked[mode] if hooked else float("nan")
        print(f"{mode:>10}: plain TL 4 loop {plain_s:8.1f} s (extrapolated to {len(comps)}); Bridge engine "
              f"{seconds:6.2f} s; speedup {speedups[mode]:.1f}x; HookedTransformer engine "
              + (f"{hooked[mode]:6.2f} s (Bridge / Hooked {versus[mode]:.2f}x)" if hooked else "not run"), flush=True)
    nan = float("nan")
    _bench.finish(args, speedup_path=speedups["path"], speedup_activation=speedups["activation"], max_abs_diff=worst,
                  engine_path_s=engine["path"][0], engine_activation_s=engine["activation"][0],
                  hooked_path_s=hooked["path"] if hooked else nan,
                  hooked_activation_s=hooked["activation"] if hooked else nan,
                  vs_hooked_path=versus["path"], vs_hooked_activation=versus["activation"])


if __name__ == "__main__":
    main()
