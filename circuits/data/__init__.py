"""Step 0, the data: the paper's templates, reference/counterfactual prompt pairs, and the benchmark readers.

- :mod:`~circuits.data.templates`: the 36 + 12 + 2 templates of Figures 8 and 10 and Table 3, as data.
- :mod:`~circuits.data.source`: :class:`PairSpec` and :class:`PairSource`, the model and pair fields of every job.
- :mod:`~circuits.data.pairs`: :class:`PromptPair`, :func:`build_pairs` (sample, check, filter), :func:`make_pair`.
- :mod:`~circuits.data.word_problems`: counterfactuals of word problems (Appendix E).
- :mod:`~circuits.data.arithmetic`: arithmetic prompts shared by fine-tuning and evaluation.
- :mod:`~circuits.data.benchmarks`: GSM8K, SVAMP, AddSub, SingleEq, MMLU, CommonsenseQA from ``../shared/data``.

Names are imported on first use, so a config module can import :mod:`circuits.data.source` without torch.
"""

from __future__ import annotations

from circuits.lazy import lazy_exports

_EXPORTS = {"PairConfig": "circuits.data.pair_config"}
_EXPORTS |= {name: "circuits.data.pairs" for name in ("PairBatch", "PairSet", "PromptError", "PromptPair",
                                                      "as_batch", "build_pairs", "make_pair")}
_EXPORTS |= {name: "circuits.data.templates" for name in ("OPERATIONS", "Template", "templates_for")}

__all__ = sorted(_EXPORTS)


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
