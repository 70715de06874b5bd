"""The store's deletions, inherited by :class:`~nodesmith.sim.kube.store.Store`.

DELETE with preconditions, finalizers (mark with ``deletionTimestamp`` and keep the object until an
update empties them), graceful pod deletion (mark terminating until deleted with grace 0 or
:meth:`~StoreDeletes.finish_graceful_deletions`), and collection deletes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from nodesmith.sim.kube import errors
from nodesmith.sim.kube.store.state import StoreState, _Entry
from nodesmith.sim.kube.timefmt import rfc3339

if TYPE_CHECKING:
    import builtins
    from collections.abc import Callable

    from nodesmith.sim.kube.registry import ResourceType

__all__ = ["StoreDeletes"]


class StoreDeletes(StoreState):
    """Delete methods of :class:`~nodesmith.sim.kube.store.Store` (a base class; not used alone)."""

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
        self._keys_removed(rt, key)
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

    def finish_graceful_deletions(self, *, hold: Callable[[dict[str, Any]], bool] | None = None) -> int:
        """Remove terminating pods whose ``deletionTimestamp`` has passed (a kubelet's job), in key order; returns
        how many. Only the pods being deleted are looked at (``_pods_terminating``), not every pod. ``hold(pod)``
        True leaves that pod terminating (its kubelet does not confirm the deletion); it is asked in key order."""
        with self.condition:
            rt = self.rt("pods")
            now = rfc3339(self.clock())
            pods = self._objects[rt.key]
            due = sorted(key for key, ts in self._pods_terminating.items() if ts <= now and key in pods)
            if hold is not None:
                due = [key for key in due if not hold(pods[key].obj)]
            for key in due:
                self._delete(rt, pods[key], 0, None)
            return len(due)
