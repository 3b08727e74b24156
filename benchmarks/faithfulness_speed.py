"""Speed of the faithfulness engine (:mod:`circuits.patching.circuit_curves`): every circuit of a ranking at MIB's nine
sizes, plus the full model and the empty circuit, folded into the batch, against the plain loop that ablates one
circuit at a time with ``run_with_hooks`` (:func:`circuits.patching.engines.plain.ablate_plain`,
:func:`~circuits.patching.engines.plain.ablate_edges_plain`), in one run, on the same pairs and ranking; the metric of every
circuit and pair must agree. The ranking is random scores (seed 0): the work does not depend on which nodes a circuit
keeps, only on how many circuits there are. Mode ``positions`` times the per-position ranking the study runs
(:func:`~circuits.patching.engines.position_sweep.sweep_positions`, every head and MLP at every offset from END, the logit
difference only, as the faithfulness job asks for it) against its plain loop (one ``run_with_hooks`` of the whole
prompts per sender and offset, the counterfactual run cached once), timed on ``--sample`` random (sender, offset)
nodes and extrapolated to all of them; the END quantities must agree on the sample. The last line reads
``node_end_speedup=<x> node_all_speedup=<x> edge_end_speedup=<x> positions_speedup=<x> positions_cpu_s_per_pair=<x>
max_abs_diff=<x>`` (a mode left out with ``--modes`` is left out of it), with ``<level>_<positions>_cpu_speedup`` beside
each node and edge ratio: the same ratio in process CPU seconds, which a machine shared with other work disturbs less
than wall-clock seconds. Mode ``edge-all`` (edges at every position, MIB's ``evaluate_graph``) times the executor's
edge strategy against its plain loop
(:func:`~circuits.patching.ablation.edges_plain.ablate_edges_everywhere_plain`, one ``run_with_hooks`` per pair per
circuit, extrapolated from ``--edge-circuits``) and against the edge strategy of commit ``--old-edges`` (its
``circuits/patching/ablation/edges.py`` read with ``git show`` and run in its place, whole prompts per circuit), in
the same run; it adds ``edge_all_old_cpu_ratio`` (old / new CPU seconds) to the last line.

    python benchmarks/faithfulness_speed.py [--pairs 32] [--modes node-end,node-all,edge-end,edge-all,positions]
        [--edge-circuits 11] [--old-edges 2d78606]
"""

from __future__ import annotations

import argparse

import _bench  # first: passive OpenMP waiting before torch loads

import torch

from circuits.data.pairs import as_batch
from circuits.models import load_model
from circuits.patching.circuit_curves import (
    MIB_SIZES,
    circuit_masks,
    edge_masks,
    edge_receivers,
    edge_senders,
    edge_valid,
    circuit_curve,
    metric_of,
)
from circuits.patching.engines.plain import ablate_edges_plain, ablate_plain, ablation_values_plain, cf_answer_plain

MODES = ("node-end", "node-all", "edge-end", "edge-all", "positions")


def modes(text: str) -> list[str]:
    out = [m.strip() for m in text.split(",") if m.strip()]
    if not out or any(m not in MODES for m in out):
        raise argparse.ArgumentTypeError(f"{text!r}: accepted: a comma-separated subset of {', '.join(MODES)}")
    return out


def node_plain(model, batch, heads, mlps, positions, ablation):
    """The plain loop: one ``run_with_hooks`` per circuit (MIB's nine sizes, then N, then empty)."""
    masks = circuit_masks(heads, mlps, None, MIB_SIZES)
    L, H = heads.shape
    cf_answer = cf_answer_plain(model, batch)
    values = ablation_values_plain(model, batch, ablation)
    circuits = [(masks.heads[i], masks.mlps[i]) for i in range(len(masks))]
    circuits += [(torch.ones(L, H, dtype=torch.bool), torch.ones(L, dtype=torch.bool)),
                 (torch.zeros(L, H, dtype=torch.bool), torch.zeros(L, dtype=torch.bool))]
    out = []
    for hk, mk in circuits:
        gone_heads = [(l, h) for l in range(L) for h in range(H) if not hk[l, h]]
        gone_mlps = [l for l in range(L) if not mk[l]]
        logits = ablate_plain(model, batch, gone_heads, gone_mlps, {}, values, positions)
        out.append(metric_of(logits, batch.answer, cf_answer, "logit_diff").cpu())
    return torch.stack(out)


def edge_plain_loop(model, batch, scores, ablation, n_circuits, positions="end"):
    """The plain loop over edge circuits (MIB's nine sizes, N, empty), the first ``n_circuits`` of them, at END or at
    every position."""
    from circuits.patching.ablation.edges_plain import ablate_edges_everywhere_plain

    valid = edge_valid(model)
    keep, _, _ = edge_masks(valid, scores, MIB_SIZES)
    keep = torch.cat([keep, valid[None], torch.zeros_like(valid)[None]])[:n_circuits]
    senders, receivers = [str(s) for s in edge_senders(model)], [str(r) for r in edge_receivers(model)]
    cf_answer = cf_answer_plain(model, batch)
    out = []
    for k in keep:
        gone = [(senders[i], receivers[j]) for i, j in (valid & ~k).nonzero().tolist()]
        plain = ablate_edges_plain if positions == "end" else ablate_edges_everywhere_plain
        logits = plain(model, batch, gone, ablation)
        out.append(metric_of(logits, batch.answer, cf_answer, "logit_diff").cpu())
    return torch.stack(out)


def old_edge_strategy(commit: str):
    """``edges_everywhere`` of ``circuits/patching/ablation/edges.py`` at ``commit`` (``git show``), loaded as a module
    of its own; ``None`` where git or the commit is not there."""
    import subprocess
    import types
    from pathlib import Path

    try:
        source = subprocess.run(["git", "show", f"{commit}:circuits/patching/ablation/edges.py"], capture_output=True,
                                text=True, check=True, cwd=Path(__file__).resolve().parent).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    module = types.ModuleType(f"edges_{commit}")
    exec(compile(source, f"edges.py@{commit}", "exec"), module.__dict__)  # noqa: S102 (the repository's own code)
    return module.edges_everywhere


def position_nodes(model, batch, n: int) -> tuple[list, int]:
    """``n`` random (sender, offset) nodes (seed 0) among those the engine computes (offsets from END back to the
    first position where some pair's prompts differ), and how many there are."""
    from circuits.patching.engines.end_sweep import all_components
    from circuits.patching.core.readouts import first_difference

    senders = all_components(model)
    k_max = int((batch.end - first_difference(batch)).max())
    g = torch.Generator().manual_seed(0)
    picks = torch.randperm(len(senders) * (k_max + 1), generator=g)[:n].tolist()
    return [(senders[i // (k_max + 1)], i % (k_max + 1)) for i in picks], len(senders) * (k_max + 1)


def positions_plain(model, batch, nodes):
    """The plain loop: per node, one ``run_with_hooks`` of the whole reference prompts with the sender's
    counterfactual value written at ``end - offset`` (pairs whose prompts already differ there), the END logit
    difference read; the counterfactual run cached once. ``[node, pair]`` (NaN where a pair is not patched)."""
    from circuits.models.backend import act_name
    from circuits.patching.core.readouts import first_difference

    cf_answer = cf_answer_plain(model, batch)
    _, cf = model.run_with_cache(batch.counterfactual, names_filter=lambda n: n.endswith(("hook_z", "hook_mlp_out")))
    first = first_difference(batch)
    out = torch.full((len(nodes), len(batch)), float("nan"))
    for i, (s, k) in enumerate(nodes):
        rows = torch.nonzero(batch.end - k >= first).flatten()
        if not len(rows):
            continue
        pos = batch.end[rows] - k
        name = act_name("z" if s.kind == "head" else "mlp_out", s.layer)

        def patch(act, hook, rows=rows, pos=pos, name=name, s=s):
            act = act.clone()
            if s.kind == "head":
                act[torch.arange(len(rows)), pos, s.head] = cf[name][rows, pos, s.head]
            else:
                act[torch.arange(len(rows)), pos] = cf[name][rows, pos]
            return act

        logits = model.run_with_hooks(batch.reference[rows], fwd_hooks=[(name, patch)])
        end = logits[torch.arange(len(rows)), batch.end[rows]]
        out[i, rows] = metric_of(end, batch.answer[rows], cf_answer[rows], "logit_diff").float().cpu()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--identify", default="results/identify/addition",
                        help="pairs from this identify result when it exists (else addition pairs built here)")
    parser.add_argument("--pairs", type=_bench.count(1, 100_000), default=32)
    parser.add_argument("--modes", type=modes, default="node-end,node-all,edge-end")
    parser.add_argument("--ablation", default="counterfactual", choices=("counterfactual", "mean", "zero"))
    parser.add_argument("--edge-circuits", type=_bench.count(1, 1000), default=11,
                        help="edge circuits the plain loop runs (of 11); the rest extrapolated from them")
    parser.add_argument("--sample", type=_bench.count(1, 100_000), default=24,
                        help="(sender, offset) nodes the plain loop runs in mode positions (extrapolated to every "
                             "node)")
    parser.add_argument("--memory-mb", type=_bench.amount(1, 10_000_000), default=4096)
    parser.add_argument("--old-edges", default="2d78606", help="the commit whose edge strategy mode edge-all also "
                                                               "times (before issue 43's shared starts)")
    parser.add_argument("--device", default=None, help="cuda or cpu (default: cuda where there is one)")
    _bench.add_arguments(parser)
    args = parser.parse_args()
    _bench.setup(args)
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    model = load_model(args.model, device=device)
    model.requires_grad_(False)
    pairs, _ = _bench.identify_pairs(model, args.identify, args.pairs)
    batch = as_batch(pairs, model)
    L, H = model.cfg.n_layers, model.cfg.n_heads
    g = torch.Generator().manual_seed(0)
    heads, mlps = torch.rand(L, H, generator=g), torch.rand(L, generator=g)
    sync = torch.cuda.synchronize if device.startswith("cuda") else None
    print(f"model {args.model} on {device} ({torch.cuda.get_device_name() if sync else 'cpu'}): {len(batch)} pairs, "
          f"width {batch.reference.shape[1]} tokens, {len(MIB_SIZES)} sizes + N + empty, ablation {args.ablation}; "
          f"{_bench.describe()}")
    numbers: dict[str, float] = {}
    worst = 0.0
    for mode in args.modes:
        if mode == "positions":
            from circuits.patching.engines.position_sweep import sweep_positions

            nodes, n_nodes = position_nodes(model, batch, args.sample)
            fast = _bench.measure(lambda: sweep_positions(model, batch, progress=False, prob=False,
                                                          memory_mb=args.memory_mb),
                                  warmup=lambda: sweep_positions(model, batch.select(slice(0, 1)), offsets=[0, 1],
                                                                 progress=False, prob=False), sync=sync)
            plain = _bench.measure(lambda: positions_plain(model, batch, nodes), sync=sync)
            ours = torch.stack([(fast.value.heads.logit_diff[s.layer, s.head, k] if s.kind == "head"
                                 else fast.value.mlps.logit_diff[s.layer, k]) for s, k in nodes])
            patched = ~plain.value.isnan()
            diff = float((ours[patched] - plain.value[patched]).abs().max())
            worst = max(worst, diff)
            plain_s = _bench.extrapolate(plain.seconds, len(nodes), n_nodes)
            print(f"positions: engine {fast.seconds:7.3f} s ({fast.cpu_seconds:.1f} CPU s, "
                  f"{fast.cpu_seconds / len(batch):.2f} per pair), plain loop {plain_s:7.3f} s (extrapolated from "
                  f"{len(nodes)} of {n_nodes} sender x offset nodes), ratio {plain_s / fast.seconds:5.1f}x, "
                  f"max |diff| {diff:.2e}")
            numbers["positions_speedup"] = plain_s / fast.seconds
            numbers["positions_cpu_s_per_pair"] = fast.cpu_seconds / len(batch)
            continue
        level, positions = mode.split("-")
        if level == "node":
            run = lambda: circuit_curve(model, batch, heads, mlps, positions=positions,  # noqa: E731
                                       ablation=args.ablation, n_boot=0, memory_mb=args.memory_mb)
            fast = _bench.measure(run, warmup=True, sync=sync)
            plain = _bench.measure(lambda: node_plain(model, batch, heads, mlps, positions, args.ablation),
                                   warmup=True, sync=sync)
            ours = torch.cat([fast.value.m, fast.value.m_full[None], fast.value.m_empty[None]])
            plain_s = plain.seconds
        else:
            scores = torch.rand(edge_valid(model).shape, generator=g)
            run = lambda: circuit_curve(model, batch, edges=scores, ablation=args.ablation,  # noqa: E731
                                        positions=positions, n_boot=0, memory_mb=args.memory_mb)
            fast = _bench.measure(run, warmup=True, sync=sync)
            n = max(1, min(11, args.edge_circuits))
            plain = _bench.measure(lambda: edge_plain_loop(model, batch, scores, args.ablation, n, positions),
                                   sync=sync)
            old = old_edge_strategy(args.old_edges) if positions == "all" else None
            if old is not None:
                import circuits.patching.ablation.executor as executor

                new, executor.edges_everywhere = executor.edges_everywhere, old
                try:
                    before = _bench.measure(run, sync=sync)
                finally:
                    executor.edges_everywhere = new
                old_diff = float((before.value.m - fast.value.m).abs().max())
                worst = max(worst, old_diff)
                print(f"{mode}: the strategy of {args.old_edges}: {before.cpu_seconds:7.3f} CPU s ({before.seconds:.3f} "
                      f"s), old / new CPU ratio {before.cpu_seconds / fast.cpu_seconds:5.1f}x, max |diff| {old_diff:.2e}")
                numbers["edge_all_old_cpu_ratio"] = before.cpu_seconds / fast.cpu_seconds
            ours = torch.cat([fast.value.m, fast.value.m_full[None], fast.value.m_empty[None]])[:n]
            plain_s = _bench.extrapolate(plain.seconds, n, 11)
        diff = float((ours - plain.value).abs().max())
        worst = max(worst, diff)
        r = fast.value
        plain_cpu = plain.cpu_seconds if level == "node" else _bench.extrapolate(plain.cpu_seconds, n, 11)
        print(f"{mode}: CPU seconds batched {fast.cpu_seconds:7.3f}, plain loop {plain_cpu:7.3f}, CPU ratio "
              f"{plain_cpu / fast.cpu_seconds:5.1f}x")
        numbers[f"{level}_{positions}_cpu_speedup"] = plain_cpu / fast.cpu_seconds
        print(f"{mode}: batched {fast.seconds:7.3f} s, plain loop {plain_s:7.3f} s"
              f"{'' if level == 'node' or n == 11 else f' (extrapolated from {n} of 11 circuits)'}, ratio "
              f"{plain_s / fast.seconds:5.1f}x, max |diff| {diff:.2e}; {r.n_nodes} {level}s, CPR {r.cpr:.3f} CMD "
              f"{r.cmd:.3f} (random ranking)")
        numbers[f"{level}_{positions}_speedup"] = plain_s / fast.seconds
    _bench.finish(args, **numbers, max_abs_diff=worst)


if __name__ == "__main__":
    main()
