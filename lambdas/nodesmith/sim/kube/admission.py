"""Mutating admission the emulator plays on pod creation: Kubernetes' ``DefaultTolerationSeconds`` plugin.

Every pod created without a toleration of ``node.kubernetes.io/not-ready:NoExecute`` (resp.
``node.kubernetes.io/unreachable:NoExecute``) gets one, ``operator: Exists`` with ``tolerationSeconds`` set to the
API server's ``--default-not-ready-toleration-seconds`` (resp. ``--default-unreachable-toleration-seconds``), 300 s
by default. A toleration counts as one of that taint when its key is the taint's (or empty with ``Exists``) and
its effect is ``NoExecute`` or empty (Kubernetes ``plugin/pkg/admission/defaulttolerationseconds``; docs,
"Taints and Tolerations", "Taint based evictions"). DaemonSet pods come with tolerations of both taints without
``tolerationSeconds`` (the DaemonSet controller adds them), so they get none and are never evicted for them.
"""

from __future__ import annotations

from typing import Any

__all__ = ["DEFAULT_TOLERATION_SECONDS", "NOT_READY_TAINT", "UNREACHABLE_TAINT", "default_tolerations"]

NOT_READY_TAINT = "node.kubernetes.io/not-ready"
"""The node lifecycle controller's taint of a Node whose ``Ready`` condition is ``False``."""
UNREACHABLE_TAINT = "node.kubernetes.io/unreachable"
"""The node lifecycle controller's taint of a Node whose ``Ready`` condition is ``Unknown`` (kubelet silent)."""
DEFAULT_TOLERATION_SECONDS = 300
"""``--default-not-ready-toleration-seconds`` and ``--default-unreachable-toleration-seconds`` default."""


def _tolerates(toleration: Any, key: str) -> bool:
    if not isinstance(toleration, dict):
        return False
    if toleration.get("effect") not in (None, "", "NoExecute"):
        return False
    tkey = toleration.get("key") or ""
    return tkey == key or (not tkey and toleration.get("operator") == "Exists")


def default_tolerations(pod: dict[str, Any], *, not_ready_seconds: int, unreachable_seconds: int) -> None:
    """Add, in place, the ``DefaultTolerationSeconds`` tolerations ``pod`` (a ``v1 Pod`` dict) lacks (see the
    module docstring); seconds are the API server's flags. A pod without ``spec`` is left as it is (validation
    names it)."""
    spec = pod.get("spec")
    if not isinstance(spec, dict):
        return
    tolerations = spec.get("tolerations")
    existing = tolerations if isinstance(tolerations, list) else []
    added = [
        {"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": seconds}
        for key, seconds in ((NOT_READY_TAINT, not_ready_seconds), (UNREACHABLE_TAINT, unreachable_seconds))
        if not any(_tolerates(t, key) for t in existing)
    ]
    if added:
        spec["tolerations"] = [*existing, *added]
