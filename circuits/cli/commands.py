"""The commands' shared pieces and the commands with flags of their own.

:func:`writing` checks a command's output location before any work and locks it while the job runs;
:func:`register_job` adds a job table entry's subcommand from its config (:data:`circuits.jobs.JOBS`). ``identify``,
``finetune``, ``evaluate``, ``export`` and ``report`` add flags that are no config field (``--engine``,
``--heads-from``, ``--device``, ...): each has its ``register_<name>(subparsers)`` here, named by its job table entry,
whose docstring is the command's description. Nothing here imports torch at import time: a command's job is imported
when it runs.
"""

from __future__ import annotations

import argparse
import contextlib
import inspect
import os
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from circuits.config import add_arguments, check_arguments, from_arguments
from circuits.evaluation.config import EvalConfig
from circuits.identify.config import IdentifyConfig
from circuits.io import OutputError, output_lock
from circuits.jobs import Job, job, load
from circuits.cli.sizes import check_declared_ranges, check_pairs_file
from circuits.patching.engines.registry import END_SWEEP_ENGINES
from circuits.results import check_inputs, check_output, overwrite_granted
from circuits.sft.config import ExportConfig, FinetuneConfig, check_component_counts


def add_output_arguments(parser: argparse.ArgumentParser, help: str, default: str | None = None) -> None:
    if default is None:
        parser.add_argument("--out", required=True, help=help)
    else:
        parser.add_argument("--out", default=default, help=f"{help} (default: {default})")
    parser.add_argument("--overwrite", action="store_true",
                        help="replace --out even when it holds another kind of circuits result (never a folder holding "
                             "anything no circuits job wrote, nor an input of this command)")


@contextlib.contextmanager
def writing(out: str | Path, kind: str, overwrite: bool = False, *, container: bool = False,
            check: Callable[[Path, bool], object] | None = None,
            reads: Iterable[tuple[str, str | Path]] = ()) -> Iterator[Path]:
    """Check that a ``kind`` job may write to ``out`` (``check`` for single-file outputs) and that ``out`` neither
    holds nor lies inside one of the command's inputs (``reads``, :func:`reads_of`), then hold its lock.

    Under torchrun every rank checks (the same verdict everywhere, so no rank waits for one that stopped) and rank 0,
    the only writer, holds the lock."""
    from circuits import distributed

    out = Path(out)
    check_inputs(out, reads)
    if check is not None:
        if out.is_symlink():  # a file is written by renaming over it, which would replace the link, not its target
            raise OutputError(f"--out {out} is a symbolic link (to {os.readlink(out)}); name the file itself, or a "
                              "new one")
        check(out, overwrite)
    else:
        check_output(out, kind, overwrite=overwrite, container=container)
    if not distributed.is_main():
        yield out
        return
    with output_lock(out), (overwrite_granted(out) if overwrite else contextlib.nullcontext()):
        yield out


def reads_of(args: argparse.Namespace) -> list[tuple[str, str]]:
    """The files and folders a command reads that its ``--out`` must keep clear of: ``--pairs-file``, ``--heads-from``,
    ``--pairs-from``."""
    flags = (("--pairs-file", "pairs_file"), ("--heads-from", "heads_from"), ("--pairs-from", "pairs_from"))
    return [(flag, getattr(args, name)) for flag, name in flags if getattr(args, name, None)]


def subcommand(sub: argparse._SubParsersAction, name: str, description: str) -> argparse.ArgumentParser:
    """The subcommand ``name``: the job table's help line, and ``description`` as written."""
    return sub.add_parser(name, help=job(name).help, description=inspect.cleandoc(description),
                          formatter_class=argparse.RawDescriptionHelpFormatter)


def register_job(sub: argparse._SubParsersAction, job: Job) -> argparse.ArgumentParser:
    """Add the subcommand of ``job`` (a job table entry that writes one folder): its flags come from the job's config,
    with ``--out`` and ``--overwrite`` (and ``--no-progress`` where the job shows progress), its description is the
    job's help and its config's docstring. When it runs, the config is read from the flags and the job's
    ``run(config, out, progress=...)`` (imported only then, with torch) writes into ``--out`` while :func:`writing`
    holds it; then its ``printout(args, config, result, seconds)`` says what came out (``seconds``: the whole
    command's, model loading included)."""
    config_type = job.config_type()
    p = subcommand(sub, job.name, f"{job.help}.\n\n{inspect.cleandoc(config_type.__doc__)}")
    add_arguments(p, config_type)
    add_output_arguments(p, "output folder")

    def main(args: argparse.Namespace) -> int:
        start = time.perf_counter()
        config = from_arguments(config_type, args)
        with writing(args.out, job.kind, args.overwrite, reads=reads_of(args)):  # --out checked before torch loads
            run, printout = job.runner(), load(job.printout)
            result = run(config, args.out, progress=job.progress and not args.no_progress)
        printout(args, config, result, time.perf_counter() - start)
        return 0

    p.set_defaults(func=main, check=lambda args: check_declared_ranges(check_heads_from(check_pairs_file(
        from_arguments(config_type, args)))))
    return p


def check_heads_from(config: object) -> object:
    """``config`` (with the identify fields of its ``--heads-from``, as the job resolves it), after a ``--heads-from``
    that holds no result at all, or an identify result made with other identify flags than those given (``--task
    subtraction`` with an addition result), is refused in one line, before torch is imported (issue 40: the line took 15-30 s to come, after the job's imports); a folder holding a result of another
    kind, or one identify result per task, is left to the job's reader, whose line says which."""
    from circuits.results import MARKER, detect_kind, read_config

    folder = getattr(config, "heads_from", None)
    reads = getattr(config, "reads_heads_from", None)  # a default --heads-from another flag makes unused
    if folder and (reads is None or reads()):
        path = Path(folder).expanduser()
        if not (path / MARKER).is_file() and not any(path.glob("*/summary.json")):
            raise ValueError(f"{folder} holds no identify result; pass the output folder of `circuits identify`")
        if detect_kind(path) == "identify" and hasattr(config, "with_identify"):
            return config.with_identify(read_config(path, IdentifyConfig))  # the job does the same: its clash, said now
    return config


# ``circuits identify``
def register_identify(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """``circuits identify``: build prompt pairs, sweep every head and MLP, pick the key components.

    Writes, atomically, one folder per task: ``summary.json``, ``pairs.jsonl``, ``sweep.pt``, ``heads.html``
    (the paper's Figure 2 for that task), ``config.json`` and ``circuits.json``. ``--task all`` runs the four
    operations one by one (each in its own sub-folder, skipped when already finished with the same config,
    so an interrupted run resumes) and then, in ``all/``, pairs drawn evenly from the four with the per-pair values
    their sweeps computed (pooled, not re-run).

    Across GPUs: ``torchrun --nproc-per-node N -m circuits identify ...`` splits the sweep's work across N processes
    (rank 0 writes; the result equals a one-process run's exactly), and ``--n-devices K`` spreads a model too big for
    one GPU over K of them (docs/scale.md).
    """
    p = subcommand(sub, "identify", register_identify.__doc__)
    add_arguments(p, IdentifyConfig)
    add_output_arguments(p, "output folder (a result per task inside it for --task all)")
    p.add_argument("--engine", choices=tuple(END_SWEEP_ENGINES), default=None,
                   help="the registry's END engine that sweeps every head and MLP (circuits.patching.engines.registry): "
                        "exact-path (the default; --mode path) or exact-activation (--mode activation)")
    p.add_argument("--n-devices", type=int, default=1,
                   help="spread the model's layers over this many GPUs (per process under torchrun; default 1)")
    p.set_defaults(func=command_identify, check=lambda args: check_declared_ranges(check_pairs_file(config_from(args))))
    return p


def config_from(args: argparse.Namespace) -> IdentifyConfig:
    """The config of the flags; ``--engine`` is the registry's name of the END sweep ``--mode`` picks."""
    config = from_arguments(IdentifyConfig, args)
    if getattr(args, "engine", None) is not None:
        mode = END_SWEEP_ENGINES[args.engine]
        if getattr(args, "mode", mode) != mode:
            raise ValueError(f"--engine {args.engine} is --mode {mode}, not --mode {args.mode}; give one of them")
        config = config.replace(mode=mode)
    return config


def command_identify(args: argparse.Namespace) -> int:
    from circuits import distributed
    from circuits.identify import job as identify_job

    config = config_from(args)
    start = time.perf_counter()
    all_tasks = config.task == "all"
    with writing(args.out, "identify", args.overwrite, container=all_tasks, reads=reads_of(args)):
        identify_job.run(config, args.out, n_devices=args.n_devices, progress=not args.no_progress)
    if distributed.is_main():
        print(f"Figures ({time.perf_counter() - start:.0f} s in all, the model's loading included):")
        for task, folder in identify_job.task_folders(config, args.out).items():
            print(f"  {task}: {folder / 'heads.html'}")
    return 0


# ``circuits finetune``
def register_finetune(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """``circuits finetune``: Precise SFT (heads from an identify result or listed) or full SFT.

    Writes into ``--out``: ``config.json``, ``checkpoint.pt`` (resumable), ``delta.pt`` (the tuned values in
    fp32), ``result.json`` (losses, samples/s, tuned parameters, the tuning plan) and ``circuits.json``.

    ``--dtype bfloat16`` (or ``float16`` on a GPU) runs the forward and backward passes in low precision while the
    tuned values keep fp32 masters and fp32 AdamW state. Across GPUs and machines:
    ``torchrun --nproc-per-node N [--nnodes M ...] -m circuits finetune ...``: Precise SFT is data-parallel, full SFT is
    sharded with FSDP2 (``--cpu-offload`` also on one GPU); the global ``--batch-size`` is split over the ranks, so the
    run equals a one-process run. See docs/scale.md.
    """
    p = subcommand(sub, "finetune", register_finetune.__doc__)
    add_output_arguments(p, "output folder (a run there with the same config resumes; a finished one is left as is)")
    sel = p.add_argument_group("heads from an identify result")
    sel.add_argument("--heads-from", help="a `circuits identify` task folder")
    sel.add_argument("--top-k", type=int, default=32, help="heads taken from --heads-from: its key heads, then the rest "
                                                            "of its ranking (default 32, the paper's)")
    sel.add_argument("--top-mlps", type=int, default=0, help="MLPs taken from --heads-from")
    add_arguments(p.add_argument_group("the run"), FinetuneConfig)
    p.add_argument("--device", help="default: the model loader's (under torchrun: each rank's own GPU)")
    p.add_argument("--n-devices", type=int, default=1,
                   help="Precise SFT: spread the model's layers over this many GPUs (per process under torchrun)")
    p.set_defaults(func=command_finetune, check=lambda args: (check_component_counts(args.top_k, args.top_mlps),
                                                              check_arguments(FinetuneConfig, args)))
    return p


def config_from_args(args: argparse.Namespace) -> FinetuneConfig:
    from circuits.sft.job import select

    return from_arguments(FinetuneConfig, args, factory=lambda **fields: select(
        args.top_k, args.top_mlps, args.heads_from, **fields))


def command_finetune(args: argparse.Namespace) -> int:
    from circuits import distributed as D
    from circuits.sft import job as sft_job
    from circuits.sft.train import TrainingDiverged, clear_run, run_state

    config = config_from_args(args)
    sft_job.device_for(config, args.device, args.n_devices)  # bad combinations: one line, before anything is written
    with writing(args.out, "finetune", args.overwrite, reads=reads_of(args)):
        if args.overwrite and D.is_main():
            clear_run(args.out)
        D.barrier()
        finished = run_state(args.out, config) == "finished"  # the job says so and returns the saved result
        try:
            result = sft_job.run(config, args.out, progress=not args.no_progress, device=args.device,
                             n_devices=args.n_devices)
        except TrainingDiverged as err:
            if D.is_main():
                print(f"circuits finetune: {err}", file=sys.stderr)
            return 3
    if D.is_main() and not finished:
        ranks = f" on {result.world_size} processes" if result.world_size > 1 else ""
        print(f"{'full' if config.full else 'precise'} SFT ({config.dtype}{ranks}): {result.steps} steps, "
              f"{result.samples_per_s:.2f} samples/s, {result.tuned_parameters:,} tuned parameters, final loss "
              f"{result.losses[-1]:.4f}; wrote {args.out}")
    return 0


# ``circuits evaluate``
def register_evaluate(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """``circuits evaluate``: score a model (optionally with a fine-tuning delta applied) on the benchmarks.

    Writes ``--out``, atomically: a folder, or one JSON file when it ends in ``.json``
    (``{"kind": "evaluate", "config": ..., "tasks": {task: metrics}, ...}``).

    ``--dtype bfloat16`` loads the model in bf16 (a delta's fp32 values are cast onto it, as training cast them);
    ``--n-devices K`` spreads a model too big for one GPU over K of them. Evaluation runs in one process.
    """
    p = subcommand(sub, "evaluate", register_evaluate.__doc__)
    add_arguments(p, EvalConfig)
    p.add_argument("--device")
    p.add_argument("--n-devices", type=int, default=1, help="spread the model's layers over this many GPUs")
    add_output_arguments(p, "result folder, or a .json file")
    p.set_defaults(func=command_evaluate, check=lambda args: from_arguments(EvalConfig, args))
    return p


def command_evaluate(args: argparse.Namespace) -> int:
    from circuits.evaluation import job as evaluation_job
    from circuits.evaluation.result import check_json_output

    config = from_arguments(EvalConfig, args)
    evaluation_job.check(config, args.device)  # bad input is one line before anything is written
    file_check = check_json_output if str(args.out).endswith(".json") else None
    with writing(args.out, "evaluate", args.overwrite, check=file_check):
        result = evaluation_job.run(config, args.out, device=args.device, n_devices=args.n_devices, overwrite=args.overwrite)
    for task, metrics in result.tasks.items():
        shown = ", ".join(f"{k}={v:.4g}" for k, v in metrics.items())
        print(f"{task}: {shown}")
    return 0


# ``circuits export``
def register_export(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """``circuits export``: a tuned model out of the toolkit, as a Hugging Face checkpoint.

    Writes into ``--out`` (a new or empty folder, atomically): ``model.safetensors`` and ``config.json`` in the base
    model's own architecture and parameter names, its generation config and tokenizer, and ``circuits_export.json``
    (base model, delta, tuned heads and MLPs). ``AutoModelForCausalLM.from_pretrained(out)``, vLLM and lm-eval's
    ``hf`` backend load it without circuits:

        circuits export --delta results/ft/precise/delta.pt --out my-model/
        lm_eval --model hf --model_args pretrained=my-model,dtype=float32 --tasks gsm8k --limit 50

    Folded norms are divided back out of the tuned rows; see :mod:`circuits.sft.export`.
    """
    p = subcommand(sub, "export", register_export.__doc__)
    add_arguments(p, ExportConfig, required=("delta",))
    p.add_argument("--out", required=True, help="a new or empty output folder")
    p.set_defaults(func=command_export, check=lambda args: from_arguments(ExportConfig, args))
    return p


def command_export(args: argparse.Namespace) -> int:
    from circuits.sft import export

    config = from_arguments(ExportConfig, args)
    out = export.run(config, args.out)
    print(f"wrote {out} (load with AutoModelForCausalLM.from_pretrained({str(out)!r}))")
    return 0


# ``circuits mib``
def register_mib(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """``circuits mib RESULT --out importances.json``: an identify or edges result's scores as MIB's graph file.

    Writes the JSON that EAP-IG's ``Graph.to_json`` writes and MIB's circuit track reads (node scores from an identify
    result's heads and MLPs, edge scores from the edges it or an edges result measured, the edges not measured NaN;
    higher is more important), with ``cfg``'s ``n_layers``, ``n_heads`` and ``d_model`` read from the result's model
    (its config; nothing typed by hand). ``circuits.patching.interchange.mib.read`` reads it back:

        circuits mib results/identify/addition --out submission/arithmetic-addition_llama3/importances.json
    """
    p = subcommand(sub, "mib", register_mib.__doc__)
    p.add_argument("result", help="an identify or edges result folder")
    p.add_argument("--out", required=True, help="the .json file to write")
    p.add_argument("--metric", default=None, help="the metric the scores are read in (default: the result's key rule's)")
    p.add_argument("--top", type=float, default=None,
                   help="mark this many edges (nodes when no edge was measured) in the circuit, or with a value in (0, "
                        "1) that fraction (default: none marked; MIB's evaluation recomputes the circuits)")
    p.add_argument("--absolute", action="store_true", help="with --top, rank by |score|")
    p.add_argument("--overwrite", action="store_true", help="replace --out when it exists")
    p.set_defaults(func=command_mib)
    return p


def command_mib(args: argparse.Namespace) -> int:
    from circuits.cli.mib import check_mib_arguments, write_mib

    result = check_mib_arguments(args)  # every bad input is one line, before the model's config is read
    graph, sizes = write_mib(result, args.out, metric=args.metric, top=args.top, absolute=args.absolute)
    measured = int((~graph.edge_scores.isnan()).sum()) if graph.edge_scores is not None else 0
    print(f"wrote {args.out}: {'node scores and ' if graph.node_scores is not None else ''}{measured} edge scores "
          f"(n_layers={sizes['n_layers']}, n_heads={sizes['n_heads']}, d_model={sizes['d_model']} read from "
          f"{result.config.model})")
    return 0


# ``circuits report``
def register_report(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """``circuits report RESULTS_DIR... --out report.html``: one offline HTML page from saved results.

    Reads what ``circuits identify``, the figure scripts in ``experiments/`` and the fine-tuning jobs
    wrote (folders are searched, so ``results/`` itself works) and runs no model. Sections whose results
    are absent are skipped with a note saying how to make them.
    """
    p = subcommand(sub, "report", register_report.__doc__)
    p.add_argument("results", nargs="+", help="result folders (searched recursively) or JSON files")
    add_output_arguments(p, "the HTML file to write", default="report.html")
    p.add_argument("--title", default="circuits report")
    p.add_argument("--inline", action="store_true",
                   help="embed plotly.js and circuitsvis in the page (one file to send alone, about 6 MB more) instead "
                        "of loading the shared copy in _assets/ beside the results")
    p.set_defaults(func=command_report)
    return p


def command_report(args: argparse.Namespace) -> int:
    from circuits.viz.report import check_report_output, write_report

    with writing(args.out, "report", args.overwrite, check=check_report_output):
        out = write_report(args.results, args.out, title=args.title, overwrite=args.overwrite,
                           inline=args.inline)
    print(f"Report: {out.resolve()} ({out.stat().st_size / 1e6:.1f} MB)")
    return 0
