"""The reconcile container's heap between passes: what lives on is kept out of the cyclic collector's way.

A warm reconcile container keeps the cluster between passes (watch mode's informer caches, the parse cache of
poll mode, the disruption pass's node views): objects in proportion to the cluster's pods and nodes. CPython's
cyclic collector traverses every object it tracks at each full collection, and starts one whenever the objects
that survived into its oldest generation have grown by a quarter (the ``gc`` module docs, "Garbage collector
design" in CPython's internals docs), so passes pay, now and then, a traversal of the whole cluster.

:func:`settle` ends each pass: a full collection, then ``gc.freeze()``, which moves every object alive to the
permanent generation no collection traverses. Once settled, the full collection at a pass's end traverses only
what the pass left behind. Frozen objects are still freed by reference counting when they are dropped; only
reference cycles among them wait. So once the objects frozen since everything was last examined outnumber those
frozen by that examination, :func:`settle` unfreezes and collects everything once, which bounds what such cycles
can hold to the live heap.

The counts are taken from the oldest generation just before it is frozen (``gc.get_objects(generation=2)``: only
what this pass left alive), never from ``gc.get_freeze_count()``, which walks the whole permanent generation.
"""

from __future__ import annotations

import gc

__all__ = ["REEXAMINE_GROWTH", "settle"]

REEXAMINE_GROWTH = 2.0
"""Examine every object again (``gc.unfreeze()``, a full collection) once the objects frozen since the last such
examination, with those it froze, number this many times what it froze."""

_frozen: list[int] = []
"""Objects frozen by the last examination of every object, then objects frozen since (empty before the first)."""


def settle() -> int:
    """Collect what the pass left behind and freeze the survivors (see the module docstring); returns the number
    of objects this call froze. The first call, and any call once the objects frozen since the last examination
    reach ``REEXAMINE_GROWTH - 1`` times what it froze, examines every object (cost in proportion to the heap);
    the others only the objects allocated since the previous call and still alive. Never raises."""
    if _frozen and sum(_frozen) >= REEXAMINE_GROWTH * max(1, _frozen[0]):
        gc.unfreeze()
        _frozen.clear()
    gc.collect()
    survivors = len(gc.get_objects(generation=2))
    gc.freeze()
    if _frozen:
        _frozen[1] += survivors
    else:
        _frozen.extend((survivors, 0))
    return survivors
