"""Which components edges go into: ``--receivers`` as given, or ``topK`` of an identify result. The edges are
measured inside identify (``circuits identify --receivers``), so the resolution lives there
(:mod:`circuits.identify.edges`); it is named here too, where the edge step's users look for it."""

from circuits.identify.edges import resolve_receivers

__all__ = ["resolve_receivers"]
