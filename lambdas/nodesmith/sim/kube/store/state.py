"""The store's state and the primitives every operation builds on.

:class:`_Entry` is one stored object (an immutable JSON snapshot with its serialised form cached);
:class:`StoreState` declares the state :class:`~nodesmith.sim.kube.store.Store` keeps (objects
by resource and key, the global ``resourceVersion``, the watch history and subscriptions) and holds
the primitives: resource lookup, keys, detached copies, version bumps, event emission, selection.
"""

from __future__ import annotations

import bisect
import json
from collections import deque
from typing import TYPE_CHECKING, Any

from nodesmith.sim.kube import errors
from nodesmith.sim.kube.disruption import controller_uid
from nodesmith.sim.kube.events import WatchEvent
from nodesmith.sim.kube.listing import select
from nodesmith.sim.kube.selectors import parse_field_selector

if TYPE_CHECKING:
    import builtins
    import random
    import threading
    from collections.abc import Callable

    from nodesmith.sim.kube.events import Subscription
    from nodesmith.sim.kube.registry import Registry, ResourceType

__all__ = ["StoreState"]


class _Entry:
    __slots__ = ("obj", "raw")

    def __init__(self, obj: dict[str, Any]) -> None:
        self.obj = obj
        self.raw: bytes | None = None

    def json(self) -> bytes:
        if self.raw is None:
            self.raw = json.dumps(self.obj, separators=(",", ":")).encode()
        return self.raw


class StoreState:
    """The state of :class:`~nodesmith.sim.kube.store.Store` and its primitives (a base class; not used alone).

    The attributes are set by ``Store.__init__``.
    """

    registry: Registry
    clock: Callable[[], float]
    graceful_pod_deletion: bool
    not_ready_toleration_seconds: int
    unreachable_toleration_seconds: int
    condition: threading.Condition
    closed: bool
    _rng: random.Random
    _rv: int
    _objects: dict[str, dict[tuple[str, str], _Entry]]
    _history: dict[str, deque[WatchEvent]]
    _history_size: int
    _history_dropped: set[str]
    _subs: builtins.list[Subscription]
    _order: dict[str, builtins.list[tuple[str, str]]]
    _pods_by_node: dict[str, set[tuple[str, str]]]
    """Pod keys by ``spec.nodeName`` ("" for unbound pods), kept by :meth:`_emit`: the apiserver's
    watch cache indexes pods by node the same way, so ``fieldSelector=spec.nodeName=X`` (a kubelet's,
    a drain's, the scheduler's list of unbound pods) does not scan every pod."""
    _pods_by_label: dict[tuple[str, str, str], set[tuple[str, str]]]
    """Pod keys by ``(namespace, label key, label value)``, kept by :meth:`_emit`: an eviction's budget
    check counts the pods its PodDisruptionBudget selects without scanning every pod."""
    _pods_by_owner: dict[tuple[str, str], set[tuple[str, str]]]
    """Pod keys by ``(namespace, uid of the controller ownerReference)``, kept by :meth:`_emit`: the simulated
    ReplicaSet controller reads its pods here, as kube-controller-manager reads its informer's index, instead
    of scanning every pod each step."""
    _pods_terminating: dict[tuple[str, str], str]
    """``metadata.deletionTimestamp`` by pod key, of the pods being deleted gracefully, kept by :meth:`_emit`:
    the kubelet's confirmations (``finish_graceful_deletions``) look at these instead of every pod."""

    # ------------------------------------------------------------------ basics
    @property
    def resource_version(self) -> int:
        """The current global resourceVersion (the version of the newest write)."""
        return self._rv

    def rt(self, resource: str) -> ResourceType:
        """The :class:`ResourceType` of a store key; ``KeyError`` if unknown."""
        rt = self.registry.get(resource)
        if rt.key not in self._objects:  # registered after the store was made (a CRD applied)
            self._objects[rt.key] = {}
            self._history[rt.key] = deque(maxlen=self._history_size)
        return rt

    def _key(self, rt: ResourceType, namespace: str | None, name: str) -> tuple[str, str]:
        if rt.namespaced:
            if not namespace:
                raise errors.bad_request(f"{rt.plural} is namespaced: a namespace is required")
            return namespace, name
        return "", name

    def _entry(self, rt: ResourceType, namespace: str | None, name: str) -> _Entry:
        entry = self._objects[rt.key].get(self._key(rt, namespace, name))
        if entry is None:
            raise errors.not_found(rt.plural, name, rt.group)
        return entry

    @staticmethod
    def _copy(obj: Any) -> Any:
        return json.loads(json.dumps(obj))

    def _bump(self) -> int:
        self._rv += 1
        return self._rv

    def _emit(self, kind: str, rt: ResourceType, obj: dict[str, Any], old: dict[str, Any] | None) -> None:
        if rt.key == "pods":
            self._index_pod(kind, obj, old)
        event = WatchEvent(kind, rt.key, obj, old, self._rv)
        history = self._history.get(rt.key)
        if history is None:
            history = self._history[rt.key] = deque(maxlen=self._history_size)
        if len(history) == history.maxlen:
            self._history_dropped.add(rt.key)
        history.append(event)
        for sub in self._subs:
            if sub.accepts(event):
                sub.queue.append(event)
        self.condition.notify_all()

    def _sorted_keys(self, rt: ResourceType) -> builtins.list[tuple[str, str]]:
        """The keys of ``rt`` in (namespace, name) order: sorted once, then kept in order by
        :meth:`_keys_added` and :meth:`_keys_removed` (a resort per list after every create or delete
        was a tenth of the emulator's CPU while a burst's events and pods came and went)."""
        keys = self._order.get(rt.key)
        if keys is None:
            keys = self._order[rt.key] = sorted(self._objects[rt.key])
        return keys

    def _keys_added(self, rt: ResourceType, key: tuple[str, str]) -> None:
        keys = self._order.get(rt.key)
        if keys is not None:
            bisect.insort(keys, key)

    def _keys_removed(self, rt: ResourceType, key: tuple[str, str]) -> None:
        keys = self._order.get(rt.key)
        if keys is not None:
            at = bisect.bisect_left(keys, key)
            if at < len(keys) and keys[at] == key:
                del keys[at]

    def _index_pod(self, kind: str, obj: dict[str, Any], old: dict[str, Any] | None) -> None:
        meta = obj.get("metadata") or {}
        namespace = meta.get("namespace", "")
        key = (namespace, meta.get("name", ""))
        labels = {} if kind == "DELETED" else meta.get("labels") or {}
        old_labels = {} if old is None else (old.get("metadata") or {}).get("labels") or {}
        if old is not None:
            self._pods_by_node.get((old.get("spec") or {}).get("nodeName") or "", set()).discard(key)
            self._pods_by_owner.get(
                ((old.get("metadata") or {}).get("namespace", ""), controller_uid(old)), set()
            ).discard(key)
        if kind != "DELETED":
            self._pods_by_node.setdefault((obj.get("spec") or {}).get("nodeName") or "", set()).add(key)
            self._pods_by_owner.setdefault((namespace, controller_uid(obj)), set()).add(key)
        deleting = None if kind == "DELETED" else meta.get("deletionTimestamp")
        if deleting:
            self._pods_terminating[key] = deleting
        else:
            self._pods_terminating.pop(key, None)
        if labels != old_labels:
            for label, value in old_labels.items():
                self._pods_by_label.get((namespace, label, value), set()).discard(key)
            for label, value in labels.items():
                self._pods_by_label.setdefault((namespace, label, value), set()).add(key)

    def _pods_for_selector(self, namespace: str, selector: dict[str, Any] | None) -> builtins.list[dict[str, Any]]:
        """The namespace's pods a ``LabelSelector`` may select: those carrying every ``matchLabels``
        pair (from the label index), or every pod of the namespace when it has none. A superset: callers
        still apply the whole selector (``matchExpressions`` included)."""
        pods = self._objects["pods"]
        match = (selector or {}).get("matchLabels") or {}
        if not match:
            return [e.obj for key, e in pods.items() if key[0] == namespace]
        sets = sorted((self._pods_by_label.get((namespace, k, str(v)), set()) for k, v in match.items()), key=len)
        keys = set.intersection(*sets) if len(sets) > 1 else sets[0]
        return [pods[key].obj for key in sorted(keys) if key in pods]

    def _select(self, rt: ResourceType, **query: Any) -> tuple[list[tuple[ResourceType, _Entry]], str]:
        keys = self._sorted_keys(rt)
        node = _node_name_selected(rt, query.get("field_selector"))
        if node is not None:  # the index narrows the scan; select still applies every filter
            keys = sorted(self._pods_by_node.get(node, ()))
        found, token = select(self._objects[rt.key], keys, rt, **query)
        return [(rt, e) for e in found], token


def _node_name_selected(rt: ResourceType, field_selector: str | None) -> str | None:
    """The node a pod list selects with ``spec.nodeName=<node>`` (any other terms are filtered by
    :func:`select` as usual), else None."""
    if rt.key != "pods":
        return None
    for path, op, value in parse_field_selector(field_selector, rt.selectable_fields):
        if path == "spec.nodeName" and op == "=":
            return value
    return None
