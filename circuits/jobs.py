"""The job table: every step that writes a result, listed once.

A :class:`Job` names its command, its config, the result kinds it writes (each with the report sections that draw it),
its ``run`` and the files it writes. Everything that used to keep a parallel list reads this table instead:

- the command line (:mod:`circuits.cli`) adds one subcommand per job with ``command=True``, its flags from ``config``,
  its description from the ``cli`` module's docstring (which may add a ``printout``, or a ``register`` hook for
  special flags);
- :data:`circuits.results.RESULT_TYPES` (kind -> ``"module:Class"``) and :data:`circuits.results.CIRCUITS_FILES` are
  views of it;
- the report's sections (:data:`circuits.viz.sections.SECTIONS`) take their kinds and their "how to make it" line
  from it.

Every ``run`` has one signature, ``run(config, out, *, model=None, progress=..., **options) -> Result``
(``tests/unit/test_job_table.py`` checks it): it returns its result and writes it through ``Result.save`` into ``out``. Jobs with ``command=False`` are made by a script in
``experiments/`` (named in ``how``); their results are still registered, drawn and replaced like any other.

Everything here is a string (``"module:Name"``), imported only when used: this module imports nothing of the
package, so the base layer (``results``), the report and ``circuits --help`` read it without torch.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Output:
    """A result kind a job writes: its ``kind`` (the ``circuits.json`` marker's), its class as ``"module:Class"``, and
    the anchors of the report sections that draw it (the first is its own; empty: no section draws it)."""

    kind: str
    type: str
    sections: tuple[str, ...] = ()


@dataclass(frozen=True)
class Job:
    """One step that writes results.

    ``name``: the command (``circuits <name>``) or, for a script's job, the script's name. ``config``/``run``:
    ``"module:Class"`` (a module importing no torch: the CLI builds every parser from it) and ``"module:function"``
    (imported only when the job runs). ``results``: the kinds it writes, the first the one ``run`` returns.
    ``files``: the names it writes into its folder (beside ``config.json`` and the marker), so what a later run may
    replace is the job's to say. ``cli``: the module under :mod:`circuits.cli` giving the command's description (its
    docstring) and optionally ``printout(args, config, result, seconds)``, or ``register(sub)`` for a command with
    flags of its own; ``printout``: that function as ``"module:function"`` where the job has no such module. ``how``:
    the command line the report shows when the result is missing."""

    name: str
    help: str
    results: tuple[Output, ...]
    files: tuple[str, ...] = ()
    config: str | None = None
    run: str | None = None
    cli: str | None = None
    how: str = ""
    command: bool = True
    progress: bool = True  # the command gets --no-progress
    printout: str | None = None  # "module:function" saying what came out (else the cli module's printout)

    @property
    def kind(self) -> str | None:
        """The kind ``run`` returns (None for a command that writes no result: report, export)."""
        return self.results[0].kind if self.results else None

    @property
    def section(self) -> str | None:
        """The report section its result feeds first (None when none draws it)."""
        return next((o.sections[0] for o in self.results if o.sections), None)

    def config_type(self) -> type:
        """The config class, imported now (its module imports no torch)."""
        return load(self.config)

    def runner(self) -> Any:
        """The ``run`` function, imported now (with torch)."""
        return load(self.run)


def load(ref: str | None) -> Any:
    """The object ``"module:name"`` names, imported now."""
    if not ref:
        raise ValueError("nothing to import")
    module, _, name = ref.partition(":")
    return getattr(importlib.import_module(module), name)


_PLOTS = tuple(f"figure-{t}.html" for t in ("addition", "subtraction", "multiplication", "division", "all"))

JOBS: tuple[Job, ...] = (
    # Step 1 (Section 4.1): the key heads.
    Job("identify", "find the key heads and MLPs by patching at END (Figure 2)",
        (Output("identify", "circuits.identify.result:IdentifyResult", ("key-heads", "edges", "uncertainty")),),
        ("summary.json", "pairs.jsonl", "sweep.pt", "heads.html", "edges.pt", "circuit.html"),
        "circuits.identify.config:IdentifyConfig", "circuits.identify.job:run", "circuits.cli.identify",
        "circuits identify --model smollm2 --task all --out results/identify"),
    Job("per_operation", "the key heads of each operation on one colour scale (Figure 15)",
        (Output("per_operation", "circuits.identify.result:PerOperation", ("key-heads",)),),
        ("data.json", "figure.html", "figure_overlap.html"),
        how="python experiments/fig15_per_operation.py", command=False),
    Job("screen", "attribution screen of every head, MLP and neuron at every position, verified exactly",
        (Output("screen", "circuits.beyond.screen.result:ScreenResult", ("screen",)),),
        ("summary.json", "pairs.jsonl", "screen.pt", "screen.html"),
        "circuits.beyond.screen.config:ScreenConfig", "circuits.beyond.screen.job:run", "circuits.cli.screen",
        "circuits screen --model smollm2 --task addition --verify 20 --out results/screen-addition"),
    Job("positions", "activation patching at every position, exact (information flow)",
        (Output("positions", "circuits.beyond.positions.result:PositionResult", ("positions",)),),
        ("summary.json", "pairs.jsonl", "positions.pt", "flow.html"),
        "circuits.beyond.positions.config:PositionConfig", "circuits.beyond.positions.job:run", "circuits.cli.positions",
        "circuits positions --model smollm2 --task addition --out results/positions-addition"),
    Job("neurons", "every neuron of the key MLPs patched at END, and their knockout",
        (Output("neurons", "circuits.beyond.neurons.result:NeuronResult", ("neurons",)),),
        ("summary.json", "pairs.jsonl", "neurons.pt", "figure.html"),
        "circuits.beyond.neurons.config:NeuronConfig", "circuits.beyond.neurons.job:run", "circuits.cli.neurons",
        "circuits neurons --model smollm2 --task addition --out results/neurons-addition"),
    Job("heuristics", "the key MLPs' top neurons classified into heuristics over the operand grid, and knocked out by class",
        (Output("heuristics", "circuits.beyond.heuristics.result:HeuristicsResult", ("heuristics",)),),
        ("summary.json", "classes.json", "pairs.jsonl", "grid.jsonl", "heuristics.pt", "figure.html", "knockout.html"),
        "circuits.beyond.heuristics.config:HeuristicsConfig", "circuits.beyond.heuristics.job:run",
        "circuits.cli.heuristics", "circuits heuristics --model smollm2 --task addition --out results/heuristics-addition"),
    Job("edges", "path-patch every earlier component into chosen receivers at END, on an identify result's pairs",
        (Output("edges", "circuits.beyond.edges.result:EdgeResult", ("edges",)),),
        ("summary.json", "pairs.jsonl", "edges.pt", "circuit.html"),
        "circuits.beyond.edges.config:EdgesConfig", "circuits.beyond.edges.job:run", None,
        "circuits edges --heads-from results/identify/addition --receivers top5 --out results/edges-addition",
        printout="circuits.cli.steps:edges"),
    Job("stability", "Jaccard overlap of key heads across seeds and template forms",
        (Output("stability", "circuits.beyond.stability.result:StabilityResult", ("uncertainty",)),),
        ("data.json", "figure.html"),
        "circuits.beyond.stability.config:StabilityConfig", "circuits.beyond.stability.job:run", "circuits.cli.stability",
        "circuits stability --model smollm2 --out results/stability", progress=False),
    Job("faithfulness", "faithfulness curves (MIB's CPR and CMD) of each ranking's circuits, with seconds",
        (Output("faithfulness", "circuits.beyond.faithfulness.result:FaithfulnessResult", ("faithfulness",)),),
        ("summary.json", "pairs.jsonl", "faithfulness.pt", "figure.html"),
        "circuits.beyond.faithfulness.config:FaithfulnessConfig", "circuits.beyond.faithfulness.job:run",
        "circuits.cli.faithfulness", "circuits faithfulness --model smollm2 --task addition --out results/faithfulness-addition"),
    # Step 1b (Figures 3-4, Tables 3-4): validate the key heads by knocking them out.
    Job("knockout", "accuracy after mean-ablating the top-k heads against k random heads (Figure 3)",
        (Output("knockout", "circuits.validate.knockout:KnockoutResult", ("knockout",)),), ("data.json", "figure.html"),
        "circuits.validate.config:KnockoutConfig", "circuits.validate.knockout_job:run", None,
        "circuits knockout --heads-from results/identify/addition --out results/knockout-addition",
        printout="circuits.cli.steps:knockout"),
    Job("transfer", "knock the key heads out on other data sets: SVAMP, sums, decimals, times, MMLU (Figure 4)",
        (Output("transfer", "circuits.validate.transfer:TransferResult", ("transfer",)),), ("data.json", "figure.html"),
        "circuits.validate.config:TransferSets", "circuits.validate.transfer_job:run", None,
        "circuits transfer --heads-from results/identify/addition --out results/transfer",
        printout="circuits.cli.steps:transfer"),
    Job("word_problems", "key heads found on word problems against the template key heads (Table 4)",
        (Output("word_problem_heads", "circuits.validate.transfer:WordProblemHeads", ("word-problems",)),),
        ("data.json", "figure.html"), how="python experiments/table4_gsm8k.py", command=False),
    Job("ablation_kinds", "the knockout under each ablation kind (mean, zero, resample)",
        (Output("ablation_kinds", "circuits.validate.ablation_kinds:AblationComparison", ("uncertainty",)),),
        ("data.json", "figure.html", *_PLOTS), how="python experiments/fig3_ablation_kinds.py", command=False),
    Job("cross_model", "the paper's claims measured on several models",
        (Output("cross_model", "circuits.validate.cross_model:CrossModelResult", ("cross-model",)),),
        ("data.json", "figure.html"), how="python experiments/cross_model.py", command=False),
    # Step 2 (Section 4.2): explain them.
    Job("attention", "where the key heads look from END, by token role (Figure 5)",
        (Output("attention_roles", "circuits.explain.attention:AttentionRoles", ("attention-roles",)),),
        ("data.json", "figure.html"),
        "circuits.explain.config:RolesConfig", "circuits.explain.attention_job:run_roles", None,
        "circuits attention --heads-from results/identify/addition --out results/attention-roles",
        printout="circuits.cli.steps:attention"),
    Job("attention-views", "circuitsvis views of the key heads' attention on a few prompts (Figures 7, 16)",
        (Output("attention_views", "circuits.explain.attention:AttentionViews", ("attention-views",)),),
        ("data.json", "figure.html"),
        "circuits.explain.config:ViewsConfig", "circuits.explain.attention_job:run_views", None,
        "circuits attention-views --heads-from results/identify/addition --out results/attention-views",
        printout="circuits.cli.steps:views"),
    Job("lens", "the MLPs through the logit lens: operands in, answer out (Figure 6)",
        (Output("logit_lens", "circuits.explain.logit_lens:LogitLens", ("logit-lens",)),),
        ("data.json", "figure.html", "figure_6c.html"),
        "circuits.explain.config:LensConfig", "circuits.explain.lens_job:run", None,
        "circuits lens --heads-from results/identify/addition --out results/logit-lens",
        printout="circuits.cli.steps:lens"),
    Job("numbers", "the key components over the number line (Fourier periods) and the neurons of each answer digit",
        (Output("numbers", "circuits.explain.numbers.result:NumbersResult", ("numbers",)),),
        ("summary.json", "numbers.pt", "figure.html", "digits.html"),
        "circuits.explain.numbers.config:NumbersConfig", "circuits.explain.numbers.job:run", "circuits.cli.numbers",
        "circuits numbers --heads-from results/identify/addition --out results/numbers-addition"),
    # Step 3 (Section 4.3): Precise SFT, and the benchmarks it is measured on.
    Job("finetune", "Precise SFT of key heads/MLPs, or full SFT (Section 4.3, 5.3)",
        (Output("finetune", "circuits.sft.result:FinetuneResult", ("precise-sft",)),),
        ("result.json", "checkpoint.pt", "checkpoint", "delta.pt"),
        "circuits.sft.config:FinetuneConfig", "circuits.sft.job:run", "circuits.cli.finetune",
        "circuits finetune --heads-from results/identify/addition --out results/sft"),
    Job("sft_table", "base model, full fine-tuning and Precise SFT on math and generic benchmarks (Table 1)",
        (Output("sft_table", "circuits.sft.compare:SFTComparison", ("precise-sft",)),),
        ("data.json", "table.md", "rows", "runs"), how="python experiments/table1_precise_sft.py", command=False),
    Job("evaluate", "math and generic benchmarks through lm-evaluation-harness",
        (Output("evaluation", "circuits.evaluation.result:EvalResult", ("precise-sft",)),),
        ("result.json", "circuits_metrics.py"),
        "circuits.evaluation.config:EvalConfig", "circuits.evaluation.job:run", "circuits.cli.evaluate",
        "circuits evaluate --model smollm2 --out results/eval-base", progress=False),
    # Commands that write no result of their own.
    Job("export", "write a fine-tuned model (base + delta.pt) as a Hugging Face checkpoint", (), cli="circuits.cli.export", progress=False),
    Job("report", "one shareable, offline HTML page from saved results (no model run)", (), cli="circuits.cli.report",
        progress=False),
)

COMMANDS: tuple[Job, ...] = tuple(j for j in JOBS if j.command)


def job(name: str) -> Job:
    """The job named ``name``."""
    for j in JOBS:
        if j.name == name:
            return j
    raise KeyError(f"No job {name!r}; known: {', '.join(j.name for j in JOBS)}")


def outputs() -> tuple[Output, ...]:
    """Every result kind of the table, each once, in the table's order."""
    seen: dict[str, Output] = {}
    for j in JOBS:
        for o in j.results:
            seen.setdefault(o.kind, o)
    return tuple(seen.values())


def writer(kind: str) -> Job:
    """The job that writes ``kind`` (the first listed)."""
    return next(j for j in JOBS if any(o.kind == kind for o in j.results))


def section_kinds(anchor: str) -> tuple[str, ...]:
    """The kinds the report section ``anchor`` draws."""
    return tuple(o.kind for o in outputs() if anchor in o.sections)


def section_how(anchor: str) -> str:
    """How to make what the section ``anchor`` draws: the commands of the jobs whose own section (an output's first) it
    is, or else of every job feeding it."""
    own = [j.how for j in JOBS if j.how and any(o.sections[:1] == (anchor,) for o in j.results)]
    feeding = [j.how for j in JOBS if j.how and any(anchor in o.sections for o in j.results)]
    return ", or ".join(dict.fromkeys(own or feeding))


def files_of(kind: str) -> frozenset[str]:
    """The names the jobs writing ``kind`` put in its folder (beside ``config.json`` and the marker)."""
    return frozenset(f for j in JOBS if any(o.kind == kind for o in j.results) for f in j.files)


def job_files() -> frozenset[str]:
    """Every name a job writes into a result folder."""
    return frozenset(f for j in JOBS for f in j.files)
