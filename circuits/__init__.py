"""circuits: find, explain and precisely fine-tune the parts of a language model that do arithmetic.

The method of Zhang et al., ICML 2024, on TransformerLens, one subpackage per step: :mod:`circuits.data`
(prompt pairs), :mod:`circuits.identify` (patching at END, key heads), :mod:`circuits.validate` (knockout),
:mod:`circuits.explain` (attention roles, logit lens), :mod:`circuits.sft` (Precise SFT),
:mod:`circuits.evaluation` (benchmarks), :mod:`circuits.viz` (figures and the report). For a notebook::

    import circuits as cc
    cc.use_threads()                               # the CLI's thread set-up (before torch is imported)
    model = cc.load_model("smollm2")
    pairs = cc.build_pairs(model, "addition", n_pairs=32)
    scores = cc.sweep(model, pairs).scores("fraction")  # path patching of every head and MLP at END, as Scores
    print(scores.key("fraction>=0.05"))            # [(Head(layer=20, head=8), 0.18), ...]
    cc.head_heatmap(scores.heads, scores.mlps).show()

Names are imported on first use, so ``import circuits`` is fast.
"""

from __future__ import annotations

import sys

# The console script (argv[0] "circuits"), or ``python -m circuits`` (argv[0] is "-m" while Python imports the
# package that holds the module it runs): Ctrl-C while the command line imports is one line.
if sys.argv and (sys.argv[0].rsplit("/", 1)[-1] == "circuits" or sys.argv[0] == "-m"):
    from circuits._startup import mark_start, quiet_interrupts

    mark_start()
    quiet_interrupts()

from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING

from circuits.lazy import lazy_exports, type_checking_exports

if "torch" not in sys.modules:  # idle OpenMP threads sleep (a set policy is kept); see circuits.threads
    from circuits.threads import prefer_passive_waiting

    prefer_passive_waiting()

try:  # one source: pyproject.toml's version, as the installed package records it
    __version__ = version("circuits")
except PackageNotFoundError:  # a checkout on sys.path that was never installed
    __version__ = "0+unknown"

# The façade's names are the TYPE_CHECKING imports below (what editors see), grouped by step; the lazy table
# (name -> module, imported on first use) is read from that block, so each name is written once.
_EXPORTS, _ALIASES = type_checking_exports(__file__)

__all__ = sorted(_EXPORTS)


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, _ALIASES)


if TYPE_CHECKING:  # the façade's one list of names (editors and type checkers read it; so does the lazy table)
    # the vocabulary
    from circuits.types import Ablation, Component, Head, Mode
    # models
    from circuits.models.loading import load_model
    # data
    from circuits.data.pairs import PairConfig, PromptPair, build_pairs, make_pair
    # identify
    from circuits.patching.engines.end_sweep import prepare, sweep
    from circuits.identify.config import IdentifyConfig
    from circuits.identify.result import IdentifyResult
    from circuits.identify.counterfactuals import compare_counterfactuals
    from circuits.patching.core.ranking import KeyRule
    from circuits.patching.core.metrics import METRICS, Metric, logits_metric
    # beyond heads at END (docs/beyond.md)
    from circuits.types import Neuron, Receiver
    from circuits.patching.engines.attribution import attribute
    from circuits.beyond.screen.job import screen
    from circuits.patching.engines.position_sweep import sweep_positions
    from circuits.patching.engines.neuron_sweep import sweep_neurons
    from circuits.patching.engines.edge_sweep import sweep_edges
    from circuits.beyond.faithfulness.job import faithfulness
    from circuits.beyond.faithfulness.config import FaithfulnessConfig
    from circuits.beyond.heuristics.job import heuristics
    from circuits.beyond.heuristics.config import HeuristicsConfig
    # what every engine returns, and every engine (result.scores(); cc.ENGINES["eap-ig"].run(model, pairs))
    from circuits.patching.core.scores import Scores
    from circuits.patching.engines.registry import ENGINES
    # validate
    from circuits.validate.knockout import knockout, knockout_curve
    # explain
    from circuits.explain.attention import attention_html, attention_roles
    from circuits.explain.logit_lens import logit_lens
    from circuits.explain.fourier import fourier
    from circuits.explain.digits import digits
    from circuits.explain.numbers.job import numbers
    # for TransformerLens users (docs/for-transformerlens-users.md)
    from circuits.patching.interchange.tl_patch import PatchResult, patch
    from circuits.explain.dla import direct_logit_attribution
    from circuits.explain.residual_lens import residual_lens
    from circuits.explain.head_circuits import head_circuits
    from circuits.viz.head_circuits import ov_figure
    from circuits.validate.knockout import replacement_values
    from circuits.threads import use_threads
    # fine-tune and evaluate
    from circuits.sft.train import FinetuneConfig, finetune
    from circuits.sft.delta import apply_delta
    from circuits.sft.export import export_model
    from circuits.evaluation.tasks import EvalConfig, evaluate
    # figures, results, report
    from circuits.viz.figures import head_heatmap
    from circuits.results import load_result
    from circuits.viz.report import write_report as report
