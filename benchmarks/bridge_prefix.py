"""Shared prompt prefixes on both TransformerLens lines: EAP-IG, the per-position engine and the attribution screen
on the TransformerBridge (TransformerLens 4.3, .venv-tl4) against the same engines on the HookedTransformer
(TransformerLens 3.9, .venv), on the same pairs, in one run.

Each engine runs the part of every prompt before its pair's first difference once (the backend's capability:
:meth:`~circuits.models.backend.Backend.run_prefixes` / :meth:`~circuits.models.backend.Backend.continue_prefixes`; TransformerLens
3's key/value cache on 3.9, Hugging Face's ``DynamicCache`` on the Bridge) and only the rest per step, row or pass.
The Bridge process writes the pairs, runs this script in the 3.9 virtualenv (``--hooked-python``, default
``.venv/bin/python``, ``--engines-only``) first, then times its own engines; ``--whole [ENGINES]`` also times the Bridge
with prefix sharing off (every prompt run whole: what the engines did on the Bridge before). Timed: EAP-IG (node level,
``--steps``), the per-position engine (every head and MLP at the last ``--offsets`` offsets from END) and the screen
(:func:`circuits.patching.engines.attribution.attribute`: heads, MLPs and neurons at every position, AtP*'s QK fix). The
last line reads ``eap_ig_bridge_s=<s> eap_ig_hooked_s=<s> eap_ig_ratio=<x> positions_bridge_s=<s>
positions_hooked_s=<s> positions_ratio=<x> screen_bridge_s=<s> screen_hooked_s=<s> screen_ratio=<x>`` (``ratio``:
Bridge seconds over 3.9 seconds; the issue's target is 1.25 or less), with ``*_whole_s`` added for the engines
``--whole`` names.

    .venv-tl4/bin/python benchmarks/bridge_prefix.py [--pairs 8] [--whole [eap_ig,screen]]
        [--hooked-python .venv/bin/python]
    .venv/bin/python benchmarks/bridge_prefix.py --engines-only   # the 3.9 side alone
"""

from __future__ import annotations

import argparse
import json
import subprocess
import tempfile
from pathlib import Path

import _bench  # first: passive OpenMP waiting before torch loads

from circuits.data.pairs import as_batch, build_pairs, read_pairs, write_pairs
from circuits.models import backend, load_model
from circuits.versions import installed_version

ROOT = Path(__file__).resolve().parents[1]
ENGINES = ("eap_ig", "positions", "screen")


def _engines(model, batch, args, only: tuple[str, ...] = ENGINES) -> dict[str, float]:
    """Seconds of each engine in ``only`` on ``batch`` (after a warm-up on two pairs)."""
    from circuits.patching.engines.attribution import attribute
    from circuits.patching.engines.eap_ig import eap_ig
    from circuits.patching.engines.position_sweep import sweep_positions

    offsets = list(range(args.offsets))
    runs = {
        "eap_ig": lambda b: eap_ig(model, b, "logit_diff", steps=args.steps, pairs_per_batch=args.batch,
                                   progress=False),
        "positions": lambda b: sweep_positions(model, b, offsets=offsets, progress=False),
        "screen": lambda b: attribute(model, b, "fraction", neurons=True, qk_fix=True, pairs_per_batch=args.batch,
                                      progress=False),
    }
    small = batch.select(slice(0, 2))
    out = {}
    for name, run in runs.items():
        if name not in only:
            continue
        out[name] = _bench.measure(lambda: run(batch), warmup=lambda: run(small)).seconds
        print(f"  {name}: {out[name]:.2f} s", flush=True)
    return out


def _hooked(args, pairs_file: Path) -> dict[str, float] | None:
    """The 3.9 engines' seconds from ``--hooked-python`` on the pairs in ``pairs_file`` (None where it is absent)."""
    python = Path(args.hooked_python)
    if args.hooked_python == "none" or not python.exists():
        print(f"no TransformerLens 3.9 python at {python}: no HookedTransformer seconds")
        return None
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "hooked.json"
        cmd = [str(python), str(Path(__file__).resolve()), "--engines-only", "--model", args.model, "--pairs-from",
               str(pairs_file), "--steps", str(args.steps), "--offsets", str(args.offsets), "--batch",
               str(args.batch), "--json", str(out)]
        if args.threads is not None:
            cmd += ["--threads", str(args.threads)]
        print("HookedTransformer engines, run first:", " ".join(cmd), flush=True)
        subprocess.run(cmd, check=True, cwd=ROOT)
        numbers = json.loads(out.read_text())
    return {e: numbers[f"{e}_s"] for e in ENGINES}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pairs", type=_bench.count(1, 100_000), default=8)
    parser.add_argument("--task", default="addition")
    parser.add_argument("--seed", type=_bench.count(0, 2**31 - 1), default=0)
    parser.add_argument("--steps", type=_bench.count(1, 100_000), default=5, help="EAP-IG's integration steps")
    parser.add_argument("--offsets", type=_bench.count(1, 100_000), default=4,
                        help="offsets from END the per-position engine sweeps")
    parser.add_argument("--batch", type=_bench.count(1, 100_000), default=16,
                        help="pairs per forward/backward (EAP-IG, screen)")
    parser.add_argument("--whole", nargs="?", const=",".join(ENGINES), default="", metavar="ENGINES",
                        help="also time the Bridge with prefix sharing off (these engines, comma-separated; default "
                             "all three)")
    parser.add_argument("--engines-only", action="store_true", help="time this line's engines alone")
    parser.add_argument("--pairs-from", metavar="PAIRS_JSONL", help="these pairs instead of building them")
    parser.add_argument("--hooked-python", default=str(ROOT / ".venv" / "bin" / "python"),
                        help="the TransformerLens 3.9 python whose engines are timed first ('none': skip)")
    _bench.add_arguments(parser)
    args = parser.parse_args()
    _bench.setup(args)

    model = load_model(args.model)
    model.requires_grad_(False)
    pairs = read_pairs(args.pairs_from) if args.pairs_from else build_pairs(model, args.task, n_pairs=args.pairs,
                                                                            seed=args.seed).pairs
    batch = as_batch(pairs, model)
    print(f"{backend.installed().name} (TransformerLens {installed_version()}), model {args.model}: {len(batch)} pairs, up to "
          f"{batch.reference.shape[1]} tokens; prefix sharing {model.backend.prefix_sharing()}; {_bench.describe()}",
          flush=True)
    if args.engines_only or backend.installed().name != "bridge":
        seconds = _engines(model, batch, args)
        _bench.finish(args, **{f"{e}_s": seconds[e] for e in ENGINES})
        return
    with tempfile.TemporaryDirectory() as tmp:
        pairs_file = Path(tmp) / "pairs.jsonl"
        write_pairs(pairs_file, pairs)
        hooked = _hooked(args, pairs_file)
    print("Bridge engines, prefixes shared:", flush=True)
    bridge = _engines(model, batch, args)
    whole: dict[str, float] = {}
    if args.whole:
        print("Bridge engines, prompts run whole (prefix sharing off):", flush=True)
        shared = model.backend.prefix_sharing()
        object.__setattr__(model, "_circuits_prefix_sharing", False)
        try:
            whole = _engines(model, batch, args, tuple(e for e in args.whole.split(",") if e))
        finally:
            object.__setattr__(model, "_circuits_prefix_sharing", shared)
    nan = float("nan")
    values: dict[str, float] = {}
    for e in ENGINES:
        h = hooked[e] if hooked else nan
        values.update({f"{e}_bridge_s": bridge[e], f"{e}_hooked_s": h, f"{e}_ratio": bridge[e] / h})
        print(f"{e:>10}: Bridge {bridge[e]:7.2f} s, 3.9 {h:7.2f} s, Bridge / 3.9 {bridge[e] / h:.2f}x"
              + (f"; Bridge with whole prompts {whole[e]:7.2f} s ({whole[e] / h:.2f}x)" if e in whole else ""),
              flush=True)
    values.update({f"{e}_whole_s": whole[e] for e in ENGINES if e in whole})
    print(f"now {_bench.describe()}")
    _bench.finish(args, **values)


if __name__ == "__main__":
    main()
