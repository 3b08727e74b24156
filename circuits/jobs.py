"""The job table: every step that writes a result, listed once, from its command to its code.

A :class:`Job` names its command, its config, the result kinds it writes (each with the report sections that draw it),
its ``run`` and the files it writes. Everything that used to keep a parallel list reads this table instead:

- the command line (:mod:`circuits.cli`) adds one subcommand per job with ``command=True``: its flags from ``config``,
  its description from the config's docstring, its run, and what it prints when done (``printout``); a command with
  flags of its own names its ``register`` in :mod:`circuits.cli.commands`;
- :data:`circuits.results.RESULT_TYPES` and :data:`circuits.results.CIRCUITS_FILES` are views of it;
- the report's sections (:data:`circuits.viz.sections.SECTIONS`) take their kinds and their "how to make it" line
  from it.

Every job has one shape: a torch-free config class, a job module with ``run(config, out, *, model=None,
progress=..., **options) -> Result`` (it writes its result through ``Result.save`` into ``out``) and
``printout(args, config, result, seconds)`` (a command with flags of its own -- identify, finetune, evaluate -- prints
in its ``register``'s command instead), and a result class whose ``kind`` is the job's name
(``tests/unit/test_job_table.py`` checks each). Jobs with ``command=False`` are made by a script in ``experiments/``
(named in ``how``); their results are still registered, drawn and replaced like any other.

The table names each job's config class, run (``run_<name>``), printout (``print_<name>``) and result classes by the
imports below: an editor's "go to definition" and a reader follow them to the code, and :func:`load` imports each
only when it is used (:mod:`circuits.lazy` reads the same lines), so this module imports nothing of the package and
the base layer (``results``), the report and ``circuits --help`` read it without torch. A new job is its module(s) and
two lines here: its import and its entry (``tests/unit/test_job_table.py`` adds a toy job so).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from circuits.lazy import type_checking_exports

if TYPE_CHECKING:  # what the table names (a job's config, run, printout and result classes), imported by load()
    from circuits.beyond.carry.config import CarryConfig
    from circuits.beyond.carry.job import printout as print_carry, run as run_carry
    from circuits.beyond.carry.result import CarryResult
    from circuits.beyond.edges.config import EdgesConfig
    from circuits.beyond.edges.job import printout as print_edges, run as run_edges
    from circuits.beyond.edges.result import EdgeResult
    from circuits.beyond.faithfulness.config import FaithfulnessConfig
    from circuits.beyond.faithfulness.job import printout as print_faithfulness, run as run_faithfulness
    from circuits.beyond.faithfulness.result import FaithfulnessResult
    from circuits.beyond.heuristics.config import HeuristicsConfig
    from circuits.beyond.heuristics.job import printout as print_heuristics, run as run_heuristics
    from circuits.beyond.heuristics.result import HeuristicsResult
    from circuits.beyond.neurons.config import NeuronConfig
    from circuits.beyond.neurons.job import printout as print_neurons, run as run_neurons
    from circuits.beyond.neurons.result import NeuronResult
    from circuits.beyond.positions.config import PositionConfig
    from circuits.beyond.positions.job import printout as print_positions, run as run_positions
    from circuits.beyond.positions.result import PositionResult
    from circuits.beyond.screen.config import ScreenConfig
    from circuits.beyond.screen.job import printout as print_screen, run as run_screen
    from circuits.beyond.screen.result import ScreenResult
    from circuits.beyond.stability.config import StabilityConfig
    from circuits.beyond.stability.job import printout as print_stability, run as run_stability
    from circuits.beyond.stability.result import StabilityResult
    from circuits.cli.commands import (register_evaluate, register_export, register_finetune, register_identify,
                                       register_mib, register_report)
    from circuits.evaluation.config import EvalConfig
    from circuits.evaluation.job import run as run_evaluate
    from circuits.evaluation.result import EvalResult
    from circuits.evaluation.study import printout as print_sft_study, run as run_sft_study
    from circuits.evaluation.study_config import StudyConfig
    from circuits.evaluation.study_result import SFTStudyResult
    from circuits.explain.attention import AttentionRoles, AttentionViews
    from circuits.explain.config import LensConfig, RolesConfig, ViewsConfig
    from circuits.explain.job import (print_attention, print_attention_views, print_lens, run_attention,
                                      run_attention_views, run_lens)
    from circuits.explain.logit_lens import LogitLens
    from circuits.explain.numbers.config import NumbersConfig
    from circuits.explain.numbers.job import printout as print_numbers, run as run_numbers
    from circuits.explain.numbers.result import NumbersResult
    from circuits.identify.config import IdentifyConfig
    from circuits.identify.job import run as run_identify
    from circuits.identify.result import IdentifyResult, PerOperation
    from circuits.sft.compare import SFTComparison
    from circuits.sft.config import FinetuneConfig
    from circuits.sft.job import run as run_finetune
    from circuits.sft.result import FinetuneResult
    from circuits.validate.ablation_kinds import AblationComparison
    from circuits.validate.config import KnockoutConfig, TransferSets
    from circuits.validate.cross_model import CrossModelResult
    from circuits.validate.job import print_knockout, print_transfer, run_knockout, run_transfer
    from circuits.validate.knockout import KnockoutResult
    from circuits.validate.transfer import TransferResult, WordProblemHeads

# name -> module of each import above (and the name it has there, where it is imported under another)
REFS, ALIASES = type_checking_exports(__file__)


@dataclass(frozen=True)
class Output:
    """A result kind a job writes: its ``kind`` (the ``circuits.json`` marker's), its class (a name imported above),
    and the anchors of the report sections that draw it (the first is its own; empty: no section draws it)."""

    kind: str
    type: str
    sections: tuple[str, ...] = ()


@dataclass(frozen=True)
class Job:
    """One step that writes results.

    ``name``: the command (``circuits <name>``) or, for a script's job, the script's name; the kind ``run`` returns
    is the same word. ``config``, ``run``, ``printout``, ``register``: names imported above (the config's module
    imports no torch: the CLI builds every parser from it; the run and its printout are imported only when the job
    runs). ``results``: the kinds it writes, the first the one ``run`` returns. ``files``: the names it writes into
    its folder (beside ``config.json`` and the marker), so what a later run may replace is the job's to say.
    ``register(sub)``: for a command with flags of its own, adds its subcommand (else the CLI adds it from the config,
    and the command's description is ``help`` and the config's docstring). ``how``: the command line the report shows
    when the result is missing."""

    name: str
    help: str
    results: tuple[Output, ...]
    files: tuple[str, ...] = ()
    config: str | None = None
    run: str | None = None
    printout: str | None = None
    register: str | None = None
    how: str = ""
    command: bool = True
    progress: bool = True  # the command gets --no-progress

    @property
    def kind(self) -> str | None:
        """The kind ``run`` returns (None for a command that writes no result: report, export)."""
        return self.results[0].kind if self.results else None

    def config_type(self) -> type:
        """The config class, imported now (its module imports no torch)."""
        return load(self.config)

    def runner(self) -> Any:
        """The ``run`` function, imported now (with torch)."""
        return load(self.run)


def where(name: str) -> str:
    """``"module:name"`` of a name the table imports."""
    if name not in REFS:
        raise KeyError(f"{name!r} is not imported by the job table (circuits/jobs.py)")
    return f"{REFS[name]}:{ALIASES.get(name, name)}"


def load(name: str | None) -> Any:
    """The object a name the table imports stands for, imported now."""
    if not name:
        raise ValueError("nothing to import")
    module, _, attr = where(name).partition(":")
    return getattr(importlib.import_module(module), attr)


_PLOTS = tuple(f"figure-{t}.html" for t in ("addition", "subtraction", "multiplication", "division", "all"))

JOBS: tuple[Job, ...] = (
    # Step 1 (Section 4.1): the key heads.
    Job("identify", "find the key heads and MLPs by patching at END (Figure 2)",
        (Output("identify", "IdentifyResult", ("key-heads", "edges", "uncertainty")),),
        ("summary.json", "pairs.jsonl", "sweep.pt", "pooled.json", "heads.html", "edges.pt", "circuit.html"),
        "IdentifyConfig", "run_identify", register="register_identify",
        how="circuits identify --model smollm2 --task all --out results/identify"),
    Job("per_operation", "the key heads of each operation on one colour scale (Figure 15)",
        (Output("per_operation", "PerOperation", ("key-heads",)),), ("data.json", "figure.html", "figure_overlap.html"),
        how="python experiments/fig15_per_operation.py", command=False),
    Job("screen", "attribution screen of every head, MLP and neuron at every position, verified exactly",
        (Output("screen", "ScreenResult", ("screen",)),), ("summary.json", "pairs.jsonl", "screen.pt", "screen.html"),
        "ScreenConfig", "run_screen", "print_screen",
        how="circuits screen --model smollm2 --task addition --verify 20 --out results/screen-addition"),
    Job("positions", "activation patching at every position, exact (information flow)",
        (Output("positions", "PositionResult", ("positions",)),),
        ("summary.json", "pairs.jsonl", "positions.pt", "flow.html"), "PositionConfig", "run_positions", "print_positions",
        how="circuits positions --model smollm2 --task addition --out results/positions-addition"),
    Job("neurons", "every neuron of the key MLPs patched at END, and their knockout",
        (Output("neurons", "NeuronResult", ("neurons",)),), ("summary.json", "pairs.jsonl", "neurons.pt", "figure.html"),
        "NeuronConfig", "run_neurons", "print_neurons",
        how="circuits neurons --model smollm2 --task addition --out results/neurons-addition"),
    Job("heuristics", "the key MLPs' top neurons classified into heuristics over the operand grid, and knocked out by class",
        (Output("heuristics", "HeuristicsResult", ("heuristics",)),),
        ("summary.json", "classes.json", "pairs.jsonl", "grid.jsonl", "heuristics.pt", "figure.html", "knockout.html"),
        "HeuristicsConfig", "run_heuristics", "print_heuristics",
        how="circuits heuristics --model smollm2 --task addition --out results/heuristics-addition"),
    Job("edges", "path-patch every earlier component into chosen receivers at END, on an identify result's pairs",
        (Output("edges", "EdgeResult", ("edges",)),), ("summary.json", "pairs.jsonl", "edges.pt", "circuit.html"),
        "EdgesConfig", "run_edges", "print_edges",
        how="circuits edges --heads-from results/identify/addition --receivers top5 --out results/edges-addition"),
    Job("stability", "Jaccard overlap of key heads across seeds and template forms",
        (Output("stability", "StabilityResult", ("uncertainty",)),), ("data.json", "figure.html"),
        "StabilityConfig", "run_stability", "print_stability",
        how="circuits stability --model smollm2 --out results/stability", progress=False),
    Job("faithfulness", "faithfulness curves (MIB's CPR and CMD) of each ranking's circuits, with seconds",
        (Output("faithfulness", "FaithfulnessResult", ("faithfulness",)),),
        ("summary.json", "pairs.jsonl", "scoring_pairs.jsonl", "faithfulness.pt", "figure.html"),
        "FaithfulnessConfig", "run_faithfulness", "print_faithfulness",
        how="circuits faithfulness --model smollm2 --task addition --out results/faithfulness-addition"),
    Job("carry", "the carry ('1') at END against the units digit at END+1 on single-digit sums: overlap, held-out CMD, "
        "the carry direction, the key MLPs' neurons against threshold and residue rules, each with its null", (Output("carry", "CarryResult", ("carry",)),),
        ("summary.json", "pairs.jsonl", "carry.pt"), "CarryConfig", "run_carry", "print_carry",
        how="circuits carry --model smollm2 --out results/carry"),
    # Step 1b (Figures 3-4, Tables 3-4): validate the key heads by knocking them out.
    Job("knockout", "accuracy after mean-ablating the top-k heads against k random heads (Figure 3)",
        (Output("knockout", "KnockoutResult", ("knockout",)),), ("data.json", "figure.html"),
        "KnockoutConfig", "run_knockout", "print_knockout",
        how="circuits knockout --heads-from results/identify/addition --out results/knockout-addition"),
    Job("transfer", "knock the key heads out on other data sets: SVAMP, sums, decimals, times, MMLU (Figure 4)",
        (Output("transfer", "TransferResult", ("transfer",)),), ("data.json", "figure.html"),
        "TransferSets", "run_transfer", "print_transfer",
        how="circuits transfer --heads-from results/identify/addition --out results/transfer"),
    Job("word_problems", "key heads found on word problems against the template key heads (Table 4)",
        (Output("word_problems", "WordProblemHeads", ("word-problems",)),), ("data.json", "figure.html"),
        how="python experiments/table4_gsm8k.py", command=False),
    Job("ablation_kinds", "the knockout under each ablation kind (mean, zero, resample)",
        (Output("ablation_kinds", "AblationComparison", ("uncertainty",)),), ("data.json", "figure.html", *_PLOTS),
        how="python experiments/fig3_ablation_kinds.py", command=False),
    Job("cross_model", "the paper's claims measured on several models",
        (Output("cross_model", "CrossModelResult", ("cross-model",)),), ("data.json", "figure.html"),
        how="python experiments/cross_model.py", command=False),
    # Step 2 (Section 4.2): explain them.
    Job("attention", "where the key heads look from END, by token role (Figure 5)",
        (Output("attention", "AttentionRoles", ("attention-roles",)),), ("data.json", "figure.html"),
        "RolesConfig", "run_attention", "print_attention",
        how="circuits attention --heads-from results/identify/addition --out results/attention-roles"),
    Job("attention-views", "circuitsvis views of the top-ranked heads' attention on a few prompts (Figures 7, 16)",
        (Output("attention-views", "AttentionViews", ("attention-views",)),), ("data.json", "figure.html"),
        "ViewsConfig", "run_attention_views", "print_attention_views",
        how="circuits attention-views --heads-from results/identify/addition --out results/attention-views"),
    Job("lens", "the MLPs through the logit lens: operands in, answer out (Figure 6)",
        (Output("lens", "LogitLens", ("logit-lens",)),), ("data.json", "figure.html", "figure_6c.html"),
        "LensConfig", "run_lens", "print_lens",
        how="circuits lens --heads-from results/identify/addition --out results/logit-lens"),
    Job("numbers", "the key components over the number line (Fourier periods) and the neurons of each answer digit",
        (Output("numbers", "NumbersResult", ("numbers",)),), ("summary.json", "numbers.pt", "figure.html", "digits.html"),
        "NumbersConfig", "run_numbers", "print_numbers",
        how="circuits numbers --heads-from results/identify/addition --out results/numbers-addition"),
    # Step 3 (Section 4.3): Precise SFT, and the benchmarks it is measured on.
    Job("finetune", "Precise SFT of key heads/MLPs, or full SFT (Section 4.3, 5.3)",
        (Output("finetune", "FinetuneResult", ("precise-sft",)),),
        ("result.json", "checkpoint.pt", "checkpoint", "delta.pt"), "FinetuneConfig", "run_finetune",
        register="register_finetune", how="circuits finetune --heads-from results/identify/addition --out results/sft"),
    Job("sft_table", "base model, full fine-tuning and Precise SFT on math and generic benchmarks (Table 1)",
        (Output("sft_table", "SFTComparison", ("precise-sft",)),), ("data.json", "table.md", "rows", "runs"),
        how="python experiments/table1_precise_sft.py", command=False),
    Job("sft-study", "does choosing the circuit matter? Precise SFT against random heads, LoRA and full SFT, with seeds",
        (Output("sft-study", "SFTStudyResult", ("precise-sft",)),), ("data.json", "table.md", "runs"),
        "StudyConfig", "run_sft_study", "print_sft_study",
        how="circuits sft-study --heads-from results/identify/addition --out results/sft-study"),
    Job("evaluate", "math and generic benchmarks through lm-evaluation-harness",
        (Output("evaluate", "EvalResult", ("precise-sft",)),), ("result.json", "circuits_metrics.py"),
        "EvalConfig", "run_evaluate", register="register_evaluate",
        how="circuits evaluate --model smollm2 --out results/eval-base", progress=False),
    # Commands that write no result of their own.
    Job("export", "write a fine-tuned model (base + delta.pt) as a Hugging Face checkpoint", (),
        register="register_export", progress=False),
    Job("mib", "write an identify or edges result's scores as MIB's graph file (sizes read from the model)", (),
        register="register_mib", progress=False),
    Job("report", "one shareable, offline HTML page from saved results (no model run)", (),
        register="register_report", progress=False),
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
