"""Allocatable versus requested, per NodePool: the utilisation a reconcile pass reports.

Karpenter exports ``karpenter_nodes_allocatable`` and ``karpenter_nodes_total_pod_requests`` per
node (and ``cluster_utilization_percent``), ``karpenter-v1.md`` §5; a dashboard then divides one by
the other. Lambdas have no scrape target, so the pass computes the ratio itself, once per NodePool,
over the capacity the scheduler planned against: registered nodes that take pods plus in-flight
NodeClaims, with the pods bound or nominated to them (DaemonSet pods included, as their requests
use the node). Cordoned, deleting and ``karpenter.sh/disrupted`` nodes are not in that capacity:
they are leaving, and their pods are counted where they are going.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from nodesmith.core.resources import CPU, MEMORY

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

    from nodesmith.core.scheduling.types import ExistingNode

__all__ = ["UTILIZATION_RESOURCES", "nodepool_utilization"]

UTILIZATION_RESOURCES = (CPU, MEMORY)
"""Resources reported, in this order (metric dimension ``Resource``: ``cpu``, ``memory``)."""


def nodepool_utilization(capacity: Iterable[ExistingNode]) -> dict[str, dict[str, float]]:
    """Percent of allocatable that pods request, per NodePool and resource.

    ``capacity`` is the scheduler's view after a pass (:class:`~nodesmith.core.scheduling.types.ExistingNode`:
    ``allocatable`` in millicores / bytes, ``pods`` bound or nominated). Returns
    ``{nodepool: {"cpu": percent, "memory": percent}}`` with percents in 0..100 (more when pods
    over-request, which the scheduler does not plan but a user can bind by hand). Nodes without a
    NodePool (not launched by Nodesmith or Karpenter) and NodePools with no allocatable of a
    resource are left out, so an empty pool reports nothing rather than a misleading 0 %.
    """
    allocatable: dict[str, dict[str, int]] = {}
    requested: dict[str, dict[str, int]] = {}
    for node in capacity:
        if not node.nodepool:
            continue
        alloc = allocatable.setdefault(node.nodepool, {})
        req = requested.setdefault(node.nodepool, {})
        for resource in UTILIZATION_RESOURCES:
            alloc[resource] = alloc.get(resource, 0) + int(node.allocatable.get(resource, 0))
            req[resource] = req.get(resource, 0) + sum(int(p.requests.get(resource, 0)) for p in node.pods)
    return {
        pool: _percents(allocatable[pool], requested[pool])
        for pool in sorted(allocatable)
        if any(allocatable[pool].get(r, 0) > 0 for r in UTILIZATION_RESOURCES)
    }


def _percents(allocatable: Mapping[str, int], requested: Mapping[str, int]) -> dict[str, float]:
    return {
        resource: round(100.0 * requested.get(resource, 0) / allocatable[resource], 3)
        for resource in UTILIZATION_RESOURCES
        if allocatable.get(resource, 0) > 0
    }
