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

Within a pass, :func:`tune` keeps the collector from running full collections again and again while the pass builds
what it keeps: a container's first listing parses every pod, Node and NodeClaim, and a disruption pass builds a
view of every node. With CPython's default youngest threshold (700 allocations), a full collection comes every
70,000 net allocations once the oldest generation has grown by a quarter, and each traverses all it has not
frozen: during a first pass, that is most of the heap again and again. A higher youngest threshold spaces the
collections out; garbage that only the cyclic collector frees (reference cycles) waits for a young collection,
at most :data:`YOUNG_THRESHOLD` allocations later.
"""

from __future__ import annotations

import gc

__all__ = ["REEXAMINE_GROWTH", "YOUNG_THRESHOLD", "settle", "tune"]

REEXAMINE_GROWTH = 2.0
"""Examine every object again (``gc.unfreeze()``, a full collection) once the objects frozen since the last such
examination, with those it froze, number this many times what it froze."""

YOUNG_THRESHOLD = 20_000
"""The collector's youngest-generation threshold in the reconcile container (``gc.set_threshold``'s first value:
container objects allocated, less those freed, between young collections; CPython's default is 700)."""

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


def tune() -> None:
    """Raise the youngest generation's threshold to :data:`YOUNG_THRESHOLD` (see the module docstring), keeping the
    older generations' thresholds; a threshold already higher, or 0 (collection turned off), is left as it is.
    Idempotent; never raises."""
    young, middle, old = gc.get_threshold()
    if 0 < young < YOUNG_THRESHOLD:
        gc.set_threshold(YOUNG_THRESHOLD, middle, old)
