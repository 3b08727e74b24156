"""``circuits mib``: an identify or edges result's scores written as MIB's graph file (EAP-IG's JSON), the model's
sizes read from its config (:func:`circuits.models.loading.model_sizes`), the graph built by the one MIB writer
(:func:`circuits.patching.interchange.mib.graph_of`, :meth:`~circuits.patching.interchange.mib.MIBGraph.write`)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

MIB_KINDS = ("identify", "edges")


def check_mib_arguments(args: argparse.Namespace) -> Any:
    """The result ``args.result`` names, after checking the flags: each problem one ValueError line."""
    from circuits.results import load_result
    from circuits.types import METRIC_NAMES

    out = Path(args.out)
    if out.suffix != ".json":
        raise ValueError(f"--out {args.out}: MIB's graph is a .json file (e.g. .../importances.json)")
    if out.is_dir() or (out.exists() and not args.overwrite):
        raise ValueError(f"--out {args.out} exists; pass --overwrite to replace it")
    if out.exists() or out.is_symlink():  # --overwrite replaces a graph file, never a file circuits mib did not write
        from circuits.patching.interchange.mib import read

        try:
            if out.is_symlink():
                raise ValueError("a symbolic link")
            read(out)
        except ValueError as err:
            raise ValueError(f"--out {args.out} is not a MIB graph file ({str(err).splitlines()[0][:120]}); "
                             "--overwrite replaces only a graph file: choose another --out") from None
    if args.metric is not None and args.metric not in METRIC_NAMES:
        raise ValueError(f"--metric {args.metric!r}: accepted: {', '.join(METRIC_NAMES)}")
    top = args.top
    if top is not None and not (top >= 0 and (top <= 1 or float(top).is_integer())):
        raise ValueError(f"--top {top:g}: a count of edges (a whole number) or a fraction in (0, 1]")
    result = load_result(args.result)
    if result.kind not in MIB_KINDS:
        raise ValueError(f"{args.result} is a {result.kind} result; MIB's graph is written from an identify or edges "
                         "result")
    return result


def write_mib(result: Any, out: str | Path, *, metric: str | None = None, top: float | None = None,
              absolute: bool = False) -> tuple[Any, dict[str, int]]:
    """Write ``result``'s MIB graph to ``out``; the graph and the model sizes it was written with."""
    from circuits.models.loading import model_sizes
    from circuits.patching.interchange.mib import graph_of

    if result.kind == "identify":
        metric = metric or result.key_rule.metric
        nodes, sweep = result.scores(metric), result.edges
    else:
        metric = metric or result.metric
        nodes, sweep = None, result.edges
    sizes = model_sizes(result.config.model, getattr(result.config, "dtype", "float32"))
    count = None if top is None else (int(top) if top >= 1 else float(top))
    graph = graph_of(sizes["n_layers"], sizes["n_heads"], sizes["d_model"], nodes=nodes,
                     edges=None if sweep is None else sweep.scores(metric), top=count, absolute=absolute)
    from circuits.io import output_lock

    with output_lock(out):  # one writer; what a killed earlier write left (.importances.json.circuits-tmp-*) goes
        graph.write(out)
    return graph, sizes
