"""Step 3, fine-tune (Section 4.3, 5.3, Tables 1, 2, 5): Precise SFT of the key heads, and full SFT.

- :mod:`~circuits.sft.config`: :class:`FinetuneConfig` and :class:`ExportConfig` (no torch).
- :mod:`~circuits.sft.job`: ``run(config, out)``, the ``circuits finetune`` job; the heads from an identify result.
- :mod:`~circuits.sft.plan`: which rows of which tensors a run tunes, and the per-head gradient masks.
- :mod:`~circuits.sft.train`: the training loop (AdamW on tuned rows only; resumable checkpoints).
- :mod:`~circuits.sft.delta`: ``delta.pt``, the tuned slices that reproduce the trained model.
- :mod:`~circuits.sft.data`: the training mixture, tokenized and batched.
- :mod:`~circuits.sft.compare`: Tables 1 and 2, variants trained from one base and evaluated.
- :mod:`~circuits.sft.export`: a tuned model written out as a Hugging Face checkpoint (``circuits export``).

Names are imported on first use, so the configs are importable without torch.
"""

from __future__ import annotations

from circuits.lazy import lazy_exports

_EXPORTS: dict[str, str] = {
    **dict.fromkeys(("apply_delta", "extract_delta"), "circuits.sft.delta"),
    **dict.fromkeys(("ExportConfig", "FinetuneConfig"), "circuits.sft.config"),
    **dict.fromkeys(("export_model",), "circuits.sft.export"),
    **dict.fromkeys(("TuningPlan", "full_plan", "plan_tuning"), "circuits.sft.plan"),
    **dict.fromkeys(("FinetuneResult",), "circuits.sft.result"),
    **dict.fromkeys(("TrainingDiverged", "finetune", "plan_for"), "circuits.sft.train"),
    **dict.fromkeys(("run",), "circuits.sft.job"),
}

__all__ = sorted(_EXPORTS)


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
