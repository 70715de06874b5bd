"""The ``scale`` subresource (``autoscaling/v1 Scale``) of Deployments, ReplicaSets and StatefulSets.

``GET`` answers a Scale built from the object; ``PUT``/``PATCH`` change only ``spec.replicas``
(a ``metadata.resourceVersion`` in the Scale is a precondition, as upstream).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from nodesmith.sim.kube import errors
from nodesmith.sim.kube.patching import MERGE_PATCH, apply_patch

if TYPE_CHECKING:
    from nodesmith.sim.kube.store import Store

__all__ = ["patch_scale", "read_scale", "write_scale"]

_SCALE_META = ("name", "namespace", "uid", "resourceVersion", "creationTimestamp")


def _selector_text(spec: dict[str, Any]) -> str:
    labels = ((spec.get("selector") or {}).get("matchLabels")) or {}
    return ",".join(f"{k}={v}" for k, v in sorted(labels.items()))


def read_scale(store: Store, resource: str, name: str, *, namespace: str | None) -> dict[str, Any]:
    """The ``autoscaling/v1 Scale`` of one object; 404 if absent."""
    obj = store.get(resource, name, namespace=namespace)
    meta = obj["metadata"]
    spec = obj.get("spec") or {}
    return {
        "apiVersion": "autoscaling/v1",
        "kind": "Scale",
        "metadata": {
            k: meta[k] for k in ("name", "namespace", "uid", "resourceVersion", "creationTimestamp") if k in meta
        },
        "spec": {"replicas": int(spec.get("replicas", 1))},
        "status": {"replicas": int((obj.get("status") or {}).get("replicas", 0)), "selector": _selector_text(spec)},
    }


def write_scale(store: Store, resource: str, name: str, *, namespace: str | None, scale: Any) -> dict[str, Any]:
    """Set ``spec.replicas`` from a Scale body; returns the new Scale. 422 without an integer ``spec.replicas``."""
    if not isinstance(scale, dict):
        raise errors.bad_request("the request body must be a Scale object")
    replicas = (scale.get("spec") or {}).get("replicas")
    if not isinstance(replicas, int) or isinstance(replicas, bool) or replicas < 0:
        raise errors.invalid("Scale", name, "spec.replicas: must be a non-negative integer")
    patch: dict[str, Any] = {"spec": {"replicas": replicas}}
    version = (scale.get("metadata") or {}).get("resourceVersion")
    if version:
        patch["metadata"] = {"resourceVersion": version}
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
