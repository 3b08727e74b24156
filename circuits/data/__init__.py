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

from typing import TYPE_CHECKING

from circuits.lazy import lazy_package

if TYPE_CHECKING:  # the package's names (editors read them; circuits.lazy.lazy_package makes the lazy table of them)
    from circuits.data.pair_config import PairConfig
    from circuits.data.pairs import PairBatch, PairSet, PromptError, PromptPair, as_batch, build_pairs, make_pair
    from circuits.data.templates import OPERATIONS, Template, templates_for

__getattr__, __dir__, __all__ = lazy_package(__name__, __file__)
