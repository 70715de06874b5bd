"""The emulator's object store: thread-safe, versioned, watchable, shared by HTTP and in-process users.

Objects are plain JSON dicts kept as immutable snapshots (every write stores a new dict), so the
watch history (kept per resource) can hold them without copying. Every successful write bumps one global
``resourceVersion`` counter and emits exactly one :class:`WatchEvent`, which makes watch resumption
from any retained version exact. Readers get detached copies.

Write semantics follow the API server's generic registry:

* create: ``generateName``, ``uid``, ``creationTimestamp``, ``generation: 1``; 409 if the name is
  taken; pods without a status get ``phase: Pending``; custom resources drop ``status``;
* update/patch: 409 on a stale ``metadata.resourceVersion``; a main-resource write keeps the stored
  ``status`` (status subresource) and a status write changes only ``status``; ``generation`` grows
  when anything outside ``metadata``/``status`` changes; no-op writes do not bump the version;
* delete: with finalizers, set ``deletionTimestamp`` and keep the object until an update empties
  them; with ``graceful_pod_deletion``, a bound pod is only marked terminating (``deletionTimestamp``
  = now + grace) until deleted again with grace 0 or :meth:`Store.finish_graceful_deletions`.

Eviction (PodDisruptionBudgets, see :mod:`nodesmith.sim.kube.disruption`) and binding are in
:mod:`nodesmith.sim.kube.pods`; the store's methods delegate to them.

The store lives by concern: :mod:`.store` (the :class:`Store`: construction, reads, ``apply``, pod
subresources, watches), :mod:`.writes` (create, update, patch), :mod:`.deletes` (deletion,
finalizers, graceful pods) and :mod:`.state` (the state and its primitives). This package
re-exports the public names.
"""

from __future__ import annotations

from nodesmith.sim.kube.events import ListResult, Subscription, WatchEvent
from nodesmith.sim.kube.store.store import Store

__all__ = ["ListResult", "Store", "Subscription", "WatchEvent"]
