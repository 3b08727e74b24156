"""Loading models as TransformerLens ``HookedTransformer``s (TransformerLens 3.9) or ``TransformerBridge``s
(TransformerLens 4.3+; the installed line's registered backend loads them: :mod:`circuits.models.backend`), and forward passes that read only
the END position.

:mod:`circuits.models.loading` is the only module that talks to TransformerLens's loading internals;
:mod:`circuits.models.backend` is the seam for everything else of TransformerLens that the engines, validation,
explanations and evaluation use (hook names, key/value cache, attention pieces, devices of a spread model);
:mod:`circuits.models.embedded` finds the embedded models' GGUF files inside their wheels;
:mod:`circuits.models.forward` runs shared few-shot prefixes once and batches by attention cost.
"""

from circuits.versions import check_transformer_lens

check_transformer_lens()  # a TransformerLens no backend supports: one line (docs/backends.md), before it is imported

from circuits.threads import no_empty_compile_cache
from circuits.versions import backend_line

# The backends the installed TransformerLens runs, each a class registered in circuits.models.backend.BACKENDS: 3.9's
# HookedTransformer and its own TransformerBridge (fine-tuning's parity tests), or 4.x's Bridge. Importing
# TransformerLens leaves no empty torchinductor_<user> folder in $TMPDIR (issue 41, LITTER).
with no_empty_compile_cache():
    if backend_line() == 3:
        import circuits.models._hooked  # noqa: F401
    import circuits.models._bridge  # noqa: F401

from circuits.models.forward import end_residuals, pad_token_id, unembed_end
from circuits.models.embedded import EMBEDDED, embedded_model
from circuits.models.loading import DTYPES, ModelLoadError, accepted_inputs, load_hf_reference, load_model, resolve_dtype

__all__ = ["DTYPES", "EMBEDDED", "ModelLoadError", "accepted_inputs", "embedded_model", "end_residuals",
           "load_hf_reference", "load_model", "pad_token_id", "resolve_dtype", "unembed_end"]
