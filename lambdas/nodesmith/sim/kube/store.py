"""The emulator's object store: thread-safe, versioned, watchable, shared by HTTP and in-process users.

Objects are plain JSON dicts kept as immutable snapshots (every write stores a new dict), so the
watch history can hold them without copying. Every successful write bumps one global
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
"""

from __future__ import annotations

import json
import random
import threading
import time
from collections import deque
from typing import TYPE_CHECKING, Any

from nodesmith.sim.kube import errors, pods
from nodesmith.sim.kube.events import ListResult, Subscription, WatchEvent
from nodesmith.sim.kube.listing import select
from nodesmith.sim.kube.patching import MERGE_PATCH, apply_patch
from nodesmith.sim.kube.registry import Registry, ResourceType
from nodesmith.sim.kube.timefmt import rfc3339
from nodesmith.sim.kube.writes import WriteMode, merge_write, prepare_create

if TYPE_CHECKING:
    import builtins
    from collections.abc import Callable, Iterable

__all__ = ["ListResult", "Store", "Subscription", "WatchEvent"]


class _Entry:
    __slots__ = ("obj", "raw")

    def __init__(self, obj: dict[str, Any]) -> None:
        self.obj = obj
        self.raw: bytes | None = None

    def json(self) -> bytes:
        if self.raw is None:
            self.raw = json.dumps(self.obj, separators=(",", ":")).encode()
        return self.raw


class Store:
    """In-memory Kubernetes objects with global versioning, watch history and subscriptions.

    ``clock`` gives epoch seconds (inject a simulated clock for virtual time); ``seed`` makes
    generated names and uids reproducible; ``history`` bounds the retained watch events (a watch
    from an older version gets 410 Expired). Resource arguments are store keys: ``pods``,
    ``nodes``, ``deployments.apps``, ``poddisruptionbudgets.policy``, ``nodeclaims.karpenter.sh``...
    All methods raise :class:`~nodesmith.sim.kube.errors.ApiError` as the API server would answer.
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
        self.condition = threading.Condition(threading.RLock())
        self.closed = False
        self._rng = random.Random(seed)
        self._rv = 0
        self._objects: dict[str, dict[tuple[str, str], _Entry]] = {rt.key: {} for rt in self.registry}
        self._history: deque[WatchEvent] = deque(maxlen=history)
        self._subs: list[Subscription] = []
        self._order: dict[str, list[tuple[str, str]]] = {}
        for ns in ("default", "kube-system", "kube-public", "kube-node-lease"):
            self.create("namespaces", {"metadata": {"name": ns}, "status": {"phase": "Active"}})

    # ------------------------------------------------------------------ basics
    @property
    def resource_version(self) -> int:
        """The current global resourceVersion (the version of the newest write)."""
        return self._rv

    def rt(self, resource: str) -> ResourceType:
        """The :class:`ResourceType` of a store key; ``KeyError`` if unknown."""
        rt = self.registry.get(resource)
        self._objects.setdefault(rt.key, {})
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

    def _render(self, rt: ResourceType, entry: _Entry) -> dict[str, Any]:
        """The object as readers see it (PodDisruptionBudgets get a live computed status)."""
        if rt.key == "poddisruptionbudgets.policy":
            return {**entry.obj, "status": self.pdb_status_of(entry.obj)}
        return entry.obj

    def _bump(self) -> int:
        self._rv += 1
        return self._rv

    def _emit(self, kind: str, rt: ResourceType, obj: dict[str, Any], old: dict[str, Any] | None) -> None:
        event = WatchEvent(kind, rt.key, obj, old, self._rv)
        self._history.append(event)
        for sub in self._subs:
            if sub.accepts(event):
                sub.queue.append(event)
        self.condition.notify_all()

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

    def _sorted_keys(self, rt: ResourceType) -> builtins.list[tuple[str, str]]:
        """The keys of ``rt`` in (namespace, name) order, cached until a create or delete."""
        keys = self._order.get(rt.key)
        if keys is None:
            keys = self._order[rt.key] = sorted(self._objects[rt.key])
        return keys

    def _select(self, rt: ResourceType, **query: Any) -> tuple[list[tuple[ResourceType, _Entry]], str]:
        found, token = select(self._objects[rt.key], self._sorted_keys(rt), rt, **query)
        return [(rt, e) for e in found], token

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

    # ------------------------------------------------------------------ create
    def create(self, resource: str, obj: dict[str, Any], *, namespace: str | None = None) -> dict[str, Any]:
        """Create ``obj``; ``namespace`` defaults to ``metadata.namespace``. 409 if the name is taken."""
        with self.condition:
            rt = self.rt(resource)
            objects = self._objects[rt.key]
            new = prepare_create(
                rt,
                self._copy(obj),
                namespace,
                now=self.clock(),
                rng=self._rng,
                taken=lambda ns, name: self._key(rt, ns, name) in objects,
            )
            meta = new["metadata"]
            key = self._key(rt, meta.get("namespace"), meta["name"])
            if key in objects:
                raise errors.already_exists(rt.plural, meta["name"], rt.group)
            meta["resourceVersion"] = str(self._bump())
            objects[key] = _Entry(new)
            self._order.pop(rt.key, None)
            self._emit("ADDED", rt, new, None)
            return self._copy(new)  # type: ignore[no-any-return]

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

    # ------------------------------------------------------------------ update
    def _commit(
        self, rt: ResourceType, entry: _Entry, new: dict[str, Any], mode: WriteMode, *, check_rv: bool
    ) -> dict[str, Any]:
        """Store ``new`` over ``entry`` under the write rules; returns the stored snapshot."""
        old = entry.obj
        result = merge_write(rt, old, new, mode, check_rv=check_rv)
        if result is old:
            return old
        meta = result["metadata"]
        meta["resourceVersion"] = str(self._bump())
        key = self._key(rt, meta.get("namespace"), meta["name"])
        if meta.get("deletionTimestamp") and not meta.get("finalizers"):
            del self._objects[rt.key][key]
            self._order.pop(rt.key, None)
            self._emit("DELETED", rt, result, old)
            return result
        self._objects[rt.key][key] = _Entry(result)
        self._emit("MODIFIED", rt, result, old)
        return result

    def replace(
        self, resource: str, obj: dict[str, Any], *, namespace: str | None = None, subresource: str | None = None
    ) -> dict[str, Any]:
        """PUT: replace the object named in ``obj`` (409 on a stale resourceVersion, 404 if absent).

        ``subresource="status"`` writes only the status.
        """
        with self.condition:
            rt = self.rt(resource)
            body = self._copy(obj)
            meta = body.get("metadata") or {}
            entry = self._entry(rt, namespace or meta.get("namespace"), str(meta.get("name", "")))
            return self._copy(self._commit(rt, entry, body, self._mode(subresource), check_rv=True))  # type: ignore[no-any-return]

    @staticmethod
    def _mode(subresource: str | None) -> WriteMode:
        if subresource in (None, ""):
            return "main"
        if subresource == "status":
            return "status"
        raise errors.ApiError(404, "NotFound", f"subresource {subresource!r} is not supported here")

    def patch(
        self,
        resource: str,
        name: str,
        body: Any,
        *,
        namespace: str | None = None,
        content_type: str = MERGE_PATCH,
        subresource: str | None = None,
    ) -> dict[str, Any]:
        """PATCH with a merge, strategic merge or JSON patch; a resourceVersion in the result is a precondition."""
        with self.condition:
            rt = self.rt(resource)
            entry = self._entry(rt, namespace, name)
            current = self._copy(entry.obj)
            patched = apply_patch(current, self._copy(body), content_type, custom=rt.custom)
            return self._copy(self._commit(rt, entry, patched, self._mode(subresource), check_rv=True))  # type: ignore[no-any-return]

    def mutate(
        self,
        resource: str,
        name: str,
        fn: Callable[[dict[str, Any]], dict[str, Any] | None],
        *,
        namespace: str | None = None,
    ) -> dict[str, Any]:
        """Atomic read-modify-write for in-process controllers: ``fn`` edits a copy (spec, status, metadata).

        ``fn`` may return a new object or None (edited in place). Identity fields are kept; no
        resourceVersion check. Returns the stored object (copy). 404 if absent.
        """
        with self.condition:
            rt = self.rt(resource)
            entry = self._entry(rt, namespace, name)
            current = self._copy(entry.obj)
            result = fn(current)
            new = current if result is None else result
            return self._copy(self._commit(rt, entry, new, "all", check_rv=False))  # type: ignore[no-any-return]

    # ------------------------------------------------------------------ delete
    def delete(
        self,
        resource: str,
        name: str,
        *,
        namespace: str | None = None,
        grace_period_seconds: int | None = None,
        preconditions: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """DELETE: remove the object, or mark it (finalizers, graceful pods). Returns its last state.

        ``preconditions`` (``uid``, ``resourceVersion``) that do not match are a 409.
        """
        with self.condition:
            rt = self.rt(resource)
            entry = self._entry(rt, namespace, name)
            return self._copy(self._delete(rt, entry, grace_period_seconds, preconditions))  # type: ignore[no-any-return]

    def _delete(
        self, rt: ResourceType, entry: _Entry, grace: int | None, preconditions: dict[str, Any] | None
    ) -> dict[str, Any]:
        old = entry.obj
        meta = old["metadata"]
        for field in ("uid", "resourceVersion"):
            wanted = (preconditions or {}).get(field)
            if wanted and str(wanted) != str(meta.get(field)):
                raise errors.conflict(
                    rt.plural,
                    meta["name"],
                    rt.group,
                    f"Precondition failed: {field} in precondition: "
                    f"{wanted}, {field} in object meta: {meta.get(field)}",
                )
        key = self._key(rt, meta.get("namespace"), meta["name"])
        if rt.key == "pods" and self._graceful(old, grace):
            grace_s = (
                grace if grace is not None else int((old.get("spec") or {}).get("terminationGracePeriodSeconds", 30))
            )
            now = self.clock()
            deadline = rfc3339(now + grace_s)
            if meta.get("deletionTimestamp") and meta.get("deletionGracePeriodSeconds", grace_s) <= grace_s:
                return old
            new_meta = {**meta, "deletionTimestamp": deadline, "deletionGracePeriodSeconds": grace_s}
            return self._store_marked(rt, key, old, new_meta)
        if meta.get("finalizers"):
            if meta.get("deletionTimestamp") and meta.get("deletionGracePeriodSeconds", 0) == 0:
                return old
            new_meta = {
                **meta,
                "deletionTimestamp": meta.get("deletionTimestamp") or rfc3339(self.clock()),
                "deletionGracePeriodSeconds": 0,
            }
            return self._store_marked(rt, key, old, new_meta)
        final = {**old, "metadata": {**meta, "resourceVersion": str(self._bump())}}
        del self._objects[rt.key][key]
        self._order.pop(rt.key, None)
        self._emit("DELETED", rt, final, old)
        return final

    def _graceful(self, pod: dict[str, Any], grace: int | None) -> bool:
        if not self.graceful_pod_deletion or grace == 0:
            return False
        spec, status = pod.get("spec") or {}, pod.get("status") or {}
        return bool(spec.get("nodeName")) and status.get("phase") not in ("Succeeded", "Failed")

    def _store_marked(
        self, rt: ResourceType, key: tuple[str, str], old: dict[str, Any], meta: dict[str, Any]
    ) -> dict[str, Any]:
        meta["resourceVersion"] = str(self._bump())
        new = {**old, "metadata": meta}
        self._objects[rt.key][key] = _Entry(new)
        self._emit("MODIFIED", rt, new, old)
        return new

    def delete_collection(
        self,
        resource: str,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> builtins.list[dict[str, Any]]:
        """DELETE on a collection: delete every matching object; returns their last states."""
        with self.condition:
            rt = self.rt(resource)
            found, _ = self._select(
                rt, namespace=namespace, label_selector=label_selector, field_selector=field_selector
            )
            return [self._copy(self._delete(rt, e, None, None)) for _, e in found]

    def finish_graceful_deletions(self) -> int:
        """Remove terminating pods whose ``deletionTimestamp`` has passed (a kubelet's job); returns how many."""
        with self.condition:
            rt = self.rt("pods")
            now = rfc3339(self.clock())
            due = [
                e
                for e in list(self._objects[rt.key].values())
                if (ts := e.obj["metadata"].get("deletionTimestamp")) and ts <= now
            ]
            for entry in due:
                self._delete(rt, entry, 0, None)
            return len(due)

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
                oldest = self._history[0].resource_version if self._history else self._rv + 1
                if since < oldest - 1:
                    raise errors.expired(f"too old resource version: {since} ({oldest - 1})")
                sub.queue.extend(e for e in self._history if sub.accepts(e))
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
