"""The API server's update rules as one pure function: what a write turns the stored object into.

* ``main`` (PUT/PATCH of the resource): everything may change except identity fields; when the
  resource has a status subresource the stored ``status`` is kept.
* ``status`` (PUT/PATCH of ``/status``): only ``status`` changes.
* ``all`` (in-process controllers): spec, status and metadata may change.

In every mode ``name``, ``namespace``, ``uid``, ``creationTimestamp`` and the deletion fields are
kept; ``generation`` grows when anything outside ``metadata``/``status`` changes; a stale
``resourceVersion`` (when checked) or a different ``uid`` is a 409; finalizers cannot be added
to an object being deleted (422).
"""

from __future__ import annotations

import string
import uuid
from typing import TYPE_CHECKING, Any, Literal

from nodesmith.sim.kube import errors
from nodesmith.sim.kube.timefmt import rfc3339

if TYPE_CHECKING:
    import random
    from collections.abc import Callable

    from nodesmith.sim.kube.registry import ResourceType

__all__ = ["WriteMode", "merge_write", "prepare_create"]

WriteMode = Literal["main", "status", "all"]
_NAME_CHARS = "bcdfghjklmnpqrstvwxz2456789"  # apimachinery utilrand alphanums
_DNS_CHARS = frozenset(string.ascii_lowercase + string.digits + "-.")
_FIXED = ("name", "namespace", "uid", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds")


def _apply_mode(
    rt: ResourceType, old: dict[str, Any], new: dict[str, Any], new_meta: dict[str, Any], mode: WriteMode
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The written object and metadata before identity fields are restored, per write mode."""
    if mode == "status":
        result = dict(old)
        if "status" in new:
            result["status"] = new["status"]
        else:
            result.pop("status", None)
        return result, dict(old["metadata"])
    result = dict(new)
    if mode == "main" and rt.has_status:
        if "status" in old:
            result["status"] = old["status"]
        else:
            result.pop("status", None)
    return result, new_meta


def merge_write(
    rt: ResourceType, old: dict[str, Any], new: dict[str, Any], mode: WriteMode, *, check_rv: bool
) -> dict[str, Any]:
    """The object to store when ``new`` is written over ``old``; ``old`` itself when nothing changes.

    The returned object carries ``old``'s resourceVersion: the store assigns the next one.
    """
    old_meta = old["metadata"]
    new_meta = dict(new.get("metadata") or {})
    name = old_meta["name"]
    wanted_rv = new_meta.get("resourceVersion")
    if check_rv and wanted_rv not in (None, "") and str(wanted_rv) != old_meta["resourceVersion"]:
        raise errors.conflict(rt.plural, name, rt.group)
    if new_meta.get("uid") and new_meta["uid"] != old_meta["uid"]:
        raise errors.conflict(
            rt.plural,
            name,
            rt.group,
            f"Precondition failed: UID in precondition: {new_meta['uid']}, UID in object meta: {old_meta['uid']}",
        )
    result, new_meta = _apply_mode(rt, old, new, new_meta, mode)
    for fixed in _FIXED:
        if fixed in old_meta:
            new_meta[fixed] = old_meta[fixed]
        else:
            new_meta.pop(fixed, None)
    if old_meta.get("deletionTimestamp"):
        added = set(new_meta.get("finalizers") or []) - set(old_meta.get("finalizers") or [])
        if added:
            raise errors.invalid(
                rt.kind,
                name,
                "metadata.finalizers: Forbidden: no new finalizers can be added if the object is being deleted",
            )
    if rt.kind == "NodePool" and rt.group == "karpenter.sh":
        _static_stays_static(old, result, name)
    spec_changed = any(result.get(k) != old.get(k) for k in set(result) | set(old) if k not in ("metadata", "status"))
    new_meta["generation"] = int(old_meta.get("generation", 1)) + (1 if spec_changed else 0)
    new_meta["resourceVersion"] = old_meta["resourceVersion"]
    result["metadata"] = new_meta
    result["apiVersion"], result["kind"] = rt.api_version, rt.kind
    return old if result == old else result


def _static_stays_static(old: dict[str, Any], new: dict[str, Any], name: str) -> None:
    """Karpenter's CRD rule on ``NodePool.spec`` (``has(self.replicas) == has(oldSelf.replicas)``): an update never
    adds or removes ``spec.replicas`` (422 Invalid), as the API server's CEL validation answers."""
    had = (old.get("spec") or {}).get("replicas") is not None
    has = (new.get("spec") or {}).get("replicas") is not None
    if had != has:
        message = (
            'Invalid value: "object": spec.replicas cannot be added to or removed from an existing NodePool '
            "(a NodePool is static or dynamic for its whole life)"
        )
        error = errors.invalid("NodePool", name, f"spec: {message}")
        # kubectl prints details.causes, one "field: message" each (StandardErrorMessage)
        error.details["causes"] = [{"reason": "FieldValueInvalid", "message": message, "field": "spec"}]
        raise error


def _validate_name(rt: ResourceType, name: str) -> None:
    ok = 0 < len(name) <= 253 and set(name) <= _DNS_CHARS and name[0].isalnum() and name[-1].isalnum()
    if not ok:
        raise errors.invalid(
            rt.kind,
            name,
            "metadata.name: Invalid value: a lowercase RFC 1123 subdomain must "
            "consist of lower case alphanumeric characters, '-' or '.'",
        )


def prepare_create(
    rt: ResourceType,
    obj: Any,
    namespace: str | None,
    *,
    now: float,
    rng: random.Random,
    taken: Callable[[str | None, str], bool],
) -> dict[str, Any]:
    """``obj`` (a detached copy) as the API server would store it on create, without a resourceVersion.

    Resolves the namespace (400 when the body and the request disagree), ``generateName`` (five
    random characters, retried while ``taken``), validates the name (422), sets ``uid``,
    ``creationTimestamp`` and ``generation: 1``, drops deletion fields, drops ``status`` of custom
    resources and gives a pod without status ``phase: Pending``.
    """
    if not isinstance(obj, dict):
        raise errors.bad_request("object must be a JSON object")
    meta = obj.setdefault("metadata", {})
    if rt.namespaced:
        body_ns = meta.get("namespace")
        if namespace and body_ns and body_ns != namespace:
            raise errors.bad_request(
                "the namespace of the provided object does not match the namespace sent on the request"
            )
        meta["namespace"] = namespace or body_ns or "default"
    else:
        meta.pop("namespace", None)
    if not meta.get("name"):
        if not meta.get("generateName"):
            raise errors.invalid(rt.kind, "", "metadata.name: Required value: name or generateName is required")
        for _ in range(20):
            meta["name"] = meta["generateName"] + "".join(rng.choice(_NAME_CHARS) for _ in range(5))
            if not taken(meta.get("namespace"), meta["name"]):
                break
    _validate_name(rt, meta["name"])
    meta["uid"] = str(uuid.UUID(int=rng.getrandbits(128), version=4))
    meta["creationTimestamp"] = rfc3339(now)
    meta["generation"] = 1
    for transient in ("deletionTimestamp", "deletionGracePeriodSeconds", "resourceVersion"):
        meta.pop(transient, None)
    if rt.custom:
        obj.pop("status", None)
    elif rt.key == "pods":
        obj.setdefault("status", {}).setdefault("phase", "Pending")
    return {
        "apiVersion": rt.api_version,
        "kind": rt.kind,
        **{k: v for k, v in obj.items() if k not in ("apiVersion", "kind")},
    }
