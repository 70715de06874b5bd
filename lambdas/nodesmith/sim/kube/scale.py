"""The ``scale`` subresource (``autoscaling/v1 Scale``) of Deployments, ReplicaSets, StatefulSets and NodePools.

``GET`` answers a Scale built from the object; ``PUT``/``PATCH`` change only the replicas the Scale maps to (a
``metadata.resourceVersion`` in the Scale is a precondition, as upstream).

A custom resource's Scale follows its CRD's ``subresources.scale`` as the apiextensions server reads it: Karpenter's
NodePool CRD (``[core]:pkg/apis/crds/karpenter.sh_nodepools.yaml``) declares ``specReplicasPath: .spec.replicas``
and ``statusReplicasPath: .status.nodes`` and no ``labelSelectorPath``, so its Scale has no selector and a field
that is absent reads as 0. A write sets ``spec.replicas`` on the NodePool, which is then validated like any write
of it: a dynamic NodePool (no ``spec.replicas``) cannot be scaled, since a NodePool never turns static
(``has(self.replicas) == has(oldSelf.replicas)``), nor can one with a ``weight`` (422 Invalid, nothing stored).
"""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any

from nodesmith.sim.kube import errors, validation
from nodesmith.sim.kube.patching import MERGE_PATCH, apply_patch

if TYPE_CHECKING:
    from nodesmith.sim.kube.store import Store

__all__ = ["CUSTOM_SCALE_PATHS", "patch_scale", "read_scale", "write_scale"]

_SCALE_META = ("name", "namespace", "uid", "resourceVersion", "creationTimestamp")

CUSTOM_SCALE_PATHS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "nodepools.karpenter.sh": (("spec", "replicas"), ("status", "nodes")),
}
"""Per custom resource with a scale subresource: its CRD's (``specReplicasPath``, ``statusReplicasPath``)."""


def _selector_text(spec: dict[str, Any]) -> str:
    labels = ((spec.get("selector") or {}).get("matchLabels")) or {}
    return ",".join(f"{k}={v}" for k, v in sorted(labels.items()))


def _nested_int(obj: dict[str, Any], path: tuple[str, ...]) -> int:
    value: Any = obj
    for key in path:
        value = value.get(key) if isinstance(value, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def read_scale(store: Store, resource: str, name: str, *, namespace: str | None) -> dict[str, Any]:
    """The ``autoscaling/v1 Scale`` of one object; 404 if absent."""
    obj = store.get(resource, name, namespace=namespace)
    meta = obj["metadata"]
    spec = obj.get("spec") or {}
    paths = CUSTOM_SCALE_PATHS.get(resource)
    if paths is not None:
        status: dict[str, Any] = {"replicas": _nested_int(obj, paths[1])}
        replicas = _nested_int(obj, paths[0])
    else:
        status = {"replicas": int((obj.get("status") or {}).get("replicas", 0)), "selector": _selector_text(spec)}
        replicas = int(spec.get("replicas", 1))
    return {
        "apiVersion": "autoscaling/v1",
        "kind": "Scale",
        "metadata": {k: meta[k] for k in _SCALE_META if k in meta},
        "spec": {"replicas": replicas},
        "status": status,
    }


def _replicas_patch(resource: str, replicas: int) -> dict[str, Any]:
    path = CUSTOM_SCALE_PATHS.get(resource, (("spec", "replicas"), ()))[0]
    patch: dict[str, Any] = {path[-1]: replicas}
    for key in reversed(path[:-1]):
        patch = {key: patch}
    return patch


def write_scale(store: Store, resource: str, name: str, *, namespace: str | None, scale: Any) -> dict[str, Any]:
    """Set the replicas from a Scale body; returns the new Scale. 400 when the body is not an object; 422 without a
    non-negative integer ``spec.replicas``, or when the object with those replicas is not valid (NodePools)."""
    if not isinstance(scale, dict):
        raise errors.bad_request("the request body must be a Scale object")
    replicas = (scale.get("spec") or {}).get("replicas")
    if not isinstance(replicas, int) or isinstance(replicas, bool) or replicas < 0:
        raise errors.invalid("Scale", name, "spec.replicas: must be a non-negative integer")
    patch = _replicas_patch(resource, replicas)
    version = (scale.get("metadata") or {}).get("resourceVersion")
    if version:
        patch["metadata"] = {"resourceVersion": version}
    with store.condition:
        rt = store.registry.get(resource)
        if rt.custom:
            current = store.get(resource, name, namespace=namespace)
            validation.check(rt, apply_patch(current, copy.deepcopy(patch), MERGE_PATCH, custom=True))
        store.patch(resource, name, patch, namespace=namespace, content_type=MERGE_PATCH)
        return read_scale(store, resource, name, namespace=namespace)


def patch_scale(
    store: Store, resource: str, name: str, *, namespace: str | None, body: Any, content_type: str
) -> dict[str, Any]:
    """Apply a patch to the Scale, then write its replicas."""
    with store.condition:
        current = read_scale(store, resource, name, namespace=namespace)
        current["metadata"].pop("resourceVersion", None)
        patched = apply_patch(current, body, content_type, custom=False)
        return write_scale(store, resource, name, namespace=namespace, scale=patched)
