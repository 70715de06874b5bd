"""The store's create and update operations (POST, PUT, PATCH, in-process read-modify-write),
inherited by :class:`~nodesmith.sim.kube.store.Store`.

The rules of what a write turns the stored object into are in :mod:`nodesmith.sim.kube.writes`;
this module stores the result, bumps the version and emits the watch event.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from nodesmith.sim.kube import errors
from nodesmith.sim.kube.admission import default_tolerations
from nodesmith.sim.kube.patching import MERGE_PATCH, apply_patch
from nodesmith.sim.kube.store.state import StoreState, _Entry
from nodesmith.sim.kube.writes import WriteMode, merge_write, prepare_create

if TYPE_CHECKING:
    from collections.abc import Callable

    from nodesmith.sim.kube.registry import ResourceType

__all__ = ["StoreWrites"]


class StoreWrites(StoreState):
    """Create and update methods of :class:`~nodesmith.sim.kube.store.Store` (a base class; not used alone)."""

    # ------------------------------------------------------------------ create
    def create(self, resource: str, obj: dict[str, Any], *, namespace: str | None = None) -> dict[str, Any]:
        """Create ``obj``; ``namespace`` defaults to ``metadata.namespace``. 409 if the name is taken. A pod gets
        the ``DefaultTolerationSeconds`` tolerations it lacks (:mod:`nodesmith.sim.kube.admission`), for the
        store's ``not_ready_toleration_seconds`` and ``unreachable_toleration_seconds``."""
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
            if rt.key == "pods":
                default_tolerations(
                    new,
                    not_ready_seconds=self.not_ready_toleration_seconds,
                    unreachable_seconds=self.unreachable_toleration_seconds,
                )
            meta = new["metadata"]
            key = self._key(rt, meta.get("namespace"), meta["name"])
            if key in objects:
                raise errors.already_exists(rt.plural, meta["name"], rt.group)
            meta["resourceVersion"] = str(self._bump())
            objects[key] = _Entry(new)
            self._keys_added(rt, key)
            self._emit("ADDED", rt, new, None)
            return self._copy(new)  # type: ignore[no-any-return]

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
            self._keys_removed(rt, key)
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
