"""Pod subresources of the emulator: eviction (policy/v1) and binding.

These run inside the store's lock (the :class:`~nodesmith.sim.kube.store.Store` methods take it)
so the budget check and the deletion are one atomic step, as in the API server.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from nodesmith.sim.kube import errors
from nodesmith.sim.kube.disruption import check_eviction, pdb_status
from nodesmith.sim.kube.timefmt import rfc3339

if TYPE_CHECKING:
    from collections.abc import Mapping

    from nodesmith.sim.kube.store import Store

__all__ = ["bind", "evict", "pdb_status_now"]

_PDBS = "poddisruptionbudgets.policy"
_SCALABLE = {"ReplicaSet": "replicasets.apps", "StatefulSet": "statefulsets.apps", "Deployment": "deployments.apps"}


def _budget_pods(store: Store, pdb: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The pods of the budget's namespace its selector may match (from the store's label index)."""
    namespace = (pdb.get("metadata") or {}).get("namespace", "")
    return store._pods_for_selector(namespace, (pdb.get("spec") or {}).get("selector"))


def _owner_scale(store: Store) -> Any:
    def scale(namespace: str, kind: str, name: str) -> int | None:
        resource = _SCALABLE.get(kind)
        if resource is None:
            return None
        entry = store._objects[resource].get((namespace, name))
        if entry is None:
            return None
        replicas = (entry.obj.get("spec") or {}).get("replicas", 1)
        return int(replicas) if replicas is not None else 1

    return scale


def pdb_status_now(store: Store, pdb: dict[str, Any]) -> dict[str, Any]:
    """``status`` of ``pdb`` computed from the pods currently stored in its namespace."""
    return pdb_status(pdb, _budget_pods(store, pdb), _owner_scale(store), now_iso=rfc3339(store.clock()))


def evict(
    store: Store, name: str, *, namespace: str, grace_period_seconds: int | None, preconditions: dict[str, Any] | None
) -> None:
    """Check the pod's PodDisruptionBudget, then delete it (``eviction.go`` semantics).

    Raises 404 if the pod is absent, 409 on a failed precondition, 429 when the budget allows no
    disruption, 500 when more than one budget selects the pod.
    """
    rt = store.rt("pods")
    entry = store._entry(rt, namespace, name)
    pod = entry.obj
    uid = (preconditions or {}).get("uid")
    if uid and uid != pod["metadata"]["uid"]:
        raise errors.conflict(
            "pods",
            name,
            "",
            f"Precondition failed: UID in precondition: {uid}, UID in object meta: {pod['metadata']['uid']}",
        )
    pdbs = [e.obj for key, e in store._objects[_PDBS].items() if key[0] == namespace]
    check_eviction(pod, pdbs, lambda pdb: _budget_pods(store, pdb), _owner_scale(store))
    store._delete(rt, entry, grace_period_seconds, preconditions)


def bind(store: Store, name: str, *, namespace: str, node_name: str) -> dict[str, Any]:
    """Assign the pod to ``node_name`` (``spec.nodeName``) and mark it ``PodScheduled=True``.

    Raises 404 if the pod is absent and 409 if it is already bound or terminating.
    """
    if not node_name:
        raise errors.invalid("Binding", name, "target.name: Required value")
    rt = store.rt("pods")
    entry = store._entry(rt, namespace, name)
    pod = entry.obj
    current = (pod.get("spec") or {}).get("nodeName")
    if current or pod["metadata"].get("deletionTimestamp"):
        raise errors.conflict("pods", name, "", f"pod {name} is already assigned to node {current!r}")
    now = store.clock()
    status = dict(pod.get("status") or {})
    conditions = [c for c in status.get("conditions") or [] if c.get("type") != "PodScheduled"]
    conditions.append({"type": "PodScheduled", "status": "True", "lastTransitionTime": rfc3339(now)})
    status["conditions"] = conditions
    new = {**pod, "spec": {**(pod.get("spec") or {}), "nodeName": node_name}, "status": status}
    return store._commit(rt, entry, new, "all", check_rv=False)
