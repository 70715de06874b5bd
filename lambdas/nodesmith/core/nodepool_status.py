"""A NodePool's ``status`` as Karpenter fills it: node count, resources in use and readiness conditions.

Karpenter's ``nodepool.counter`` controller (``pkg/controllers/nodepool/counter``) sets
``status.resources`` to the capacity summed over the pool's nodes, starting from zero for cpu,
memory, pods, ephemeral-storage and nodes, and ``status.nodes`` to the node count; its
``nodepool.readiness`` controller sets ``NodeClassReady`` (``NodeClassNotFound`` /
``NodeClassTerminating`` when it is missing or deleting, else the EC2NodeClass's own ``Ready``: False with its
reason and message, ``NodeClassReadinessUnknown`` when Unknown), and ``Ready`` is true when
``ValidationSucceeded`` and ``NodeClassReady`` both are (``pkg/apis/v1/nodepool_status.go``). An EC2NodeClass
without a ``Ready`` condition yet is ``NodeClassReadinessUnknown`` too, as in Karpenter; the reconcile pass writes
the class's conditions before the NodePools' status, from the class as written.

A node of the pool is a Node labelled ``karpenter.sh/nodepool: <name>``, or a NodeClaim of the
pool whose Node has not registered yet (its ``status.capacity`` counts). A NodePool reaching this
function parsed as a valid NodePool, so ``ValidationSucceeded`` is true. Pure: times are epoch
seconds, passed in.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from nodesmith.core.api.common import NODEPOOL_LABEL_KEY
from nodesmith.core.resources import CPU, EPHEMERAL_STORAGE, MEMORY, PODS, format_quantity, parse_resource_list
from nodesmith.core.timestamps import to_rfc3339

if TYPE_CHECKING:
    from collections.abc import Sequence

    from nodesmith.core.api.ec2nodeclass import EC2NodeClass
    from nodesmith.core.api.nodeclaim import NodeClaim
    from nodesmith.core.api.nodepool import NodePool
    from nodesmith.core.model import Node

__all__ = ["nodepool_status", "status_changed"]

_COUNTED = (CPU, MEMORY, PODS, EPHEMERAL_STORAGE)


def _resources(pool: str, nodes: Sequence[Node], nodeclaims: Sequence[NodeClaim]) -> tuple[int, dict[str, str]]:
    totals = dict.fromkeys(_COUNTED, 0)
    count = 0
    registered = set()
    for node in nodes:
        if node.labels.get(NODEPOOL_LABEL_KEY) != pool:
            continue
        count += 1
        registered.add(node.provider_id)
        for key in _COUNTED:
            totals[key] += node.capacity.get(key, 0)
    for claim in nodeclaims:
        status = claim.status
        if claim.nodepool_name != pool or status is None or not status.provider_id:
            continue
        if status.provider_id in registered:
            continue
        count += 1
        capacity = parse_resource_list(status.capacity)
        for key in _COUNTED:
            totals[key] += capacity.get(key, 0)
    out = {key: format_quantity(key, amount) for key, amount in totals.items()}
    out["nodes"] = str(count)
    return count, out


def _condition(
    type_: str, ok: bool, reason: str, message: str, *, previous: dict[str, Any], now: float, generation: int | None
) -> dict[str, Any]:
    status = "True" if ok else "False"
    before = previous.get(type_) or {}
    since = before.get("lastTransitionTime") if before.get("status") == status else None
    condition: dict[str, Any] = {
        "type": type_,
        "status": status,
        "reason": type_ if ok else reason,
        "message": "" if ok else message,
        "lastTransitionTime": since or to_rfc3339(now),
    }
    if generation is not None:
        condition["observedGeneration"] = generation
    return condition


def _nodeclass_readiness(nodeclass: EC2NodeClass) -> tuple[bool, str, str]:
    ready = next((c for c in (nodeclass.status.conditions if nodeclass.status else []) if c.type == "Ready"), None)
    if ready is not None and ready.status == "True":
        return True, "", ""
    if ready is None or ready.status == "Unknown":
        return False, "NodeClassReadinessUnknown", "Node Class Readiness Unknown"
    return False, ready.reason or "NodeClassNotReady", ready.message or ""


def nodepool_status(
    *,
    nodepool: NodePool,
    nodes: Sequence[Node],
    nodeclaims: Sequence[NodeClaim],
    nodeclass: EC2NodeClass | None,
    now: float,
) -> dict[str, Any]:
    """The ``status`` (Kubernetes JSON) of ``nodepool`` given the cluster's Nodes and NodeClaims and its
    EC2NodeClass (None when it does not exist) at ``now`` (epoch seconds).

    Shape: ``{"resources": {cpu, memory, pods, ephemeral-storage, nodes: quantity strings},
    "nodes": int, "conditions": [ValidationSucceeded, NodeClassReady, Ready]}``; a condition keeps its
    ``lastTransitionTime`` while its status does not change.
    """
    count, resources = _resources(nodepool.name, nodes, nodeclaims)
    previous_status = nodepool.status
    previous = {
        c.type: c.model_dump(by_alias=True, exclude_none=True)
        for c in (previous_status.conditions if previous_status is not None else [])
    }
    generation = nodepool.metadata.generation
    ref = nodepool.spec.template.spec.node_class_ref.name
    if nodeclass is None:
        class_ok, class_reason, class_message = False, "NodeClassNotFound", f"EC2NodeClass {ref} not found on cluster"
    elif nodeclass.metadata.deletion_timestamp:
        class_ok, class_reason, class_message = False, "NodeClassTerminating", f"EC2NodeClass {ref} is terminating"
    else:
        class_ok, class_reason, class_message = _nodeclass_readiness(nodeclass)
    conditions = [
        _condition("ValidationSucceeded", True, "", "", previous=previous, now=now, generation=generation),
        _condition(
            "NodeClassReady", class_ok, class_reason, class_message, previous=previous, now=now, generation=generation
        ),
        _condition(
            "Ready",
            class_ok,
            "UnhealthyDependents",
            f"NodeClassReady=False ({class_reason})",
            previous=previous,
            now=now,
            generation=generation,
        ),
    ]
    return {"resources": resources, "nodes": count, "conditions": conditions}


def status_changed(nodepool: NodePool, status: dict[str, Any]) -> bool:
    """True when ``status`` (from :func:`nodepool_status`) differs from what ``nodepool`` carries."""
    current = nodepool.status.model_dump(by_alias=True, exclude_none=True) if nodepool.status is not None else {}
    return any(current.get(key) != value for key, value in status.items())
