"""Step 3, fine-tune (Section 4.3, 5.3, Tables 1, 2, 5): Precise SFT of the key heads, and full SFT.

- :mod:`~circuits.sft.config`: :class:`FinetuneConfig` and :class:`ExportConfig` (no torch).
- :mod:`~circuits.sft.job`: ``run(config, out)``, the ``circuits finetune`` job; the heads from an identify result.
- :mod:`~circuits.sft.plan`: which rows of which tensors a run tunes, and the per-head gradient masks.
- :mod:`~circuits.sft.train`: the training loop (AdamW on tuned rows only; resumable checkpoints).
- :mod:`~circuits.sft.delta`: ``delta.pt``, the tuned slices that reproduce the trained model.
- :mod:`~circuits.sft.data`: the training mixture, tokenized and batched.
- :mod:`~circuits.sft.arms`: the Precise SFT study's random heads and LoRA (peft) arm (the study:
  :mod:`circuits.evaluation.study`).
- :mod:`~circuits.sft.compare`: Tables 1 and 2, variants trained from one base and evaluated.
- :mod:`~circuits.sft.export`: a tuned model written out as a Hugging Face checkpoint (``circuits export``).

Names are imported on first use, so the configs are importable without torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from circuits.lazy import lazy_package

if TYPE_CHECKING:  # the package's names (editors read them; circuits.lazy.lazy_package makes the lazy table of them)
    from circuits.sft.config import ExportConfig, FinetuneConfig
    from circuits.sft.delta import apply_delta, extract_delta
    from circuits.sft.export import export_model
    from circuits.sft.job import run
    from circuits.sft.plan import TuningPlan, full_plan, plan_tuning
    from circuits.sft.result import FinetuneResult
    from circuits.sft.train import TrainingDiverged, finetune, plan_for

__getattr__, __dir__, __all__ = lazy_package(__name__, __file__)
