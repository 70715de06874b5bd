"""The :class:`Store` itself: construction, reads (with live PodDisruptionBudget status), ``apply``,
the pod subresources (eviction, binding) and watches; creates/updates and deletes are inherited from
:mod:`.writes` and :mod:`.deletes`, the state and primitives from :mod:`.state`."""

from __future__ import annotations

import heapq
import json
import random
import threading
import time
from collections import deque
from typing import TYPE_CHECKING, Any

from nodesmith.sim.kube import errors, pods
from nodesmith.sim.kube.admission import DEFAULT_TOLERATION_SECONDS
from nodesmith.sim.kube.events import ListResult, Subscription, WatchEvent
from nodesmith.sim.kube.registry import Registry
from nodesmith.sim.kube.store.deletes import StoreDeletes
from nodesmith.sim.kube.store.writes import StoreWrites

if TYPE_CHECKING:
    import builtins
    from collections.abc import Callable, Iterable

    from nodesmith.sim.kube.registry import ResourceType
    from nodesmith.sim.kube.store.state import _Entry

__all__ = ["Store"]


class Store(StoreWrites, StoreDeletes):
    """In-memory Kubernetes objects with global versioning, watch history and subscriptions.

    ``clock`` gives epoch seconds (inject a simulated clock for virtual time); ``seed`` makes
    generated names and uids reproducible; ``history`` bounds the watch events retained per resource, as the API
    server keeps a watch cache per resource (a watch from a version older than its resource's oldest retained event,
    once one was dropped, gets 410 Expired: ``watchCache.getAllEventsSinceLocked`` in ``k8s.io/apiserver``).
    Resource arguments are store keys: ``pods``, ``nodes``, ``deployments.apps``, ``poddisruptionbudgets.policy``,
    ``nodeclaims.karpenter.sh``...
    All methods raise :class:`~nodesmith.sim.kube.errors.ApiError` as the API server would answer.
    ``not_ready_toleration_seconds`` and ``unreachable_toleration_seconds`` (seconds, 300 unless set) are the API
    server's ``--default-not-ready-toleration-seconds`` and ``--default-unreachable-toleration-seconds``: the
    ``tolerationSeconds`` a created pod's default tolerations get (:mod:`nodesmith.sim.kube.admission`).
    """

    def __init__(
        self,
        *,
        registry: Registry | None = None,
        clock: Callable[[], float] = time.time,
        seed: int | None = None,
        history: int = 20_000,
        graceful_pod_deletion: bool = False,
    ) -> None:
        self.registry = registry or Registry()
        self.clock = clock
        self.graceful_pod_deletion = graceful_pod_deletion
        self.not_ready_toleration_seconds = DEFAULT_TOLERATION_SECONDS
        self.unreachable_toleration_seconds = DEFAULT_TOLERATION_SECONDS
        self.condition = threading.Condition(threading.RLock())
        self.closed = False
        self._rng = random.Random(seed)
        self._rv = 0
        self._objects: dict[str, dict[tuple[str, str], _Entry]] = {rt.key: {} for rt in self.registry}
        self._history_size = history
        self._history: dict[str, deque[WatchEvent]] = {rt.key: deque(maxlen=history) for rt in self.registry}
        self._history_dropped: set[str] = set()
        self._subs: list[Subscription] = []
        self._order: dict[str, list[tuple[str, str]]] = {}
        self._pods_by_node: dict[str, set[tuple[str, str]]] = {}
        self._pods_by_label: dict[tuple[str, str, str], set[tuple[str, str]]] = {}
        self._pods_by_owner: dict[tuple[str, str], set[tuple[str, str]]] = {}
        self._pods_terminating: dict[tuple[str, str], str] = {}
        for ns in ("default", "kube-system", "kube-public", "kube-node-lease"):
            self.create("namespaces", {"metadata": {"name": ns}, "status": {"phase": "Active"}})

    def _render(self, rt: ResourceType, entry: _Entry) -> dict[str, Any]:
        """The object as readers see it (PodDisruptionBudgets get a live computed status)."""
        if rt.key == "poddisruptionbudgets.policy":
            return {**entry.obj, "status": self.pdb_status_of(entry.obj)}
        return entry.obj

    # ------------------------------------------------------------------ reads
    def get(self, resource: str, name: str, *, namespace: str | None = None) -> dict[str, Any]:
        """A detached copy of one object; 404 if absent."""
        with self.condition:
            rt = self.rt(resource)
            return self._copy(self._render(rt, self._entry(rt, namespace, name)))  # type: ignore[no-any-return]

    def find(self, resource: str, name: str, *, namespace: str | None = None) -> dict[str, Any] | None:
        """Like :meth:`get` but None when absent."""
        try:
            return self.get(resource, name, namespace=namespace)
        except errors.ApiError as exc:
            if exc.code == 404:
                return None
            raise

    def list(
        self,
        resource: str,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        limit: int | None = None,
        continue_token: str | None = None,
    ) -> ListResult:
        """Objects of ``resource`` (one namespace, or all when None) that match both selectors.

        Field labels are limited to the resource's selectable fields (400 otherwise). With
        ``limit`` the answer carries a ``continue_token`` for the next page.
        """
        with self.condition:
            rt = self.rt(resource)
            found, token = self._select(
                rt,
                namespace=namespace,
                label_selector=label_selector,
                field_selector=field_selector,
                limit=limit,
                continue_token=continue_token,
            )
            return ListResult([self._copy(self._render(r, e)) for r, e in found], self._rv, token)

    def list_json(
        self,
        resource: str,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        limit: int | None = None,
        continue_token: str | None = None,
    ) -> bytes:
        """A complete ``<Kind>List`` JSON document (the HTTP list answer), serialised once per version."""
        with self.condition:
            rt = self.rt(resource)
            found, token = self._select(
                rt,
                namespace=namespace,
                label_selector=label_selector,
                field_selector=field_selector,
                limit=limit,
                continue_token=continue_token,
            )
            items = b",".join(
                json.dumps(self._render(r, e), separators=(",", ":")).encode()
                if r.key == "poddisruptionbudgets.policy"
                else e.json()
                for r, e in found
            )
            meta: dict[str, str] = {"resourceVersion": str(self._rv)}
            if token:
                meta["continue"] = token
        head = json.dumps({"kind": f"{rt.kind}List", "apiVersion": rt.api_version, "metadata": meta})
        return head[:-1].encode() + b',"items":[' + items + b"]}"

    def objects(self, resource: str) -> builtins.list[dict[str, Any]]:
        """Every object of ``resource`` as shared snapshots (fast; callers must not mutate)."""
        with self.condition:
            return [e.obj for e in self._objects[self.rt(resource).key].values()]

    def snapshot(self, resource: str, name: str, *, namespace: str | None = None) -> dict[str, Any] | None:
        """One object as its shared snapshot (like :meth:`objects`: no copy, callers must not mutate), or None."""
        with self.condition:
            rt = self.rt(resource)
            entry = self._objects[rt.key].get(self._key(rt, namespace, name))
            return None if entry is None else entry.obj

    def pods_on(self, node_name: str) -> builtins.list[dict[str, Any]]:
        """The pods bound to ``node_name`` as shared snapshots (like :meth:`objects`), from the node index."""
        with self.condition:
            pods = self._objects["pods"]
            return [pods[key].obj for key in sorted(self._pods_by_node.get(node_name, ())) if key in pods]

    def pods_controlled_by(self, namespace: str, uid: str) -> builtins.list[dict[str, Any]]:
        """The pods of ``namespace`` whose controller ownerReference has ``uid``, as shared snapshots (like
        :meth:`objects`), from the owner index."""
        with self.condition:
            pods = self._objects["pods"]
            return [pods[key].obj for key in sorted(self._pods_by_owner.get((namespace, uid), ())) if key in pods]

    # ------------------------------------------------------------------ apply
    def apply(self, obj: dict[str, Any]) -> dict[str, Any]:
        """Create a manifest, or replace its spec/metadata if it exists (``kubectl apply``-like).

        The resource comes from ``apiVersion``/``kind``; an unknown kind is 404.
        """
        rt = self.registry.by_kind(str(obj.get("apiVersion", "")), str(obj.get("kind", "")))
        if rt is None:
            raise errors.ApiError(404, "NotFound", f"no resource for {obj.get('apiVersion')}/{obj.get('kind')}")
        meta = obj.get("metadata") or {}
        with self.condition:
            current = self.find(rt.key, str(meta.get("name", "")), namespace=meta.get("namespace") or "default")
            if current is None:
                return self.create(rt.key, obj)
            body = self._copy(obj)
            body["metadata"] = {**current["metadata"], **body.get("metadata", {})}
            body["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
            return self.replace(rt.key, body)

    # ------------------------------------------------------------------ pods
    def evict(
        self,
        name: str,
        *,
        namespace: str,
        grace_period_seconds: int | None = None,
        preconditions: dict[str, Any] | None = None,
    ) -> None:
        """The Eviction API: delete the pod unless a PodDisruptionBudget forbids it (429); 404 if absent."""
        with self.condition:
            pods.evict(
                self, name, namespace=namespace, grace_period_seconds=grace_period_seconds, preconditions=preconditions
            )

    def bind(self, name: str, *, namespace: str, node_name: str) -> dict[str, Any]:
        """The binding subresource: set ``spec.nodeName`` and ``PodScheduled=True``; 409 if already bound."""
        with self.condition:
            return self._copy(pods.bind(self, name, namespace=namespace, node_name=node_name))  # type: ignore[no-any-return]

    def pdb_status_of(self, pdb: dict[str, Any]) -> dict[str, Any]:
        """The status the disruption controller would report for ``pdb`` right now."""
        with self.condition:
            return pods.pdb_status_now(self, pdb)

    # ------------------------------------------------------------------ watch
    def subscribe(
        self, *, resources: Iterable[str] | None = None, since: int | None = None, initial: bool = False
    ) -> Subscription:
        """Start receiving events of ``resources`` (store keys; None for all).

        ``since``: replay retained events newer than that version first (410 Expired if older
        than the history). ``initial``: begin with synthetic ADDED events for current objects.
        """
        with self.condition:
            keys = None if resources is None else frozenset(self.rt(r).key for r in resources)
            sub = Subscription(self, keys, since)
            if since is not None:
                histories = {k: h for k, h in self._history.items() if keys is None or k in keys}
                for key, history in histories.items():
                    oldest = history[0].resource_version if history else self._rv + 1
                    if key in self._history_dropped and since < oldest - 1:
                        raise errors.expired(f"too old resource version: {since} ({oldest - 1})")
                retained = heapq.merge(*histories.values(), key=lambda e: e.resource_version)
                sub.queue.extend(e for e in retained if sub.accepts(e))
            elif initial:
                for key in sorted(keys) if keys is not None else sorted(self._objects):
                    rt = self.rt(key)
                    for entry in self._objects[key].values():
                        obj = entry.obj
                        sub.queue.append(
                            WatchEvent(
                                "ADDED", key, self._render(rt, entry), None, int(obj["metadata"]["resourceVersion"])
                            )
                        )
                sub.since = self._rv
            else:
                sub.since = self._rv
            self._subs.append(sub)
            return sub

    def unsubscribe(self, sub: Subscription) -> None:
        """Detach ``sub`` and wake anything waiting on it."""
        with self.condition:
            sub.closed = True
            if sub in self._subs:
                self._subs.remove(sub)
            self.condition.notify_all()

    def wait_for(self, predicate: Callable[[Store], bool], timeout: float) -> bool:
        """Block until ``predicate(store)`` holds (re-checked after each write) or ``timeout`` seconds pass."""
        with self.condition:
            return self.condition.wait_for(lambda: predicate(self), timeout)

    def close(self) -> None:
        """Wake every waiter for good (the emulator is stopping)."""
        with self.condition:
            self.closed = True
            self.condition.notify_all()
