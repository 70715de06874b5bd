"""Simulated kube-controller-manager loops: Deployment, ReplicaSet, pod and owner garbage collection.

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

All writes go through the emulator's in-process store; ``step(now)`` is deterministic given the
store (names come from the store's seeded generator).
"""

from __future__ import annotations

import hashlib
import json
import logging
from typing import TYPE_CHECKING, Any

from nodesmith.sim.kube.errors import ApiError

if TYPE_CHECKING:
    from collections.abc import Mapping

    from nodesmith.sim.kube.store import Store

__all__ = ["SimControllers", "template_hash"]

LOG = logging.getLogger(__name__)

_DEPLOYMENTS = "deployments.apps"
_REPLICASETS = "replicasets.apps"
_HASH_LABEL = "pod-template-hash"
_HASH_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"


def template_hash(template: Mapping[str, Any]) -> str:
    """A 10-character hash of a pod template (the ``pod-template-hash`` label value)."""
    digest = hashlib.sha256(json.dumps(template, sort_keys=True, separators=(",", ":")).encode()).digest()
    return "".join(_HASH_ALPHABET[b % len(_HASH_ALPHABET)] for b in digest[:10])


def _controller(obj: Mapping[str, Any]) -> Mapping[str, Any] | None:
    for ref in (obj.get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("controller"):
            return ref  # type: ignore[no-any-return]
    return None


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


class SimControllers:
    """Deployment, ReplicaSet, pod-GC and owner-GC loops over the emulator store."""

    watch = ("pods", "nodes", _DEPLOYMENTS, _REPLICASETS)

    def __init__(self, *, store: Store) -> None:
        self.store = store
        self._owned: dict[str, dict[tuple[str, str], list[dict[str, Any]]]] = {}

    def step(self, now: float) -> None:
        """Reconcile every Deployment and ReplicaSet and collect garbage as of ``now`` (epoch seconds).

        Pods and ReplicaSets are indexed by (namespace, controller uid) once per step (after garbage
        collection), as the real controllers' informers index them, instead of a scan per owner.
        """
        self._collect_garbage()
        self._owned = {}
        for deployment in sorted(self.store.objects(_DEPLOYMENTS), key=_key):
            self._deployment(deployment)
        for rs in sorted(self.store.objects(_REPLICASETS), key=_key):
            self._replicaset(rs)
        self._owned.pop(_REPLICASETS, None)  # the statuses just written
        for deployment in sorted(self.store.objects(_DEPLOYMENTS), key=_key):
            self._deployment_status(deployment)

    # -- deployments -------------------------------------------------------------------------------

    def _deployment(self, deployment: Mapping[str, Any]) -> None:
        meta = deployment["metadata"]
        spec = deployment.get("spec") or {}
        template = spec.get("template") or {}
        hashed = template_hash(template)
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
        a ReplicaSet created during the step is picked up at the next step, as after an informer resync)."""
        index = self._owned.get(resource)
        if index is None:
            index = {}
            for obj in self.store.objects(resource):
                key = (obj["metadata"].get("namespace") or "default", (_controller(obj) or {}).get("uid") or "")
                index.setdefault(key, []).append(obj)
            self._owned[resource] = index
        meta = owner["metadata"]
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
        try:
            self.store.create(_REPLICASETS, rs)
        except ApiError as exc:
            if exc.code != 409:
                raise

    def _scale(self, rs: Mapping[str, Any], replicas: int) -> None:
        meta = rs["metadata"]

        def edit(obj: dict[str, Any]) -> None:
            obj.setdefault("spec", {})["replicas"] = replicas

        self._mutate(_REPLICASETS, meta["name"], meta.get("namespace"), edit)

    def _deployment_status(self, deployment: Mapping[str, Any]) -> None:
        current_name = (
            f"{deployment['metadata']['name']}-{template_hash((deployment.get('spec') or {}).get('template') or {})}"
        )
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
        active = [p for p in self._owned_by("pods", rs) if _active(p)]
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

    def _collect_garbage(self) -> None:
        nodes = {n["metadata"]["name"] for n in self.store.objects("nodes")}
        rs_uids = {rs["metadata"].get("uid") for rs in self.store.objects(_REPLICASETS)}
        deploy_uids = {d["metadata"].get("uid") for d in self.store.objects(_DEPLOYMENTS)}
        for pod in list(self.store.objects("pods")):
            meta = pod["metadata"]
            node = (pod.get("spec") or {}).get("nodeName")
            owner = _controller(pod)
            orphaned_by_node = bool(node) and node not in nodes
            orphaned_by_owner = (
                owner is not None and owner.get("kind") == "ReplicaSet" and owner.get("uid") not in rs_uids
            )
            if orphaned_by_node or orphaned_by_owner:
                self._delete("pods", meta["name"], meta.get("namespace"), grace=0)
        for rs in list(self.store.objects(_REPLICASETS)):
            owner = _controller(rs)
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
