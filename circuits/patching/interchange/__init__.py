"""Other tools' formats and words: MIB's graph JSON (:mod:`~circuits.patching.interchange.mib`, read and written
from :class:`~circuits.patching.core.scores.Scores`) and activation patching in TransformerLens's words
(:mod:`~circuits.patching.interchange.tl_patch`: ``patch(model, clean, corrupted, metric, direction=...)``)."""
