"""Simulated kube-controller-manager loops: Deployment, ReplicaSet, pod and owner garbage collection, node lifecycle.

Just enough of ``pkg/controller/{deployment,replicaset,podgc,garbagecollector}`` for workloads to
behave under Nodesmith:

* **Deployment**: one ReplicaSet per pod-template hash (``<deployment>-<hash>``, label
  ``pod-template-hash``), scaled to ``spec.replicas``; ReplicaSets of older templates are scaled to
  0 (a Recreate-style rollout); ``status`` counts replicas, ready and available ones.
* **ReplicaSet**: keeps ``spec.replicas`` active pods (not terminal, not terminating): creates
  missing ones from the template (``generateName: <rs>-``), deletes extras (unbound first, then
  not ready, then newest — ``getPodsToDelete``). A deleted or evicted pod is therefore replaced.
* **pod GC**: pods bound to a Node that no longer exists are deleted (``podgc`` orphaned pods).
* **garbage collector**: pods whose controlling ReplicaSet is gone and ReplicaSets whose
  Deployment is gone are deleted (background cascading deletion).
* **node lifecycle**: not-ready and unreachable taints by the Nodes' ``Ready`` condition, and the taint
  eviction controller's evictions (:class:`~nodesmith.sim.node_lifecycle.NodeLifecycle`), every step.

All writes go through the emulator's in-process store; ``step(now)`` is deterministic given the
store (names come from the store's seeded generator).

Like the real controllers, which act on what their informers report changed and resync everything
only now and then, a step after the first reconciles only the objects whose changes it has seen
since the previous step (a Deployment, ReplicaSet or pod of theirs changed; a Node or owner gone),
and every object once every :data:`~nodesmith.sim.changes.RESYNC_SECONDS`
(:class:`~nodesmith.sim.changes.ChangeFeed`), so a step costs in proportion to the changes, not to the
cluster.
"""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from nodesmith.sim.changes import RESYNC_SECONDS, ChangeFeed
from nodesmith.sim.kube.disruption import controller_ref, controller_uid
from nodesmith.sim.kube.errors import ApiError
from nodesmith.sim.node_lifecycle import NodeLifecycle

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

    from nodesmith.sim.kube.store import Store, WatchEvent

__all__ = ["SimControllers", "template_hash"]

LOG = logging.getLogger(__name__)

_DEPLOYMENTS = "deployments.apps"
_REPLICASETS = "replicasets.apps"
_HASH_LABEL = "pod-template-hash"
_HASH_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"

OwnerKey = tuple[str, str]
"""(namespace, uid) of a Deployment or ReplicaSet."""


def template_hash(template: Mapping[str, Any]) -> str:
    """A 10-character hash of a pod template (the ``pod-template-hash`` label value)."""
    digest = hashlib.sha256(json.dumps(template, sort_keys=True, separators=(",", ":")).encode()).digest()
    return "".join(_HASH_ALPHABET[b % len(_HASH_ALPHABET)] for b in digest[:10])


def _owner_ref(owner: Mapping[str, Any], kind: str) -> dict[str, Any]:
    meta = owner["metadata"]
    return {
        "apiVersion": "apps/v1",
        "kind": kind,
        "name": meta["name"],
        "uid": meta.get("uid", ""),
        "controller": True,
        "blockOwnerDeletion": True,
    }


def _active(pod: Mapping[str, Any]) -> bool:
    phase = (pod.get("status") or {}).get("phase")
    return phase not in ("Succeeded", "Failed") and not pod["metadata"].get("deletionTimestamp")


def _ready(pod: Mapping[str, Any]) -> bool:
    for cond in (pod.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Ready":
            return bool(cond.get("status") == "True")
    return False


def _replicas(obj: Mapping[str, Any]) -> int:
    value = (obj.get("spec") or {}).get("replicas")
    return 1 if value is None else int(value)


def _owner_key(obj: Mapping[str, Any]) -> OwnerKey:
    meta = obj["metadata"]
    return meta.get("namespace") or "default", meta.get("uid") or ""


def _controller_key(obj: Mapping[str, Any], kind: str) -> OwnerKey | None:
    """(namespace, uid) of ``obj``'s controller when it is a ``kind``, else None."""
    ref = controller_ref(obj)
    if ref is None or ref.get("kind") != kind:
        return None
    return obj["metadata"].get("namespace") or "default", ref.get("uid") or ""


@dataclass(slots=True)
class _Changes:
    """What the events since the last step touched: the Deployments and ReplicaSets to reconcile (by
    :data:`OwnerKey`), the pods to look at for garbage collection, and the Nodes and owners that went."""

    deployments: set[OwnerKey] = field(default_factory=set)
    replicasets: set[OwnerKey] = field(default_factory=set)
    pods: set[tuple[str, str]] = field(default_factory=set)
    nodes_gone: set[str] = field(default_factory=set)
    replicasets_gone: bool = False
    deployments_gone: bool = False

    @classmethod
    def of(cls, events: Iterable[WatchEvent]) -> _Changes:
        changes = cls()
        for event in events:
            obj, deleted = event.object, event.type == "DELETED"
            if event.resource == "pods":
                owner = _controller_key(obj, "ReplicaSet")
                if owner is not None:
                    changes.replicasets.add(owner)
                if not deleted:
                    changes.pods.add(_key(obj))
            elif event.resource == _REPLICASETS:
                changes.replicasets.add(_owner_key(obj))
                owner = _controller_key(obj, "Deployment")
                if owner is not None:
                    changes.deployments.add(owner)
                changes.replicasets_gone |= deleted
            elif event.resource == _DEPLOYMENTS:
                changes.deployments.add(_owner_key(obj))
                changes.deployments_gone |= deleted
            elif event.resource == "nodes" and deleted:
                changes.nodes_gone.add(obj["metadata"]["name"])
        return changes


class SimControllers:
    """Deployment, ReplicaSet, pod-GC, owner-GC and node lifecycle loops over the emulator store.

    ``resync_seconds`` (default :data:`~nodesmith.sim.changes.RESYNC_SECONDS`; 0: always) is how often every
    object is reconciled whether or not it changed; in between, a step reconciles what changed since the step
    before.
    """

    watch = ("pods", "nodes", _DEPLOYMENTS, _REPLICASETS)

    def __init__(self, *, store: Store, resync_seconds: float = RESYNC_SECONDS) -> None:
        self.store = store
        self._owned: dict[str, dict[tuple[str, str], list[dict[str, Any]]]] = {}
        self._changes = ChangeFeed(store, self.watch, resync_seconds=resync_seconds)
        self._touched: set[tuple[str, str]] = set()  # ReplicaSets created or scaled during this step
        self._hashes: dict[tuple[str, int], str] = {}  # template hash by Deployment (uid, generation)
        self.node_lifecycle = NodeLifecycle(store=store)

    def step(self, now: float) -> None:
        """Taint Nodes by condition and make the taint evictions due (node lifecycle), then reconcile Deployments
        and ReplicaSets and collect garbage as of ``now`` (epoch seconds): every
        object on the first step and every ``resync_seconds``, else those changed since the last step.

        ReplicaSets are indexed by (namespace, controller uid) once per step (after garbage collection), and
        pods read from the store's owner and node indexes, as the real controllers' informers index them,
        instead of a scan of every pod per owner or per step.
        """
        self.node_lifecycle.step(now)
        events = self._changes.since_last(now)
        self._reconcile(None if events is None else _Changes.of(events))

    def _reconcile(self, changes: _Changes | None) -> None:
        """One pass over everything (``changes`` None) or over what ``changes`` touched."""
        self._collect_garbage(changes)
        self._owned, self._touched = {}, set()
        deployments = sorted(self.store.objects(_DEPLOYMENTS), key=_key)
        for deployment in deployments:
            if changes is None or _owner_key(deployment) in changes.deployments:
                self._deployment(deployment)
        statuses = None if changes is None else set(changes.deployments)
        for rs in sorted(self.store.objects(_REPLICASETS), key=_key):
            if changes is None or _owner_key(rs) in changes.replicasets or _key(rs) in self._touched:
                self._replicaset(rs)
                owner = _controller_key(rs, "Deployment")
                if statuses is not None and owner is not None:
                    statuses.add(owner)
        self._owned.pop(_REPLICASETS, None)  # the statuses just written
        for deployment in sorted(self.store.objects(_DEPLOYMENTS), key=_key):
            if statuses is None or _owner_key(deployment) in statuses:
                self._deployment_status(deployment)

    def _template_hash(self, deployment: Mapping[str, Any]) -> str:
        """:func:`template_hash` of ``deployment``'s pod template, once per (uid, generation): a spec change
        bumps ``metadata.generation``."""
        meta = deployment["metadata"]
        key = (meta.get("uid") or "", int(meta.get("generation") or 0))
        hashed = self._hashes.get(key) if key[0] else None
        if hashed is None:
            hashed = template_hash((deployment.get("spec") or {}).get("template") or {})
            if key[0]:
                self._hashes[key] = hashed
        return hashed

    # -- deployments -------------------------------------------------------------------------------

    def _deployment(self, deployment: Mapping[str, Any]) -> None:
        meta = deployment["metadata"]
        hashed = self._template_hash(deployment)
        name = f"{meta['name']}-{hashed}"
        owned = self._owned_replicasets(deployment)
        desired = _replicas(deployment)
        current = next((rs for rs in owned if rs["metadata"]["name"] == name), None)
        if current is None:
            self._create_replicaset(deployment, name=name, hashed=hashed, replicas=desired)
        elif _replicas(current) != desired:
            self._scale(current, desired)
        for rs in owned:
            if rs["metadata"]["name"] != name and _replicas(rs) != 0:
                self._scale(rs, 0)

    def _owned_by(self, resource: str, owner: Mapping[str, Any]) -> list[dict[str, Any]]:
        """The ``resource`` objects whose controller is ``owner``, from this step's index (built on first use;
        a ReplicaSet created during the step is picked up at the next step, as after an informer resync). Pods
        come from the store's own owner index instead (:meth:`~nodesmith.sim.kube.Store.pods_controlled_by`)."""
        meta = owner["metadata"]
        index = self._owned.get(resource)
        if index is None:
            index = {}
            for obj in self.store.objects(resource):
                key = (obj["metadata"].get("namespace") or "default", controller_uid(obj))
                index.setdefault(key, []).append(obj)
            self._owned[resource] = index
        return index.get((meta.get("namespace") or "default", meta.get("uid") or ""), [])

    def _owned_replicasets(self, deployment: Mapping[str, Any]) -> list[dict[str, Any]]:
        return self._owned_by(_REPLICASETS, deployment)

    def _create_replicaset(self, deployment: Mapping[str, Any], *, name: str, hashed: str, replicas: int) -> None:
        meta = deployment["metadata"]
        spec = deployment.get("spec") or {}
        template = json.loads(json.dumps(spec.get("template") or {}))
        template.setdefault("metadata", {}).setdefault("labels", {})[_HASH_LABEL] = hashed
        selector = json.loads(json.dumps(spec.get("selector") or {}))
        selector.setdefault("matchLabels", {})[_HASH_LABEL] = hashed
        rs = {
            "apiVersion": "apps/v1",
            "kind": "ReplicaSet",
            "metadata": {
                "name": name,
                "namespace": meta.get("namespace") or "default",
                "labels": dict(template["metadata"]["labels"]),
                "ownerReferences": [_owner_ref(deployment, "Deployment")],
            },
            "spec": {"replicas": replicas, "selector": selector, "template": template},
        }
        self._touched.add(_key(rs))
        try:
            self.store.create(_REPLICASETS, rs)
        except ApiError as exc:
            if exc.code != 409:
                raise

    def _scale(self, rs: Mapping[str, Any], replicas: int) -> None:
        meta = rs["metadata"]
        self._touched.add(_key(rs))

        def edit(obj: dict[str, Any]) -> None:
            obj.setdefault("spec", {})["replicas"] = replicas

        self._mutate(_REPLICASETS, meta["name"], meta.get("namespace"), edit)

    def _deployment_status(self, deployment: Mapping[str, Any]) -> None:
        current_name = f"{deployment['metadata']['name']}-{self._template_hash(deployment)}"
        owned = self._owned_replicasets(deployment)
        states = [rs.get("status") or {} for rs in owned]
        updated = next((rs.get("status") or {} for rs in owned if rs["metadata"]["name"] == current_name), {})
        status = {
            "observedGeneration": deployment["metadata"].get("generation", 1),
            "replicas": sum(int(s.get("replicas", 0)) for s in states),
            "updatedReplicas": int(updated.get("replicas", 0)),
            "readyReplicas": sum(int(s.get("readyReplicas", 0)) for s in states),
            "availableReplicas": sum(int(s.get("availableReplicas", 0)) for s in states),
        }
        self._set_status(_DEPLOYMENTS, deployment, status)

    # -- replicasets -------------------------------------------------------------------------------

    def _replicaset(self, rs: Mapping[str, Any]) -> None:
        meta = rs["metadata"]
        ns = meta.get("namespace") or "default"
        pods = self.store.pods_controlled_by(ns, meta.get("uid") or "")
        active = [p for p in pods if _active(p)]
        diff = _replicas(rs) - len(active)
        created = 0
        if diff > 0:
            for _ in range(diff):
                created += self._create_pod(rs)
        elif diff < 0:
            # Unbound first, then not ready, then newest (ReplicaSet controller getPodsToDelete).
            ranked = sorted(active, key=lambda p: p["metadata"]["name"])
            ranked.sort(key=lambda p: p["metadata"].get("creationTimestamp", ""), reverse=True)
            ranked.sort(key=lambda p: (bool((p.get("spec") or {}).get("nodeName")), _ready(p)))
            for pod in ranked[:-diff]:
                self._delete("pods", pod["metadata"]["name"], ns)
            active = ranked[-diff:]
        ready = sum(1 for p in active if _ready(p))
        replicas = len(active) + created
        status = {
            "observedGeneration": meta.get("generation", 1),
            "replicas": replicas,
            "readyReplicas": ready,
            "availableReplicas": ready,
            "fullyLabeledReplicas": replicas,
        }
        self._set_status(_REPLICASETS, rs, status)

    def _create_pod(self, rs: Mapping[str, Any]) -> int:
        """Create one pod from ``rs``'s template; returns 1 (created)."""
        meta = rs["metadata"]
        template = (rs.get("spec") or {}).get("template") or {}
        tmeta = template.get("metadata") or {}
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "generateName": f"{meta['name']}-",
                "namespace": meta.get("namespace") or "default",
                "labels": dict(tmeta.get("labels") or {}),
                "annotations": dict(tmeta.get("annotations") or {}),
                "ownerReferences": [_owner_ref(rs, "ReplicaSet")],
            },
            "spec": json.loads(json.dumps(template.get("spec") or {})),
            "status": {"phase": "Pending"},
        }
        pod["spec"].setdefault("schedulerName", "default-scheduler")
        self.store.create("pods", pod)
        return 1

    # -- garbage collection ------------------------------------------------------------------------

    def _collect_garbage(self, changes: _Changes | None) -> None:
        """Delete pods on Nodes that are gone or whose ReplicaSet is gone, and ReplicaSets whose Deployment is
        gone: all of them (``changes`` None), else the pods that changed, and those on a Node or of a
        ReplicaSet deleted since the last step."""
        nodes = {n["metadata"]["name"] for n in self.store.objects("nodes")}
        rs_uids = {rs["metadata"].get("uid") for rs in self.store.objects(_REPLICASETS)}
        deploy_uids = {d["metadata"].get("uid") for d in self.store.objects(_DEPLOYMENTS)}
        if changes is None or changes.replicasets_gone:
            pods = self.store.objects("pods")
        else:  # from the store's indexes, not a scan of every pod per step
            found = {_key(p): p for node in sorted(changes.nodes_gone) for p in self.store.pods_on(node)}
            for namespace, name in sorted(changes.pods):
                pod = self.store.snapshot("pods", name, namespace=namespace or None)
                if pod is not None:
                    found[_key(pod)] = pod
            pods = list(found.values())
        for pod in pods:
            meta = pod["metadata"]
            node = (pod.get("spec") or {}).get("nodeName")
            owner = controller_ref(pod)
            orphaned_by_node = bool(node) and node not in nodes
            orphaned_by_owner = (
                owner is not None and owner.get("kind") == "ReplicaSet" and owner.get("uid") not in rs_uids
            )
            if orphaned_by_node or orphaned_by_owner:
                self._delete("pods", meta["name"], meta.get("namespace"), grace=0)
                replicaset = _controller_key(pod, "ReplicaSet")
                if changes is not None and replicaset is not None:
                    changes.replicasets.add(replicaset)  # it replaces the pod in this step, as a full pass does
        if changes is not None and not changes.deployments_gone:
            return
        for rs in list(self.store.objects(_REPLICASETS)):
            owner = controller_ref(rs)
            if owner is not None and owner.get("kind") == "Deployment" and owner.get("uid") not in deploy_uids:
                self._delete(_REPLICASETS, rs["metadata"]["name"], rs["metadata"].get("namespace"))

    # -- store helpers -----------------------------------------------------------------------------

    def _set_status(self, resource: str, obj: Mapping[str, Any], status: Mapping[str, Any]) -> None:
        """Write ``status`` into ``obj`` unless ``obj`` (read this step) already has it: only this controller
        writes these statuses, so the copy read at the step's start is current (no second read per object)."""
        meta = obj["metadata"]
        if all((obj.get("status") or {}).get(k) == v for k, v in status.items()):
            return

        def edit(o: dict[str, Any]) -> None:
            o.setdefault("status", {}).update(status)

        self._mutate(resource, meta["name"], meta.get("namespace"), edit)

    def _mutate(self, resource: str, name: str, namespace: str | None, edit: Any) -> None:
        try:
            self.store.mutate(resource, name, edit, namespace=namespace)
        except ApiError as exc:
            if exc.code != 404:
                raise

    def _delete(self, resource: str, name: str, namespace: str | None, *, grace: int | None = None) -> None:
        try:
            self.store.delete(resource, name, namespace=namespace, grace_period_seconds=grace)
        except ApiError as exc:
            if exc.code != 404:
                raise


def _key(obj: Mapping[str, Any]) -> tuple[str, str]:
    meta = obj["metadata"]
    return meta.get("namespace") or "", meta["name"]
