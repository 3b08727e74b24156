"""How results show in a notebook cell: a result whose natural display is a figure shows that figure (through
plotly's own mime bundle, so ``pio.renderers.default`` decides: interactive, a PNG, or both); a pair set shows a
short table; nothing prints megabytes of tensors or HTML as text."""

from __future__ import annotations

import html
from collections.abc import Sequence
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


def pairs_repr(pairs: Sequence[Any], accuracy: float | None = None) -> str:
    """One line for a set of prompt pairs (never their token ids)."""
    ops = sorted({getattr(p, "operation", "?") for p in pairs})
    acc = f", accuracy before filtering {accuracy:.0%}" if accuracy is not None else ""
    return f"<PairSet: {len(pairs)} pairs of {', '.join(ops) or 'nothing'}{acc}>"


def pairs_html(pairs: Sequence[Any], accuracy: float | None = None, n: int = 5) -> str:
    """A short table of the first ``n`` pairs: the end of each prompt (newlines kept), the answer, the template."""
    rows = "".join(
        "<tr><td style='text-align:left;white-space:pre-wrap'>{}</td><td style='text-align:left;white-space:pre-wrap'>"
        "{}</td><td>{}</td></tr>".format(html.escape("…" + p.reference[-40:]), html.escape("…" + p.counterfactual[-40:]),
                                         html.escape(getattr(p, "template_id", "")))
        for p in list(pairs)[:n])
    more = f"<p>… and {len(pairs) - n} more</p>" if len(pairs) > n else ""
    return (f"<p><b>{html.escape(pairs_repr(pairs, accuracy))}</b></p><table><thead><tr><th>reference (end)</th>"
            f"<th>counterfactual (end)</th><th>template</th></tr></thead><tbody>{rows}</tbody></table>{more}")
