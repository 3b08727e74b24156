"""circuits: find, explain and precisely fine-tune the parts of a language model that do arithmetic.

The method of Zhang et al., ICML 2024, on TransformerLens, one subpackage per step: :mod:`circuits.data`
(prompt pairs), :mod:`circuits.identify` (patching at END, key heads), :mod:`circuits.validate` (knockout),
:mod:`circuits.explain` (attention roles, logit lens), :mod:`circuits.sft` (Precise SFT),
:mod:`circuits.evaluation` (benchmarks), :mod:`circuits.viz` (figures and the report). For a notebook::

    import circuits as cc
    cc.use_threads()                               # the CLI's thread set-up (before torch is imported)
    model = cc.load_model("smollm2")
    pairs = cc.build_pairs(model, "addition", n_pairs=32)
    result = cc.sweep(model, pairs)                # path patching of every head and MLP at END
    print(result.key_heads("fraction>=0.05"))      # [(Head(layer=20, head=8), 0.18), ...]
    cc.head_heatmap(*result.effects("fraction"), metric="fraction").show()

Names are imported on first use, so ``import circuits`` is fast.
"""

from __future__ import annotations

import sys
from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING

from circuits.lazy import lazy_exports

if "torch" not in sys.modules:  # idle OpenMP threads sleep (a set policy is kept); see circuits.threads
    from circuits.threads import prefer_passive_waiting

    prefer_passive_waiting()

try:  # one source: pyproject.toml's version, as the installed package records it
    __version__ = version("circuits")
except PackageNotFoundError:  # a checkout on sys.path that was never installed
    __version__ = "0+unknown"

# name -> module it lives in
_EXPORTS: dict[str, str] = {
    # the vocabulary
    "Head": "circuits.types", "Component": "circuits.types", "Mode": "circuits.types", "Ablation": "circuits.types",
    # models
    "load_model": "circuits.models.loading",
    # data
    "build_pairs": "circuits.data.pairs", "make_pair": "circuits.data.pairs", "PromptPair": "circuits.data.pairs",
    "PairConfig": "circuits.data.pairs",
    # identify
    "sweep": "circuits.patching.engine", "prepare": "circuits.patching.engine", "IdentifyConfig": "circuits.identify.config",
    "IdentifyResult": "circuits.identify.result", "KeyRule": "circuits.patching.ranking", "Metric": "circuits.patching.metrics",
    "logits_metric": "circuits.patching.metrics", "METRICS": "circuits.patching.metrics",
    # beyond heads at END (docs/beyond.md)
    "Neuron": "circuits.types", "Receiver": "circuits.types", "attribute": "circuits.patching.attribution",
    "screen": "circuits.beyond.screen.job", "sweep_positions": "circuits.patching.positions",
    "sweep_neurons": "circuits.patching.neurons", "sweep_edges": "circuits.patching.edges",
    "faithfulness": "circuits.beyond.faithfulness.job", "FaithfulnessConfig": "circuits.beyond.faithfulness.config",
    # what every engine returns, and every engine (result.scores(); cc.ENGINES["eap-ig"].run(model, pairs))
    "Scores": "circuits.patching.scores", "ENGINES": "circuits.patching.registry",
    # validate
    "knockout": "circuits.validate.knockout", "knockout_curve": "circuits.validate.knockout",
    # explain
    "attention_roles": "circuits.explain.attention", "attention_html": "circuits.explain.attention",
    "logit_lens": "circuits.explain.logit_lens",
    # for TransformerLens users (docs/for-transformerlens-users.md)
    "patch": "circuits.patching.patch", "PatchResult": "circuits.patching.patch",
    "direct_logit_attribution": "circuits.explain.dla", "residual_lens": "circuits.explain.residual_lens",
    "head_circuits": "circuits.explain.head_circuits", "ov_figure": "circuits.viz.head_circuits",
    "replacement_values": "circuits.validate.knockout", "use_threads": "circuits.threads",
    # fine-tune and evaluate
    "finetune": "circuits.sft.train", "FinetuneConfig": "circuits.sft.train", "apply_delta": "circuits.sft.delta",
    "export_model": "circuits.sft.export",
    "evaluate": "circuits.evaluation.tasks", "EvalConfig": "circuits.evaluation.tasks",
    # figures, results, report
    "head_heatmap": "circuits.viz.figures", "load_result": "circuits.results", "report": "circuits.viz.report",
}
_ALIASES = {"report": "write_report"}

__all__ = sorted(_EXPORTS)


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, _ALIASES)


if TYPE_CHECKING:  # for editors and type checkers
    from circuits.data.pairs import PairConfig, PromptPair, build_pairs, make_pair
    from circuits.evaluation.tasks import EvalConfig, evaluate
    from circuits.explain.attention import attention_html, attention_roles
    from circuits.explain.dla import direct_logit_attribution
    from circuits.explain.head_circuits import head_circuits
    from circuits.explain.logit_lens import logit_lens
    from circuits.explain.residual_lens import residual_lens
    from circuits.patching.patch import PatchResult, patch
    from circuits.threads import use_threads
    from circuits.validate.knockout import replacement_values
    from circuits.viz.head_circuits import ov_figure
    from circuits.sft.delta import apply_delta
    from circuits.sft.export import export_model
    from circuits.sft.train import FinetuneConfig, finetune
    from circuits.identify.config import IdentifyConfig
    from circuits.patching.attribution import attribute
    from circuits.patching.edges import sweep_edges
    from circuits.patching.engine import prepare, sweep
    from circuits.patching.neurons import sweep_neurons
    from circuits.patching.positions import sweep_positions
    from circuits.beyond.faithfulness.config import FaithfulnessConfig
    from circuits.beyond.faithfulness.job import faithfulness
    from circuits.beyond.screen.job import screen
    from circuits.patching.registry import ENGINES
    from circuits.patching.scores import Scores
    from circuits.patching.metrics import METRICS, Metric, logits_metric
    from circuits.identify.result import IdentifyResult
    from circuits.patching.ranking import KeyRule
    from circuits.models.loading import load_model
    from circuits.results import load_result
    from circuits.types import Ablation, Component, Head, Mode, Neuron, Receiver
    from circuits.validate.knockout import knockout, knockout_curve
    from circuits.viz.figures import head_heatmap
    from circuits.viz.report import write_report as report
