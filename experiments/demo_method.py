"""The rest of the method for ``make demo``, cheaply, on the pairs ``circuits identify --task all`` already made: the
knockout curve of each operation (key heads against random heads, Figure 3), where the top heads look by token role
(Figure 5) and their attention views (Figure 7), each operation with its own heads, and the MLPs through the logit lens
(Figure 6). One model load; small sizes (a few pairs, k up to 8, five random seeds), so the demo's report shows every
step of the method in about a minute on two CPU cores. The figure scripts (``make figures``) make the same results at the paper's sizes.

Run: ``python experiments/demo_method.py [--identify-dir results/identify] [--out results/demo]``; each result is
written to ``OUT/<name>`` and the seconds per stage are added to ``--timings`` (what ``make demo`` prints).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import _common as C

from circuits import timing
from circuits.data.templates import OPERATIONS
from circuits.identify import IdentifyResult


def main(argv: list[str] | None = None) -> Path:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--identify-dir", default="results/identify", help="where circuits identify --task all wrote")
    parser.add_argument("--out", default="results/demo", help="folder of the results (one sub-folder each)")
    parser.add_argument("--model", default="smollm2")
    parser.add_argument("--pairs", type=int, default=8, help="pairs per operation for the knockout, the roles and the lens")
    parser.add_argument("--timings", default=None, help="JSON file the seconds per stage are added to")
    args = parser.parse_args(argv)
    if args.pairs < 2:
        parser.error(f"--pairs must be at least 2, got {args.pairs}")
    C.configure_threads()
    import fig3_knockout
    import fig5_attention_roles
    import fig6_mlp_logit_lens
    import fig7_attention_views

    from circuits.explain.job import lens_result
    from circuits.explain.job import save_lens as lens_save
    from circuits.explain.job import roles_result, views_result
    from circuits.validate.job import knockout_result

    out = Path(args.out)
    from circuits.viz.page import asset_home, shared_asset

    out.mkdir(parents=True, exist_ok=True)  # one circuitsvis copy in --out that the views and the report share
    shared_asset("circuitsvis", out / "index.html", default=out)
    found = {op: Path(args.identify_dir) / op for op in OPERATIONS if (Path(args.identify_dir) / op).is_dir()}
    if not found:
        parser.error(f"no identify results under {args.identify_dir} (one folder per operation, as circuits identify "
                     f"--task all --out {args.identify_dir} writes)")
    # the pages below --out share its one circuitsvis copy, and identify's plotly.js (the demo's input)
    with timing.recording() as rec, asset_home(out, inputs=[args.identify_dir]):
        with timing.stage("load"):
            model = C.model_for(args.model)
            ids = {op: IdentifyResult.load(folder) for op, folder in found.items()}
        common = dict(model=args.model, n_pairs=len(next(iter(ids.values())).pairs), identify_dir=args.identify_dir)
        with timing.stage("knockout"):
            for op, r in ids.items():  # the job of `circuits knockout`, on the first pairs
                # the config says what ran: the first --pairs pairs (its made-by line is read from it)
                config = fig3_knockout.Config(**{**common, "n_pairs": min(args.pairs, len(r.pairs))}, task=op,
                                              ks=(0, 2, 4, 8), seeds=(0, 1, 2, 3, 4), out=str(out / f"knockout-{op}"))
                knockout_result(model, r, config, r.pairs[: args.pairs]).save(config.out)
        first = ids.get("addition") or next(iter(ids.values()))
        with timing.stage("attention"):
            # The jobs of `circuits attention` and `circuits attention-views`, on the identify results' own pairs:
            # each operation's panels show that operation's own top heads (issue 40: -, x and / showed addition's).
            for op, r in ids.items():
                config = fig5_attention_roles.Config(**common, task=op, n_key_heads=8, n_prompts=args.pairs,
                                                     operations=(op,), out=str(out / f"attention-roles-{op}"))
                roles_result(model, r, config, lambda o: ids[o].pairs).save(config.out)
                config = fig7_attention_views.Config(**common, task=op, n_key_heads=4, operations=(op,),
                                                     prompts_per_operation=1, out=str(out / f"attention-views-{op}"))
                views_result(model, r, config, lambda o: ids[o].pairs).save(config.out)
        with timing.stage("logit lens"):
            config = fig6_mlp_logit_lens.Config(**{**common, "n_pairs": min(args.pairs, len(first.pairs))},
                                                task=first.task, out=str(out / "logit-lens"))
            # The job of `circuits lens` on the identify pairs: Figure 6c's prompt is the config's example (so the
            # made-by line names the prompt the figure shows).
            lens_save(lens_result(model, first.pairs[: args.pairs], config), config.out)
    if args.timings:
        total = timing.add_to_file(args.timings, rec.seconds)
        print(f"Time per stage ({args.timings}):\n{timing.table(total)}")
    print(f"demo results: {out.resolve()} ({', '.join(sorted(p.name for p in out.iterdir() if not p.name.startswith(('.', '_'))))})")
    return out


if __name__ == "__main__":
    main()
