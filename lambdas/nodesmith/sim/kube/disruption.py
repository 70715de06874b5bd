"""PodDisruptionBudget arithmetic for the emulator's Eviction API.

Follows the disruption controller (``pkg/controller/disruption/disruption.go``) and the eviction
REST handler (``pkg/registry/core/pod/storage/eviction.go``):

* healthy pods: matching pods without ``deletionTimestamp`` that are Ready (``Ready=True``; a
  Running pod that reports no conditions at all counts as ready, for simulated kubelets);
* ``minAvailable`` as an integer: desired = minAvailable, expected = number of matching pods;
* ``minAvailable`` as a percentage, or ``maxUnavailable``: expected = the sum of ``spec.replicas``
  of the pods' controllers (a pod without a known controller counts one); percentages round up;
  desired = minAvailable or expected - maxUnavailable;
* neither set: desired = 0;
* ``disruptionsAllowed = max(0, healthy - desired)``.

A pod that is Pending, Succeeded, Failed or already terminating is evictable regardless of budgets;
a pod that is not healthy is evictable when ``unhealthyPodEvictionPolicy`` is ``AlwaysAllow`` or
when the budget is currently met (``IfHealthyBudget``, the default).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from nodesmith.sim.kube.errors import ApiError, too_many_requests
from nodesmith.sim.kube.selectors import match_label_selector

__all__ = [
    "check_eviction",
    "controller_ref",
    "controller_uid",
    "ignores_budgets",
    "is_healthy",
    "pdb_status",
]

OwnerScale = Callable[[str, str, str], int | None]
"""(namespace, owner kind, owner name) -> spec.replicas of that controller, or None if unknown."""


def is_healthy(pod: Mapping[str, Any]) -> bool:
    """True for a pod that counts towards ``currentHealthy``: not terminating and Ready."""
    if (pod.get("metadata") or {}).get("deletionTimestamp"):
        return False
    status = pod.get("status") or {}
    conditions = status.get("conditions")
    if conditions:
        return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)
    return status.get("phase") == "Running"


def ignores_budgets(pod: Mapping[str, Any]) -> bool:
    """True when the Eviction API deletes ``pod`` without consulting budgets (``canIgnorePDB``)."""
    phase = (pod.get("status") or {}).get("phase", "Pending")
    return phase in ("Pending", "Succeeded", "Failed") or bool((pod.get("metadata") or {}).get("deletionTimestamp"))


def _scaled(value: int | str, total: int) -> int:
    """``intstr.GetScaledValueFromIntOrPercent`` with round-up."""
    if isinstance(value, int):
        return value
    text = str(value).strip()
    if text.endswith("%"):
        return math.ceil(int(text[:-1]) * total / 100)
    return int(text)


def controller_ref(obj: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """``obj``'s ownerReference marked ``controller: true`` (its managing controller), or None."""
    for ref in (obj.get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("controller"):
            return ref  # type: ignore[no-any-return]
    return None


def controller_uid(obj: Mapping[str, Any]) -> str:
    """The uid of ``obj``'s controller ownerReference ("" when it has none)."""
    return str((controller_ref(obj) or {}).get("uid") or "")


def _expected_from_controllers(pods: list[Mapping[str, Any]], namespace: str, owner_scale: OwnerScale) -> int:
    seen: set[tuple[str, str]] = set()
    total = 0
    for pod in pods:
        ref = controller_ref(pod)
        owner = (str(ref.get("kind", "")), str(ref.get("name", ""))) if ref is not None else None
        replicas = owner_scale(namespace, owner[0], owner[1]) if owner else None
        if owner is None or replicas is None:
            total += 1
        elif owner not in seen:
            seen.add(owner)
            total += replicas
    return total


def pdb_status(
    pdb: Mapping[str, Any], namespace_pods: Iterable[Mapping[str, Any]], owner_scale: OwnerScale, *, now_iso: str = ""
) -> dict[str, Any]:
    """The ``status`` the disruption controller would write for ``pdb`` over ``namespace_pods``.

    ``now_iso`` stamps the condition's ``lastTransitionTime`` (default: the budget's creation time).
    """
    spec = pdb.get("spec") or {}
    selector = spec.get("selector")
    pods = [p for p in namespace_pods if match_label_selector(selector, (p.get("metadata") or {}).get("labels") or {})]
    healthy = sum(1 for p in pods if is_healthy(p))
    min_available = spec.get("minAvailable")
    max_unavailable = spec.get("maxUnavailable")
    meta = pdb.get("metadata") or {}
    namespace = meta.get("namespace", "")
    if isinstance(min_available, int):
        expected, desired = len(pods), min_available
    elif min_available is not None:
        expected = _expected_from_controllers(pods, namespace, owner_scale)
        desired = _scaled(min_available, expected)
    elif max_unavailable is not None:
        expected = _expected_from_controllers(pods, namespace, owner_scale)
        desired = max(0, expected - _scaled(max_unavailable, expected))
    else:
        expected, desired = len(pods), 0
    allowed = max(0, healthy - desired)
    return {
        "observedGeneration": meta.get("generation", 1),
        "disruptionsAllowed": allowed,
        "currentHealthy": healthy,
        "desiredHealthy": desired,
        "expectedPods": expected,
        "conditions": [
            {
                "type": "DisruptionAllowed",
                "status": "True" if allowed > 0 else "False",
                "reason": "SufficientPods" if allowed > 0 else "InsufficientPods",
                "message": "",
                "lastTransitionTime": now_iso or meta.get("creationTimestamp") or "1970-01-01T00:00:00Z",
            }
        ],
    }


def check_eviction(
    pod: Mapping[str, Any],
    pdbs: Sequence[Mapping[str, Any]],
    budget_pods: Callable[[Mapping[str, Any]], Sequence[Mapping[str, Any]]],
    owner_scale: OwnerScale,
) -> None:
    """Raise the error the Eviction API would answer for ``pod``, or return if it may be evicted.

    ``pdbs`` are the namespace's budgets; those whose selector matches the pod apply. Two or more
    matching budgets are a 500 (upstream refuses to guess); a violated budget is a 429.
    ``budget_pods(pdb)`` lists the namespace's pods the budget may select (at least every pod it
    selects; :func:`pdb_status` applies the selector); it is called only when a budget applies.
    """
    if ignores_budgets(pod):
        return
    labels = (pod.get("metadata") or {}).get("labels") or {}
    matching = [p for p in pdbs if match_label_selector((p.get("spec") or {}).get("selector"), labels)]
    if not matching:
        return
    if len(matching) > 1:
        raise ApiError(
            500,
            "InternalError",
            "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support.",
        )
    pdb = matching[0]
    status = pdb_status(pdb, budget_pods(pdb), owner_scale)
    if not is_healthy(pod):
        policy = (pdb.get("spec") or {}).get("unhealthyPodEvictionPolicy", "IfHealthyBudget")
        if policy == "AlwaysAllow" or status["currentHealthy"] >= status["desiredHealthy"]:
            return
    elif status["disruptionsAllowed"] > 0:
        return
    name = (pdb.get("metadata") or {}).get("name", "")
    raise too_many_requests(
        "Cannot evict pod as it would violate the pod's disruption budget.",
        causes=[
            {
                "reason": "DisruptionBudget",
                "message": f"The disruption budget {name} needs {status['desiredHealthy']} healthy pods "
                f"and has {status['currentHealthy']} currently",
            }
        ],
    )
