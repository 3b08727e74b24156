"""Step 3, fine-tune (Section 4.3, 5.3, Tables 1, 2, 5): Precise SFT of the key heads, and full SFT.

- :mod:`~circuits.sft.plan`: which rows of which tensors a run tunes, and the per-head gradient masks.
- :mod:`~circuits.sft.train`: the training loop (AdamW on tuned rows only; resumable checkpoints).
- :mod:`~circuits.sft.delta`: ``delta.pt``, the tuned slices that reproduce the trained model.
- :mod:`~circuits.sft.data`: the training mixture, tokenized and batched.
- :mod:`~circuits.sft.compare`: Tables 1 and 2, variants trained from one base and evaluated.
- :mod:`~circuits.sft.export`: a tuned model written out as a Hugging Face checkpoint (``circuits export``).
"""

from circuits.sft.delta import apply_delta, extract_delta
from circuits.sft.export import ExportConfig, export_model
from circuits.sft.plan import TuningPlan, full_plan, plan_tuning
from circuits.sft.result import FinetuneResult
from circuits.sft.train import FinetuneConfig, TrainingDiverged, finetune, plan_for

__all__ = ["ExportConfig", "FinetuneConfig", "FinetuneResult", "TrainingDiverged", "TuningPlan", "apply_delta",
           "export_model", "extract_delta", "finetune", "full_plan", "plan_for", "plan_tuning"]
