"""How results show in a notebook cell: a result whose natural display is a figure shows that figure (through
plotly's own mime bundle, so ``pio.renderers.default`` decides: interactive, a PNG, or both); nothing prints
megabytes of tensors or HTML as text. (A pair set's short table is its own: :class:`circuits.data.pairs.PairSet`.)"""

from __future__ import annotations

from typing import Any


def figure_bundle(obj: Any, include: Any = None, exclude: Any = None, **kwargs: Any) -> dict[str, Any]:
    """``obj.figure()``'s notebook display (for ``_repr_mimebundle_``), with a one-line text form."""
    bundle = obj.figure()._repr_mimebundle_(include, exclude, **kwargs)
    bundle.setdefault("text/plain", short_repr(obj))
    return bundle


def short_repr(obj: Any) -> str:
    """``<Kind: task, n pairs>``: one line, whatever the object holds."""
    bits = [str(v) for v in (getattr(obj, "task", None), getattr(obj, "kind", None)) if v]
    n = getattr(obj, "n_pairs", None) or (len(obj.pairs) if hasattr(obj, "pairs") else None)
    return f"<{type(obj).__name__}{': ' + ', '.join(bits) if bits else ''}{f', {n} pairs' if n else ''}>"


class ShowsFigure:
    """For a result whose natural display is its ``figure()``: a notebook cell shows that figure (plotly's own mime
    bundle, :func:`figure_bundle`), with a one-line text form. A result class lists it before ``Result``."""

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None, **kwargs: Any) -> dict[str, Any]:
        return figure_bundle(self, include, exclude, **kwargs)
