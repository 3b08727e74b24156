"""Step 0, the data: the paper's templates, reference/counterfactual prompt pairs, and the benchmark readers.

- :mod:`~circuits.data.templates`: the 36 + 12 + 2 templates of Figures 8 and 10 and Table 3, as data.
- :mod:`~circuits.data.pairs`: :class:`PromptPair`, :func:`build_pairs` (sample, check, filter), :func:`make_pair`.
- :mod:`~circuits.data.word_problems`: counterfactuals of word problems (Appendix E).
- :mod:`~circuits.data.arithmetic`: arithmetic prompts shared by fine-tuning and evaluation.
- :mod:`~circuits.data.benchmarks`: GSM8K, SVAMP, AddSub, SingleEq, MMLU, CommonsenseQA from ``../shared/data``.
"""

from circuits.data.pairs import PairBatch, PairConfig, PairSet, PromptError, PromptPair, as_batch, build_pairs, make_pair
from circuits.data.templates import OPERATIONS, Template, templates_for

__all__ = ["OPERATIONS", "PairBatch", "PairConfig", "PairSet", "PromptError", "PromptPair", "Template", "as_batch",
           "build_pairs", "make_pair", "templates_for"]
