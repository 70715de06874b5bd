"""The reconcile container's heap between passes: what lives on is kept out of the cyclic collector's way.

A warm reconcile container keeps the cluster between passes (watch mode's informer caches, the parse cache of
poll mode, the disruption pass's node views): objects in proportion to the cluster's pods and nodes. CPython's
cyclic collector traverses every object it tracks at each full collection, and starts one whenever the objects
that survived into its oldest generation have grown by a quarter (the ``gc`` module docs, "Garbage collector
design" in CPython's internals docs), so passes pay, now and then, a traversal of the whole cluster.

:func:`settle` ends each pass: a full collection, then ``gc.freeze()``, which moves every object alive to the
permanent generation no collection traverses. Once settled, the full collection at a pass's end traverses only
what the pass left behind. Frozen objects are still freed by reference counting when they are dropped; only
reference cycles among them wait. So when the frozen count has doubled since everything was last examined,
:func:`settle` unfreezes and collects everything once, which bounds what such cycles can hold to the live heap.
"""

from __future__ import annotations

import gc

__all__ = ["REEXAMINE_GROWTH", "settle"]

REEXAMINE_GROWTH = 2.0
"""Examine every object again (``gc.unfreeze()``, a full collection) once the frozen count has grown this many
times since the last such examination."""

_examined: list[int] = []
"""The frozen count right after the last examination of every object (empty before the first)."""


def settle() -> int:
    """Collect what the pass left behind and freeze the survivors (see the module docstring); returns the number
    of objects frozen now (``gc.get_freeze_count()``). The first call, and any call after the frozen count grew
    :data:`REEXAMINE_GROWTH` times, examines every object (cost in proportion to the heap); the others only the
    objects allocated since the previous call and still alive. Never raises."""
    if _examined and gc.get_freeze_count() >= REEXAMINE_GROWTH * max(1, _examined[0]):
        gc.unfreeze()
        _examined.clear()
    gc.collect()
    gc.freeze()
    frozen = gc.get_freeze_count()
    if not _examined:
        _examined.append(frozen)
    return frozen
