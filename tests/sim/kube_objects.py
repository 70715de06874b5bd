"""Objects the Kubernetes API emulator tests create through the official client: pods and NodeClaims as the API
server takes them (plain dicts), and the ``karpenter.sh/v1`` group/version of the custom object calls."""

from __future__ import annotations

from typing import Any

KARPENTER = ("karpenter.sh", "v1")
"""Group and version of Karpenter's NodeClaims and NodePools, as the custom object calls take them."""


def pod(
    name: str,
    *,
    labels: dict[str, str] | None = None,
    node: str | None = None,
    phase: str = "Running",
    owner: tuple[str, str] | None = None,
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "labels": labels or {}}
    if owner:
        meta["ownerReferences"] = [
            {"apiVersion": "apps/v1", "kind": owner[0], "name": owner[1], "uid": "u", "controller": True}
        ]
    spec: dict[str, Any] = {"containers": [{"name": "c", "image": "pause"}]}
    if node:
        spec["nodeName"] = node
    return {"metadata": meta, "spec": spec, "status": {"phase": phase}}


def nodeclaim(name: str, **meta: Any) -> dict[str, Any]:
    return {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodeClaim",
        "metadata": {"name": name, **meta},
        "spec": {
            "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
            "requirements": [],
        },
        "status": {"providerID": "aws:///us-east-1a/i-1"},
    }


def names(items: list[Any]) -> list[str]:
    return sorted(i.metadata.name for i in items)
